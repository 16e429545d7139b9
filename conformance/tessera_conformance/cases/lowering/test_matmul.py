"""LOWER-MATMUL: the k order, the cp.async pipeline, storing the result, batches and transposes."""
import numpy as np
import pytest

from tessera_ref import op
from tessera_conformance import assert_bits, clause

from ..tiles.support import dtype, findings, fma_chain, part, round_to
from .support import graph, kernels, lowered, planted_race, schedule_of, sixteenths, skeleton, tile_funcs

RNG = np.random.default_rng(21)


def mm(a, b):
    return op.matmul(a, b)


def gemm(a, b, c):
    return op.gemm(a, b, c)


@clause("LOWER-MATMUL-1", "LOWER-EXACT-1")
@pytest.mark.parametrize("directives", [dict(tile=(32, 32, 16)), dict(tile=(16, 64, 64), stages=3),
                                        dict(tile=(64, 16, 8), shared=False), dict(tile=(32, 32, 32), padding=1)])
def test_each_element_is_the_fma_chain_in_k_order(backend, directives):
    """Sums pass 2^16: the f32 fma chain in k order is the only order giving these bits."""
    a, b = sixteenths(RNG, (64, 96)), sixteenths(RNG, (96, 64))
    got, reports, _ = lowered(backend, mm, a, b, directives=directives)
    want = fma_chain(a, b).astype(np.float32)
    assert_bits(got[0], want)
    assert_bits(got, graph(mm, a, b))
    assert findings(backend, reports[0]) == []
    assert not np.array_equal(want, (a.astype(np.float64) @ b).astype(np.float32))


@clause("LOWER-MATMUL-1", "LOWER-EXACT-1")
@pytest.mark.parametrize("shared", [True, False])
def test_the_accumulator_starts_at_c(backend, shared):
    a, b, c = sixteenths(RNG, (32, 64)), sixteenths(RNG, (64, 32)), sixteenths(RNG, (32, 32), top=2 ** 15)
    c[0, :4] = [-0.0, 0.0, -0.0, 0.0]
    a[0, :] = 0.0  # row 0: C's signed zeros meet ±0 products (IEEE sums of zeros)
    got, _, _ = lowered(backend, gemm, a, b, c, directives=dict(tile=(16, 16, 16), shared=shared))
    assert_bits(got[0], fma_chain(a, b, c=c).astype(np.float32))
    assert_bits(got, graph(gemm, a, b, c))


def _loop(func):
    sk = skeleton(func.regions[0].entry)
    i = sk.index("for")
    return sk[:i], sk[i + 1], sk[i + 2:]


@clause("LOWER-MATMUL-2")
@pytest.mark.parametrize("stages, padding, swizzle", [(2, 0, "none"), (3, 1, "none"), (4, 0, "xor"), (5, 2, "none")])
def test_the_cp_async_pipeline(backend, stages, padding, swizzle):
    """S rings per operand; the prologue commits S − 1 groups; each iteration waits for at most
    S − 2, passes one barrier, refills (if a tile is left), commits, runs the mma; wait(0) after."""
    a, b = sixteenths(RNG, (32, 64)), sixteenths(RNG, (64, 32))
    directives = dict(tile=(32, 32, 16), stages=stages, padding=padding, swizzle=swizzle)
    got, reports, program = lowered(backend, mm, a, b, directives=directives)
    assert_bits(got[0], fma_chain(a, b).astype(np.float32))
    assert findings(backend, reports[0]) == []
    before, body, after = _loop(tile_funcs(program)[0])
    assert before[:2] == [f"alloc {stages}x16x32xf32 pad={padding} {swizzle}",  # A k-major (LOWER-MATMUL-5)
                          f"alloc {stages}x16x32xf32 pad={padding} {swizzle}"]
    assert before.count("cp_async_commit") == stages - 1
    assert [x for x in body if not isinstance(x, list)] == [f"cp_async_wait {stages - 2}", "barrier", "if",
                                                            "cp_async_commit", "mma"]
    assert body[body.index("if") + 1] == ["cp_async", "cp_async"]
    assert after[0] == "cp_async_wait 0"


@clause("LOWER-MATMUL-2")
@pytest.mark.parametrize("directives, body", [
    (dict(async_copy=False, stages=3), ["cp_async", "cp_async", "cp_async_commit", "cp_async_wait 0", "barrier",
                                        "mma", "barrier"]),
    (dict(stages=1), ["cp_async", "cp_async", "cp_async_commit", "cp_async_wait 0", "barrier", "mma", "barrier"]),
    (dict(shared=False), ["mma"]),
])
def test_without_the_pipeline(backend, directives, body):
    a, b = sixteenths(RNG, (32, 64)), sixteenths(RNG, (64, 32))
    got, _, program = lowered(backend, mm, a, b, directives=dict(tile=(32, 32, 16), **directives))
    assert_bits(got[0], fma_chain(a, b).astype(np.float32))
    before, loop, _ = _loop(tile_funcs(program)[0])
    assert loop == body
    assert directives.get("shared", True) or not [x for x in before if str(x).startswith("alloc")]


@clause("LOWER-MATMUL-2", "LOWER-EXACT-1")
@pytest.mark.parametrize("stages", [2, 3])
def test_the_pipeline_barrier_is_what_makes_it_correct(backend, stages):
    a, b = sixteenths(RNG, (64, 64)), sixteenths(RNG, (64, 64))
    _, _, program = lowered(backend, mm, a, b, directives=dict(tile=(32, 32, 16), stages=stages))
    planted_race(backend, program, (a, b), '"tessera.tile.barrier"', '"tessera.tile.for"')


