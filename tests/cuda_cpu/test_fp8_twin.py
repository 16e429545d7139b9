"""fp8 tensor-core GEMMs on the CUDA-on-CPU harness (CUDA-TC-3, CUDA-CPU-7): under ``tc:sm90``
the rendered ``mma.sync.m16n8k32`` kernels give the interpreter's bits (the twin's instruction
computes numerics/tc.py's fp8 instruction: two f16 blocks over k mod 4, then an f32 add of C),
and the twin reads the instruction's fragments where the PTX ISA's m16n8k32 figures put them —
checked on one instruction with a single nonzero byte placed by hand."""
import ml_dtypes
import numpy as np
import pytest

import tessera_ref as t
from cpu_programs import bits, run_on, run_text
from cuda_programs import h200_cases
from tessera_conformance.cases.numerics._common import fp8_structure_rows
from tessera_ref import backends, op
from tessera_ref.backends.cuda.source import render
from tessera_ref.lowering import lower
from tessera_ref.numerics import tc

DTYPES = {"fp8_e4m3": ml_dtypes.float8_e4m3fn, "fp8_e5m2": ml_dtypes.float8_e5m2}

#: name -> (M, N, K, with C, directives)
GEMMS = {
    "64^3": (64, 64, 64, False, None),
    "128^3": (128, 128, 128, False, dict(tile=(64, 64, 32), lanes=128)),
    "128^3 tile 128x128x64": (128, 128, 128, False, dict(tile=(128, 128, 64), lanes=256, stages=3)),
    "96x64x160 with C": (96, 64, 160, True, None),
    "64x128x96 with C, padded": (64, 128, 96, True, dict(tile=(32, 64, 32), lanes=64, padding=4)),
}


def _gemm(fmt, M, N, K, with_c, directives, seed=5, plant=False):
    rng = np.random.default_rng(seed)
    dtype = DTYPES[fmt]
    # a spread of exponents, so that the blocks' alignment and truncation matter
    A = (rng.standard_normal((M, K)) * np.exp2(rng.integers(-4, 5, (M, K)))).astype(dtype)
    B = rng.standard_normal((K, N)).astype(dtype)
    args = [A, B] + ([rng.standard_normal((M, N)).astype(dtype)] if with_c else [])
    if plant:
        fp8_structure_rows(*args)
    pol = t.Policy(fmt, accum="tc:sm90")
    traced = [t.asarray(x, policy=pol) for x in args]
    fn = (lambda p, q, r: op.gemm(p, q, r)) if with_c else (lambda p, q: op.matmul(p, q))
    program = lower(t.jit(fn).trace(*traced), directives)
    with backends.use("interp"):
        want, _ = program.run(*args)
    return program, args, want


@pytest.mark.parametrize("fmt", sorted(DTYPES))
@pytest.mark.parametrize("name", sorted(GEMMS))
def test_fp8_gemms_give_the_interpreters_tc_sm90_bits(name, fmt):
    program, args, want = _gemm(fmt, *GEMMS[name])
    text = render(program.tile).text
    assert f"tsr_mma_m16n8k32_{fmt[4:]}(" in text and "m16n8k16" not in text
    for schedule, cp_async in (("lockstep", "deferred"), ("reverse", "eager"), ("random:4", "deferred"),
                               ("random:9", "eager")):
        got, reports = run_on(program, args, schedule, cp_async)
        assert reports and all(r.schedule == schedule and r.cp_async == cp_async for r in reports)
        assert np.asarray(got[0]).dtype == np.asarray(want[0]).dtype
        assert np.array_equal(bits(got[0]), bits(want[0])), (name, fmt, schedule, cp_async)


def _specials(fmt, a, b):
    """NaN, zero rows, each format's largest finite value (e4m3 products overflow to its NaN in
    the fp8 store), and for e5m2 infinities of both signs."""
    a[3, 5], a[7, :] = np.nan, 0
    big = float(ml_dtypes.finfo(DTYPES[fmt]).max)
    a[20, 1], b[1, :] = big, big
    if fmt == "fp8_e5m2":
        b[2, 9], b[4, 10], a[11, 4] = np.inf, -np.inf, np.inf


