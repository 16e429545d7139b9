"""CUDA-REPORT-1 … 4 on fixed texts (no toolchain needed): ptxas's -v lines, SASS opcode
histograms, the main loop, and the occupancy estimate, each against hand-computed values."""
from collections import Counter

import pytest

from tessera_ref.backends.cuda.report import KernelReport, main_loop, occupancy, parse_ptxas, parse_sass

PTXAS = """\
ptxas info    : 208 bytes gmem
ptxas info    : Function properties for _Z16tsr_reduce_exactdPdS_
ptxas         .     432 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'gemm' for 'sm_90'
ptxas info    : Function properties for gemm
ptxas         .     256 bytes stack frame, 8 bytes spill stores, 12 bytes spill loads
ptxas info    : Used 168 registers, used 1 barriers, 688 bytes cumulative stack size, 16384 bytes smem
ptxas info    : Compiling entry function 'axpy' for 'sm_90'
ptxas info    : Function properties for axpy
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 12 registers
"""


def test_ptxas_report_per_entry_function():
    ks = parse_ptxas(PTXAS)
    assert set(ks) == {"gemm", "axpy"}  # the out-of-line device function is not a kernel
    g = ks["gemm"]
    assert (g.arch, g.registers, g.barriers, g.shared_bytes) == ("sm_90", 168, 1, 16384)
    assert (g.stack_bytes, g.cumulative_stack_bytes, g.spill_stores, g.spill_loads) == (256, 688, 8, 12)
    a = ks["axpy"]
    assert (a.registers, a.barriers, a.shared_bytes, a.stack_bytes) == (12, 0, 0, 0)


SASS = """
\tcode for sm_90
\t\tFunction : gemm
\t.headerflags\t@"EF_CUDA_SM90"
        /*0000*/                   LDC R1, c[0x0][0x28] ;       /* 0x00000a00ff017b82 */
        /*0010*/                   LDGSTS.E.BYPASS.LTC128B.128 [R3], desc[UR4][R4.64] ; /* 0x0 */
        /*0020*/                   LDS.128 R8, [R2] ;          /* 0x0 */
        /*0030*/                   FFMA R0, R8, R9, R0 ;       /* 0x0 */
        /*0040*/                   FFMA R1, R8, R10, R1 ;      /* 0x0 */
        /*0050*/               @P0 BRA 0x20 ;                  /* 0x0 */
        /*0060*/                   LDS R4, [R2] ;              /* 0x0 */
        /*0070*/              @!P1 BRA 0x60 ;                  /* 0x0 */
        /*0080*/                   SHFL.BFLY PT, R5, R4, 0x1, 0x1f ; /* 0x0 */
        /*0090*/                   EXIT ;                      /* 0x0 */
        /*00a0*/                   BRA 0xa0 ;                  /* 0x0 */
\t\t..........
\t\tFunction : axpy
        /*0000*/                   FMUL R0, R1, R2 ;           /* 0x0 */
        /*0010*/                   FADD R0, R0, R3 ;           /* 0x0 */
        /*0020*/                   EXIT ;                      /* 0x0 */
"""


def test_sass_opcodes_keep_their_modifiers_and_drop_predicates():
    fns = parse_sass(SASS)
    ops = Counter(op for _, op, _ in fns["gemm"])
    assert ops == Counter({"LDC": 1, "LDGSTS.E.BYPASS.LTC128B.128": 1, "LDS.128": 1, "FFMA": 2, "BRA": 3, "LDS": 1,
                           "SHFL.BFLY": 1, "EXIT": 1})
    assert [op for _, op, _ in fns["axpy"]] == ["FMUL", "FADD", "EXIT"]


def test_main_loop_is_the_largest_innermost_backward_branch():
    loop = main_loop(parse_sass(SASS)["gemm"])  # loops 0x20-0x50 (4 instructions + BRA) and 0x60-0x70
    assert loop == Counter({"LDS.128": 1, "FFMA": 2, "BRA": 1})
    k = KernelReport("gemm", "sm_90", main_loop=loop)
    assert k.share("FFMA") == 0.5 and k.share("LDS") == 0.25 and k.share("HMMA") == 0.0
    # no loop at all: the whole function
    assert main_loop(parse_sass(SASS)["axpy"]) == Counter({"FMUL": 1, "FADD": 1, "EXIT": 1})


@pytest.mark.parametrize("arch,regs,threads,smem,dyn,blocks,limiter", [
    # 128 regs x 32 lanes = 4096 per warp, 8 warps per block -> 32768: 2 blocks by registers
    ("sm_90", 128, 256, 0, 0, 2, "registers"),
    # 32 regs: 1024 per warp, 4 warps -> 16 blocks by registers; 2048/128 = 16 by threads; ties keep the first
    ("sm_80", 32, 128, 0, 0, 16, "registers"),
    # 100 KB + 1 KB reserved: 164 KB / 101 KB = 1 block on sm_80, 228 / 101 = 2 on sm_90
    ("sm_80", 32, 128, 50 * 1024, 50 * 1024, 1, "shared memory"),
    ("sm_90", 32, 128, 50 * 1024, 50 * 1024, 2, "shared memory"),
    # above the per-block maximum (163 KB on sm_80): nothing fits
    ("sm_80", 32, 128, 0, 164 * 1024, 0, "shared memory"),
    # 16 regs, 32 threads: the 32-block limit
    ("sm_90", 16, 32, 0, 0, 32, "blocks"),
])
def test_occupancy_by_hand(arch, regs, threads, smem, dyn, blocks, limiter):
    occ = occupancy(KernelReport("k", arch, registers=regs, shared_bytes=smem), threads, dyn)
    assert (occ.blocks, occ.limiter) == (blocks, limiter)
    assert occ.warps == blocks * (threads // 32) and occ.fraction == occ.warps / 64