@clause("LOWER-MATMUL-3", "LOWER-MATMUL-5", "LOWER-EXACT-1")
@pytest.mark.parametrize("lanes", [256, 128])
@pytest.mark.parametrize("fmt", ["f16", "bf16", "fp8_e4m3", "fp8_e5m2", "f32"])
def test_a_narrow_result_goes_through_an_accum_tile_rounded_once(backend, fmt, lanes):
    """With 256 lanes a 16 x 16 tile has one element per lane (cyclic fragments): the shared
    accum tile; with 128, register-blocked fragments stored straight into D. Same bits."""
    span = {"fp8_e4m3": 6, "fp8_e5m2": 6}.get(fmt, 64)
    a = round_to(RNG.integers(-span, span + 1, (32, 64)) / 4, fmt)
    b = round_to(RNG.integers(-span, span + 1, (64, 32)) / 4, fmt)
    got, _, program = lowered(backend, mm, a, b, directives=dict(tile=(16, 16, 32), lanes=lanes))
    assert got[0].dtype == dtype(fmt)
    assert_bits(got[0], round_to(fma_chain(a, b), fmt))
    assert_bits(got, graph(mm, a, b))
    before, _, after = _loop(tile_funcs(program)[0])
    accum_tile = "alloc 16x16xf32 pad=0 none"
    assert (accum_tile in before) == (fmt != "f32" and lanes == 256)


@clause("LOWER-MATMUL-3", "LOWER-EXACT-1")
@pytest.mark.parametrize("fmt", ["f16", "bf16", "fp8_e5m2"])
def test_a_narrow_c_enters_the_accumulator_exactly(backend, fmt):
    a = round_to(RNG.integers(-6, 7, (32, 32)) / 4, fmt)
    b = round_to(RNG.integers(-6, 7, (32, 32)) / 4, fmt)
    c = round_to(RNG.standard_normal((32, 32)) * 100, fmt)
    got, _, _ = lowered(backend, gemm, a, b, c, directives=dict(tile=(16, 16, 16)))
    assert_bits(got[0], round_to(fma_chain(a, b, c=c.astype(np.float64)), fmt))
    assert_bits(got, graph(gemm, a, b, c))


@clause("LOWER-MATMUL-4", "LOWER-EXACT-1")
@pytest.mark.parametrize("sa, sb, flags, directives, grid", [
    ((3, 64, 32), (3, 32, 64), {}, dict(tile=(32, 32, 16)), (2, 2, 3)),
    ((2, 1, 32, 32), (3, 32, 16), {}, dict(tile=(16, 16, 16), stages=3), (2, 1, 6)),
    ((32, 48), (2, 3, 48, 32), {}, dict(tile=(32, 16, 16), shared=False), (1, 2, 6)),
    ((48, 32), (48, 64), dict(transpose_a=True), dict(tile=(16, 32, 16), stages=3), (2, 2)),
    ((32, 48), (64, 48), dict(transpose_b=True), dict(tile=(32, 32, 16), padding=1), (1, 2)),
    ((2, 48, 32), (1, 64, 48), dict(transpose_a=True, transpose_b=True), dict(tile=(16, 32, 16), async_copy=False),
     (2, 2, 2)),
])
def test_batches_broadcast_and_transposes(backend, sa, sb, flags, directives, grid):
    """Output matrix p on grid axis 2, each operand's matrix by NumPy broadcasting; an operand
    whose stored orientation is not its staged one (A is staged k-major, LOWER-MATMUL-5)
    copied by a transposing cp.async; the bits of the untransposed fma chains."""
    a, b = sixteenths(RNG, sa), sixteenths(RNG, sb)
    f = lambda a, b: op.matmul(a, b, **flags)  # noqa: E731
    got, reports, program = lowered(backend, f, a, b, directives=directives)
    assert tuple(part(backend, reports[0], "grid")) == grid and findings(backend, reports[0]) == []
    ta = np.swapaxes(a, -1, -2) if flags.get("transpose_a") else a
    tb = np.swapaxes(b, -1, -2) if flags.get("transpose_b") else b
    batch = got[0].shape[:-2]
    ta, tb = np.broadcast_to(ta, batch + ta.shape[-2:]), np.broadcast_to(tb, batch + tb.shape[-2:])
    want = np.zeros(got[0].shape, np.float32)
    for idx in np.ndindex(*batch):
        want[idx] = fma_chain(ta[idx], tb[idx]).astype(np.float32)
    assert_bits(got[0], want)
    assert_bits(got, graph(f, a, b))
    text = str(program.tile)
    copies, flipped = text.count('"tessera.tile.cp_async"'), text.count("transpose = true}")
    if directives.get("shared", True):
        flips = (not flags.get("transpose_a")) + bool(flags.get("transpose_b"))
        assert flipped == copies // 2 * flips  # two copies per issue, A's first
    assert schedule_of(kernels(program)[0])["op"] == "matmul"


@clause("LOWER-MATMUL-6", "LOWER-EXACT-1")
def test_a_tensor_core_policy_lowers_to_the_models_bits(backend):
    import tessera_ref as t
    pol = t.Policy("bf16", accum="tc:sm80")
    a = t.asarray(round_to(RNG.standard_normal((32, 64)), "bf16"), policy=pol)
    b = t.asarray(round_to(RNG.standard_normal((64, 32)), "bf16"), policy=pol)
    got, reports, program = lowered(backend, mm, a, b, directives=dict(tile=(32, 32, 16), lanes=128))
    assert_bits(got, graph(mm, a, b))
    assert findings(backend, reports[0]) == []
    assert 'accum = "tc:sm80"' in str(program.tile) and "layout = " in str(program.tile)