#: name -> (fmt, function, operand shapes)
VARIANTS = {
    "transposed": ("fp8_e4m3", lambda p, q: op.matmul(p, q, transpose_a=True, transpose_b=True), [(64, 64)] * 2),
    "batched": ("fp8_e5m2", lambda p, q: op.matmul(p, q), [(2, 64, 96), (96, 64)]),
    "special values e4m3": ("fp8_e4m3", lambda p, q: op.matmul(p, q), [(64, 64)] * 2),
    "special values e5m2": ("fp8_e5m2", lambda p, q: op.matmul(p, q), [(64, 64)] * 2),
}


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_fp8_variants_give_the_interpreters_bits(name):
    fmt, fn, shapes = VARIANTS[name]
    rng = np.random.default_rng(8)
    args = [rng.standard_normal(s).astype(DTYPES[fmt]) for s in shapes]
    if name.startswith("special"):
        _specials(fmt, *args)
    pol = t.Policy(fmt, accum="tc:sm90")
    program = lower(t.jit(fn).trace(*(t.asarray(x, policy=pol) for x in args)))
    assert "tsr_mma_m16n8k32_" in render(program.tile).text
    with backends.use("interp"):
        want, _ = program.run(*args)
    if name.startswith("special"):
        assert np.isnan(want[0].astype(np.float32)).any()
    for schedule, cp_async in (("reverse", "deferred"), ("random:2", "eager")):
        assert np.array_equal(bits(run_on(program, args, schedule, cp_async)[0][0]), bits(want[0])), name


def test_the_fp8_model_is_what_the_bits_show():
    """The bits the harness matches are the fp8 model's (numerics.tc.mma, validated on an H200),
    on outputs planted to show its structure (fp8_structure_rows (tessera_conformance)):

    (0, 0): eight products 1.5·2^-12 at k mod 4 in {0, 1} sum exactly in the first block to
    3·2^-10; the second (128·128 = 2^14 and 32·64 = 2^11: E = 14, grid 2^-11) keeps them, and
    toward zero to 24 bits gives 2^14 + 2^11 + 2^-9: above the e5m2 tie, 20480 (as the exact
    sum). (1, 1): the eight at k mod 4 in {2, 3}, in the 2^14's block: each 0.75 of the grid,
    cut to 0; 2^14 + 2^11 is the tie, to even: 16384 (the exact sum gives 20480). (2, 2): the
    products 1024 and −1024 cancel to +0; C = 2^-16 is added after by the f32 add: 2^-16 (in the
    block, below its grid 2^-15, it would be cut)."""
    program, (A, B, C), want = _gemm("fp8_e5m2", 96, 64, 160, True, None, plant=True)
    got = run_on(program, (A, B, C), "reverse", "eager")[0][0]
    assert np.array_equal(bits(got), bits(want[0]))
    assert [float(want[0][i, i]) for i in range(3)] == [20480.0, 16384.0, 2.0 ** -16]
    model = tc.mma(A, B, C.astype(np.float32), "tc:sm90").astype(want[0].dtype)
    assert np.array_equal(bits(want[0]), bits(model))
    exact = (A.astype(np.float64) @ B.astype(np.float64) + C.astype(np.float64)).astype(np.float32)
    assert float(exact[1, 1].astype(want[0].dtype)) == 20480.0


