// cuda_fp16.h of the CUDA-on-CPU harness: the CPU twin stands in for CUDA's device headers (CUDA-CPU-1).
#include "tessera_cpu.h"
