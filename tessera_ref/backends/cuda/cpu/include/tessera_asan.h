// tessera_asan.h: main() of the AddressSanitizer build of the CUDA-on-CPU harness (CUDA-CPU-10).
//
// The ASan build is an executable, not a library: ASan's runtime must be the first library of its
// process, which a Python interpreter loading a kernel with ctypes is not. The harness
// (tessera_ref/backends/cuda/cpu/asan.py) writes one launch to a file and runs
//   <kernel executable> <launch file> <result file>
// The launch file: "TSRASAN1", the kernel's name (u32 length, bytes), grid (3 x i64), lanes (i32),
// tsr_cpu_options, the argument count (u32), then per argument its size (u64) and bytes. Every
// argument and the dynamic shared memory get a heap block of exactly their size from ASan's
// allocator (redzones right before and after each); their addresses go to stderr as
//   tsr-asan region <argument index | smem> <address> <bytes>
// so that a report's "region [a, b)" names the argument. After the launch the result file holds
// tsr_cpu_result and every argument's bytes; an invalid access ends the process in ASan's report.
#pragma once
#if !defined(__SANITIZE_ADDRESS__)
#error "tessera_asan.h is the driver of the -fsanitize=address build"
#endif
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace tsr_cpu {

typedef int (*Launch)(const long*, int, void**, const tsr_cpu_options*, tsr_cpu_result*);
struct Launcher { const char* name; Launch launch; };

inline void* exact_block(size_t bytes) {  // 64-byte aligned, `bytes` addressable, redzones around
  void* p = nullptr;
  if (posix_memalign(&p, 64, bytes)) {
    fprintf(stderr, "tsr-asan: out of memory (%zu bytes)\n", bytes);
    exit(3);
  }
  return p;
}

inline void on_death() {  // after ASan's report: which fiber and block made the access
  Runtime& r = rt();
  if (r.cur) fprintf(stderr, "tsr-asan at thread %u block %u %u %u\n", r.cur->lane, r.block.x, r.block.y, r.block.z);
}

inline int drive(int argc, char** argv, const Launcher* kernels, size_t count) {
  __sanitizer_set_death_callback(on_death);
  FILE* in = argc == 3 ? fopen(argv[1], "rb") : nullptr;
  if (!in) {
    fprintf(stderr, "tsr-asan: usage: %s LAUNCH-FILE RESULT-FILE\n", argv[0]);
    return 2;
  }
  bool ok = true;
  auto get = [&](void* to, size_t n) { ok = ok && fread(to, 1, n, in) == n; };
  char magic[8];
  unsigned name_len = 0, nargs = 0;
  long grid[3];
  int lanes = 0;
  tsr_cpu_options opt;
  get(magic, 8);
  get(&name_len, 4);
  std::string name(ok ? name_len : 0, '\0');
  get(&name[0], name.size());
  get(grid, sizeof grid);
  get(&lanes, 4);
  get(&opt, sizeof opt);
  get(&nargs, 4);
  std::vector<void*> args;
  std::vector<size_t> sizes;
  for (unsigned i = 0; ok && i < nargs; ++i) {
    unsigned long long n = 0;
    get(&n, 8);
    args.push_back(exact_block(n));
    sizes.push_back(n);
    get(args.back(), n);
  }
  fclose(in);
  Launch launch = nullptr;
  for (size_t k = 0; k < count; ++k)
    if (name == kernels[k].name) launch = kernels[k].launch;
  if (!ok || std::memcmp(magic, "TSRASAN1", 8) || !launch || opt.smem < 0) {
    fprintf(stderr, "tsr-asan: a malformed launch file %s (kernel '%s')\n", argv[1], name.c_str());
    return 2;
  }
  tsr_cpu_smem_block = (unsigned char*)exact_block((size_t)opt.smem);
  for (unsigned i = 0; i < nargs; ++i) fprintf(stderr, "tsr-asan region %u %p %zu\n", i, args[i], sizes[i]);
  fprintf(stderr, "tsr-asan region smem %p %ld\n", (void*)tsr_cpu_smem_block, opt.smem);
  tsr_cpu_result result;
  launch(grid, lanes, args.data(), &opt, &result);
  FILE* out = fopen(argv[2], "wb");
  ok = out && fwrite(&result, sizeof result, 1, out) == 1;
  for (unsigned i = 0; ok && i < nargs; ++i) ok = fwrite(args[i], 1, sizes[i], out) == sizes[i];
  ok = out && fclose(out) == 0 && ok;
  for (void* p : args) free(p);
  free(tsr_cpu_smem_block);
  if (!ok) fprintf(stderr, "tsr-asan: could not write %s\n", argv[2]);
  return ok ? 0 : 2;
}

}  // namespace tsr_cpu

// main() launching the kernels listed as {"name", &tsr_launch_name}, ...
#define TSR_CPU_ASAN_MAIN(...)                                                    \
  int main(int argc, char** argv) {                                               \
    static const tsr_cpu::Launcher kernels[] = {__VA_ARGS__};                     \
    return tsr_cpu::drive(argc, argv, kernels, sizeof kernels / sizeof *kernels); \
  }