#: chains of m16n8k32 instructions on hand-packed registers, one 16 × 8 tile a block:
#: regs[tile][step][lane] = a0..a3, b0, b1; c and d [tile][lane][4]
MMA_TILES = """
extern "C" __global__ void mma_tiles(const unsigned* regs, const float* c, float* d, int e5m2, int steps) {
  int l = threadIdx.x, at = blockIdx.x * 32 + l;
  float acc[4] = {c[4 * at], c[4 * at + 1], c[4 * at + 2], c[4 * at + 3]};
  for (int s = 0; s < steps; ++s) {
    const unsigned* r = regs + 6 * ((blockIdx.x * steps + s) * 32 + l);
    unsigned a[4] = {r[0], r[1], r[2], r[3]};
    unsigned b[2] = {r[4], r[5]};
    if (e5m2) tsr_mma_m16n8k32_e5m2(acc, a, b, acc);
    else tsr_mma_m16n8k32_e4m3(acc, a, b, acc);
  }
  for (int i = 0; i < 4; ++i) d[4 * at + i] = acc[i];
}
"""


def _run_tiles(fmt, regs, c, d):
    """:data:`MMA_TILES` on the twin with ``fmt``'s tc:sm90 instruction (regs [tiles, steps, 32, 6])."""
    blk = tc.model("tc:sm90").block(f"fp8_{fmt}").resolved(f"fp8_{fmt}")
    run_text(MMA_TILES, "mma_tiles", (regs.shape[0],), 32,
             [regs, c, d, np.int32(fmt == "e5m2"), np.int32(regs.shape[1])], tc=blk)


#: Hand-placed cases, read off the PTX ISA's m16n8k32 .e4m3/.e5m2 fragment figures
#: (g = lane >> 2, t = lane % 4; A a_i: row g for i in 0-3 and 8-11, g + 8 otherwise; column
#: 4t + (i & 3), + 16 for i >= 8; register i // 4 holds a_i in byte i % 4. B b_i: row
#: 4t + (i & 3), + 16 for i >= 4, column g; register i // 4, byte i % 4. D c_i: row g (+ 8 for
#: i >= 2), column 2t + (i & 1)).
#: (A lane, A register, byte) -> (row, k); (B lane, register, byte) -> (k, column); the output
#: (row, column) -> (D lane, register).
CASES = [
    # a_11 of lane 9 (g 2, t 1): register 2 byte 3 = (2, 4 + 3 + 16 = 23); b_7 of lane 13
    # (g 3, t 1): register 1 byte 3 = (23, 3). D (2, 3): lane 4·2 + 1 = 9, c1.
    ((9, 2, 3), (13, 1, 3), (9, 1)),
    # a_4 of lane 30 (g 7, t 2): register 1 byte 0 = (15, 8); b_0 of lane 2 (g 0, t 2): register
    # 0 byte 0 = (8, 0). D (15, 0): lane 4·7 + 0 = 28, c2.
    ((30, 1, 0), (2, 0, 0), (28, 2)),
    # a_14 of lane 3 (g 0, t 3): register 3 byte 2 = (8, 12 + 2 + 16 = 30); b_6 of lane 31
    # (g 7, t 3): register 1 byte 2 = (30, 7). D (8, 7): lane 4·0 + 3 = 3, c3.
    ((3, 3, 2), (31, 1, 2), (3, 3)),
    # a_1 of lane 0: register 0 byte 1 = (0, 1); b_1 of lane 20 (g 5, t 0): register 0 byte 1 =
    # (1, 5). D (0, 5): lane 2, c1.
    ((0, 0, 1), (20, 0, 1), (2, 1)),
]
#: codes of 2.0 and 3.0 (their product 6 + C's 0.25 is exact in f32)
TWO, THREE = {"e4m3": 0x40, "e5m2": 0x40}, {"e4m3": 0x44, "e5m2": 0x42}


