"""LOWER-EW-4: comparisons, mask logic, ``where`` and ``fma`` as elementwise kernels with the
Graph IR's bits (IEEE comparisons, NaN payloads kept by where, one rounding in fma), fused and
broadcast."""
import ml_dtypes
import numpy as np
import pytest
from lowering_helpers import assert_same_bits, bits, lowered

import tessera_ref as t
from tessera_ref import op
from tessera_ref.errors import LoweringError
from tessera_ref.ir import schedule as S
from tessera_ref.lowering import lower

RNG = np.random.default_rng(29)
COMPARE = ["equal", "not_equal", "less", "less_equal", "greater", "greater_equal"]


def _ops(program):
    return [k.attributes["op"] for k in program.func.regions[0].entry if k.name == S.KERNEL]


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, ml_dtypes.float8_e5m2, np.float64],
                         ids=lambda d: np.dtype(d).name)
def test_comparisons_are_ieee_on_broadcast_operands(dtype):
    """NaN is unordered (only not_equal holds), −0 = +0, infinities order; a [3, 1] against a [4]."""
    a = np.array([[0.0], [np.nan], [-np.inf]]).astype(dtype)
    b = np.array([-0.0, np.nan, 1.0, -np.inf]).astype(dtype)
    f = lambda a, b: tuple(getattr(op, n)(a, b) for n in COMPARE)  # noqa: E731
    got, want, reports, program = lowered(f, a, b)
    assert_same_bits(got, want)
    assert _ops(program) == ["+".join(COMPARE)] and reports[0].findings == []
    assert got[0].dtype == np.bool_ and got[0].shape == (3, 4)
    assert got[0][0].tolist() == [True, False, False, False]  # 0 == −0; NaN equals nothing
    assert got[1][1].tolist() == [True] * 4  # NaN != everything
    assert got[2][2].tolist() == [True, False, True, False]  # −inf < −0, NaN, 1; not < −inf


@pytest.mark.filterwarnings("ignore:invalid value encountered in cast")
def test_logic_and_where_keep_nan_payloads_and_signs():
    nan = np.array([0x7FC00001, 0xFFC00000, 0x7FA00000], np.uint32).view(np.float32)
    m = np.array([[False], [True], [False], [True]])  # payloads, a sign, signaling
    a = np.concatenate([nan, RNG.standard_normal(29).astype(np.float32)]).reshape(4, 8)
    b = RNG.standard_normal(8).astype(np.float32)
    f = lambda a, b, m: (op.where(op.logical_or(op.logical_not(m), op.greater(b, 0.0)), a, b),  # noqa: E731
                         op.where(op.logical_and(m, op.less(a, b)), a - b, -0.0))
    got, want, _, program = lowered(f, a, b, m)
    assert_same_bits(got, want)
    assert _ops(program) == ["logical_not", "greater", "logical_or+where+less+logical_and+sub+where"]  # by shape
    picked = np.broadcast_to(~m | (b > 0), a.shape)
    assert np.array_equal(bits(got[0])[picked], bits(a)[picked]) and picked[0, :3].any()


def test_fma_rounds_once():
    """(1 + 2^-12)² − 1 = 2^-11 + 2^-24 exactly: fma keeps the 2^-24 that a ⊗ a then ⊕ c drops."""
    a = np.full((2, 40), 1 + 2.0 ** -12, np.float32)
    got, want, reports, program = lowered(lambda a, c: (op.fma(a, a, c), a * a + c), a, np.float32(-1.0))
    assert_same_bits(got, want)
    assert (got[0] == np.float32(2.0 ** -11 + 2.0 ** -24)).all() and (got[1] == np.float32(2.0 ** -11)).all()
    assert reports[0].counters.flops == 2 * a.size + 2 * a.size  # fma 2, mul 1, add 1 per element
    assert '"tessera.tile.fma"' in str(program.tile)


@pytest.mark.parametrize("dtype", [ml_dtypes.bfloat16, np.float16, np.float64], ids=lambda d: np.dtype(d).name)
def test_fma_in_narrow_storage_rounds_in_accum_then_storage(dtype):
    a, b, c = (RNG.standard_normal((3, 50)).astype(dtype) for _ in range(3))
    got, want, _, _ = lowered(lambda a, b, c: op.fma(a, b, c), a, b, c)
    assert_same_bits(got, want)


def test_index_comparisons_are_kernels_on_64_bit_values():
    """(argmax results against labels:) index buffers hold 64-bit values, 2^40 compares as itself."""
    x = np.array([[3, 1, 2], [0, 5, 2 ** 40]])
    y = np.array([2, 1, 2 ** 40])
    f = lambda x, y: (op.equal(x, y), op.less(y, x), op.greater_equal(y, x))  # noqa: E731
    got, want, _, program = lowered(f, x, y)
    assert_same_bits(got, want)
    assert got[0].tolist() == [[False, True, False], [False, False, True]] and got[1][1].tolist() == [False, True, False]
    assert _ops(program) == ["equal+less+greater_equal"] and got[2][1].tolist() == [True, False, True]


def test_where_of_index_values_stays_in_the_graph_interpreter():
    x = np.arange(6).reshape(2, 3)
    m = np.array([True, False, True])
    program = lower(t.jit(lambda m, x: op.where(m, x, x)).trace(m, x), host=True)
    assert [plan is None for _, plan in program.steps] == [True]  # a host step
    with pytest.raises(LoweringError, match="where: the tile lowering takes .* or i1 masks, not tensor<2x3xindex>"):
        lower(t.jit(lambda m, x: op.where(m, x, x)).trace(m, x))
