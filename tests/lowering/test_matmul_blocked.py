"""LOWER-MATMUL-5: register-blocked matmul tiles — the Graph IR's bits, the staging rules, tile_shape."""
import ml_dtypes
import numpy as np
import pytest
from lowering_helpers import assert_same_bits, lowered

import tessera_ref as t
from tessera_ref import op
from tessera_ref.errors import LoweringError
from tessera_ref.ir.fragment import mma_sync
from tessera_ref.lowering import lower

RNG = np.random.default_rng(5)
FAST = dict(tile=(128, 128, 8), lanes=256)
BF16, E4M3 = np.dtype(ml_dtypes.bfloat16), np.dtype(ml_dtypes.float8_e4m3fn)


def _x(shape, dtype=np.float32):
    return (RNG.standard_normal(shape) * 4).astype(dtype)


def _cp_asyncs(program) -> list:
    """(bytes, transpose) of every cp_async of the first kernel, in text order."""
    ops = [o for o in program.tile.body.first_op.walk() if o.name == "tessera.tile.cp_async"]
    return [(o.attributes.get("bytes"), o.attributes.get("transpose", False)) for o in ops]


def _mma(program):
    return next(o for o in program.tile.body.first_op.walk() if o.name == "tessera.tile.mma")


@pytest.mark.parametrize("fn, shapes, dtype, copies", [
    # A [M, K] f32 into the k-major buffer: 4-byte transposing copies; B: 16-byte rows
    (lambda a, b: op.matmul(a, b), [(256, 64), (64, 256)], np.float32, [(4, True), (16, False)]),
    # A stored [K, M] is already k-major: 16-byte copies; so is B
    (lambda a, b: op.matmul(a, b, transpose_a=True), [(64, 256), (64, 128)], np.float32, [(16, False), (16, False)]),
    # B stored [N, K]: 4-byte transposing copies
    (lambda a, b: op.matmul(a, b, transpose_b=True), [(128, 32), (256, 32)], np.float32, [(4, True), (4, True)]),
    # bf16 A stays row-major ([128, 8] x 2 B = one 16-byte piece per row), B 16-byte pieces
    (lambda a, b: op.matmul(a, b), [(128, 64), (64, 128)], BF16, [(16, False), (16, False)]),
    # fp8 rows of 8 elements are 8 bytes
    (lambda a, b: op.matmul(a, b), [(128, 32), (32, 256)], E4M3, [(8, False), (16, False)]),
])
def test_the_fast_schedule_gives_the_graph_bits_with_vector_copies(fn, shapes, dtype, copies):
    args = [_x(s, dtype) for s in shapes]
    got, want, reports, program = lowered(fn, *args, directives=FAST)
    assert_same_bits(got, want)
    assert reports[0].findings == []
    assert _cp_asyncs(program)[:2] == copies  # the prologue's two copies
    mma = _mma(program)
    assert mma.attributes["layout"] == [[16, 16], [4, 512], [4, 2, 4, 2], [1, 64, 128, 8192]]
    assert mma.attributes.get("transpose_a", False) == (dtype == np.float32)  # A k-major: 4-byte elements


@pytest.mark.parametrize("fn, shapes, dtype, directives", [
    # a batched gemm with C broadcast over the batch, narrow storage (through the accum tile)
    (lambda a, b, c: op.gemm(a, b, c), [(2, 64, 32), (2, 32, 64), (64, 64)], np.float16,
     dict(tile=(64, 64, 16), lanes=64)),
    # M = 96: SCHED-FIT-1 makes BM = 96; micro-tiles of 6 x 8 (3 x 2 blocks of 2 x 4)
    (lambda a, b: op.matmul(a, b), [(96, 32), (32, 128)], np.float32, FAST),
    # transposed both, 3 stages, padding and swizzle
    (lambda a, b: op.matmul(a, b, transpose_a=True, transpose_b=True), [(32, 64), (64, 32)], np.float32,
     dict(tile=(64, 64, 16), lanes=128, stages=3, padding=4, swizzle="xor")),
    # no async copies (one stage)
    (lambda a, b: op.matmul(a, b), [(64, 64), (64, 64)], BF16, dict(tile=(32, 32, 32), lanes=32, async_copy=False)),
])
def test_more_blocked_variants_give_the_graph_bits(fn, shapes, dtype, directives):
    args = [_x(s, dtype) for s in shapes]
    got, want, reports, program = lowered(fn, *args, directives=directives)
    assert_same_bits(got, want)
    assert reports[0].findings == []
    assert "layout" in _mma(program).attributes


def test_a_tile_of_fewer_elements_than_two_per_lane_keeps_cyclic_fragments_and_row_major_a():
    got, want, _, program = lowered(lambda a, b: op.matmul(a, b), _x((8, 8)), _x((8, 8)), directives=FAST)
    assert_same_bits(got, want)
    mma = _mma(program)
    assert "layout" not in mma.attributes and "transpose_a" not in mma.attributes


def test_tile_shape_on_the_op_is_the_tile():
    a, b = _x((128, 64)), _x((64, 256))
    program = lower(t.jit(lambda a, b: op.matmul(a, b, tile_shape=(128, 128, 16))).trace(a, b), dict(lanes=256))
    kernel = program.schedule.body.first_op.regions[0].entry.first_op
    assert list(kernel.attributes["tile"]) == [128, 128, 16]
    got, _ = program.run(a, b)
    assert_same_bits(got, [np.asarray(op.matmul(a, b).data)])


def test_a_tile_shape_that_does_not_divide_the_shapes_is_refused():
    a, b = _x((96, 64)), _x((64, 256))
    with pytest.raises(LoweringError, match=r"tile_shape \[128, 128, 64\] does not divide M=96") as info:
        lower(t.jit(lambda a, b: op.matmul(a, b, tile_shape=(128, 128, 64))).trace(a, b))
    assert "tile_shape" in info.value.fix


def test_a_tile_shape_over_the_shared_memory_limit_is_refused():
    a, b = _x((512, 256)), _x((256, 512))
    with pytest.raises(LoweringError, match=r"tile_shape \[512, 512, 64\] needs 524,288 B of shared memory"):
        lower(t.jit(lambda a, b: op.matmul(a, b, tile_shape=(512, 512, 64))).trace(a, b), dict(lanes=1024))


@pytest.mark.parametrize("fmt, model", [("bf16", "tc:sm80"), ("f16", "tc:sm90")])
def test_a_tensor_core_policy_gets_the_mma_sync_accumulator_layout_and_the_graph_bits(fmt, model):
    dtype = BF16 if fmt == "bf16" else np.float16
    pol = t.Policy(fmt, accum=model)
    a, b = (t.asarray(_x(s, dtype), policy=pol) for s in ((128, 64), (64, 128)))
    got, want, reports, program = lowered(lambda p, q: op.matmul(p, q), a, b,
                                          directives=dict(tile=(128, 128, 32), lanes=256))
    assert_same_bits(got, want)
    assert reports[0].findings == []
    mma = _mma(program)
    assert mma.attributes["accum"] == model and "transpose_a" not in mma.attributes
    assert mma.attributes["layout"] == mma_sync(128, 128, 256).attr()