@pytest.mark.parametrize("fmt", ["e4m3", "e5m2"])
@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_twins_m16n8k32_reads_the_ptx_fragment_layout(case, fmt):
    (la, ra, ba), (lb, rb, bb), (ld, rd) = CASES[case]
    regs = np.zeros((1, 1, 32, 6), np.uint32)
    regs[0, 0, la, ra] = TWO[fmt] << (8 * ba)
    regs[0, 0, lb, 4 + rb] = THREE[fmt] << (8 * bb)
    c = np.full((32, 4), 0.25, np.float32)
    d = np.zeros((32, 4), np.float32)
    _run_tiles(fmt, regs, c, d)
    want = np.full((32, 4), 0.25, np.float32)
    want[ld, rd] = 6.25
    assert np.array_equal(d, want), np.argwhere(d != want)
    # the same A byte against a B byte one k further on meets nothing: no product anywhere
    regs[0, 0, lb, 4 + rb] = THREE[fmt] << (8 * ((bb + 1) % 4)) if bb < 3 else THREE[fmt] << (8 * (bb - 1))
    _run_tiles(fmt, regs, c, d)
    assert np.array_equal(d, np.full((32, 4), 0.25, np.float32))


def _fragments(A, B, C):
    """The m16n8k32 registers of ``A`` [M, K] and ``B`` [K, N] (fp8 codes) and C [M, N] per
    16 × 8 tile (row-major tiles), in the layout of the comment above :data:`CASES`:
    ``(regs [tiles, K/32, 32, 6], c [tiles, 32, 4])`` and the (row, column) of each c."""
    M, K = A.shape
    N = B.shape[1]
    lane = np.arange(32)
    g, t = lane >> 2, lane & 3
    j, q = np.arange(4)[:, None], np.arange(4)[None, :]  # register, byte
    a_row = g[:, None, None] + 8 * (j % 2)[None]                # [lane, j, 1]
    a_col = (4 * t)[:, None, None] + q[None] + 16 * (j // 2)[None]  # [lane, j, q]
    b_row = (4 * t)[:, None, None] + q[None] + 16 * j[:2][None]  # [lane, j < 2, q]
    c_row = g[:, None] + 8 * (np.arange(4) >= 2)[None]
    c_col = (2 * t)[:, None] + (np.arange(4) & 1)[None]
    regs, cs, where = [], [], []
    for m0 in range(0, M, 16):
        for n0 in range(0, N, 8):
            steps = []
            for k0 in range(0, K, 32):
                a = A[m0 + a_row, k0 + a_col].astype(np.uint32)                 # [32, 4, 4]
                b = B[k0 + b_row, n0 + g[:, None, None]].astype(np.uint32)     # [32, 2, 4]
                pack = lambda x: (x << (8 * np.arange(4))).sum(axis=-1, dtype=np.uint32)  # noqa: E731
                steps.append(np.concatenate([pack(a), pack(b)], axis=1))
            regs.append(steps)
            cs.append(C[m0 + c_row, n0 + c_col])
            where.append((m0 + c_row, n0 + c_col))
    return np.array(regs, np.uint32), np.array(cs, np.float32), where


@pytest.mark.parametrize("fmt", ["fp8_e4m3", "fp8_e5m2"])
def test_the_twins_m16n8k32_gives_the_h200s_bits(fmt):
    """Every fp8 case of tests/cuda/data/h200_mma_2026-11-28.npz through the twin's instruction,
    chained over K as the device's kernel did: the device's bits (NaN: NaN)."""
    checked = 0
    for K in (32, 128):
        cases = [case for case in h200_cases(fmt) if case[1].shape[1] == K]
        packed = [_fragments(a.view(np.uint8), b.view(np.uint8), c) for _, a, b, c, _ in cases]
        regs = np.concatenate([p[0] for p in packed])
        c = np.concatenate([p[1] for p in packed])
        d = np.zeros_like(c)
        _run_tiles(fmt[4:], regs, c, d)
        tile = 0
        for (key, *_, want), (_, _, where) in zip(cases, packed):
            got = np.zeros_like(want)
            for rows, cols in where:
                got[rows, cols] = d[tile]
                tile += 1
            same = np.where(np.isnan(want), np.isnan(got), got.view(np.uint32) == want.view(np.uint32))
            assert same.all(), (key, np.argwhere(~same)[:3])
            checked += want.size
    assert checked == 31616
