"""LOWER-FUSE-1: chains of elementwise ops are one kernel with the unfused kernels' bits."""
import ml_dtypes
import numpy as np
import pytest
from lowering_helpers import assert_same_bits, bits, lowered

from tessera_ref import op
from tessera_ref.ir import schedule as S
from tessera_ref.lowering.cost import kernel_cost

RNG = np.random.default_rng(5)
FORMATS = [np.float32, np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, np.float64]


def _kernels(program):
    return [o for o in program.func.regions[0].entry if o.name == S.KERNEL]


def _data(shape, dtype):
    x = RNG.standard_normal(shape) * 4
    x.flat[:6] = [0.0, -0.0, np.inf, -np.inf, np.nan, 1e30]  # signed zeros, infinities, NaN, overflow
    with np.errstate(over="ignore"):
        return x.astype(dtype)


@pytest.mark.parametrize("dtype", FORMATS, ids=lambda d: np.dtype(d).name)
def test_a_chain_is_one_kernel_with_the_graphs_bits(dtype):
    x, z = _data((4, 40), dtype), _data((4, 40), dtype)
    f = lambda x, z: op.maximum((x * 2.0 + 1.0) / z, -x)  # noqa: E731
    got, want, reports, program = lowered(f, x, z)
    assert_same_bits(got, want)
    (kop,) = _kernels(program)
    assert kop.attributes["op"] == "mul+add+div+neg+maximum" and len(reports) == 1
    assert reports[0].findings == [] and reports[0].counters.barriers == 0
    text = str(program.tile)
    assert text.count('"tessera.tile.store"') == 1 and text.count('"tessera.tile.load"') == 4  # x, 2, 1, z


def test_no_contraction_of_a_times_b_plus_c():
    """(1 + 2^-12)² = 1 + 2^-11 + 2^-24 rounds to 1 + 2^-11 (a tie, to even); minus 1 that is
    2^-11 exactly. A fused multiply-add would give 2^-11 + 2^-24."""
    a = np.full((1, 32), 1 + 2.0 ** -12, np.float32)
    c = np.full((1, 32), -1.0, np.float32)
    got, want, _, program = lowered(lambda a, c: a * a + c, a, c)
    assert len(_kernels(program)) == 1
    assert (got[0] == np.float32(2.0 ** -11)).all() and (want[0] == got[0]).all()
    assert np.float32(2.0 ** -11 + 2.0 ** -24) != np.float32(2.0 ** -11)  # the data tells the two apart


def test_an_intermediate_used_later_is_a_second_result():
    x = _data((3, 64), np.float16)
    f = lambda x: (x * 3.0, op.softmax(x * 3.0 - 1.0))  # noqa: E731 - x*3 is used by the return
    got, want, reports, program = lowered(f, x)
    assert_same_bits(got, want)
    kinds = [k.attributes["op"] for k in _kernels(program)]
    assert kinds[0] == "mul+sub" and len(_kernels(program)[0].results) == 2 and kinds[1] == "softmax"


def test_a_chain_stops_at_another_family_and_takes_independent_ops_along():
    x = _data((2, 48), np.float32)
    f = lambda x: op.softmax(x + 1.0) * 2.0 - 3.0  # noqa: E731
    got, want, _, program = lowered(f, x)
    assert_same_bits(got, want)
    assert [k.attributes["op"] for k in _kernels(program)] == ["add", "softmax", "mul+sub"]
    g = lambda x, y: (x + 1.0, y * 2.0)  # noqa: E731 - the second op does not use the first's value
    got, want, _, program = lowered(g, x, x)
    assert_same_bits(got, want)
    (kop,) = _kernels(program)
    assert kop.attributes["op"] == "add+mul" and len(kop.results) == 2


def test_the_fused_kernel_moves_only_the_chains_inputs_and_outputs():
    """f32, 128 × 64 elements: reads x and y (the 0-d 0.5 is one sector per warp request) and
    writes the result; the cost model counts the same bytes for the two arrays and the result."""
    x, y = _data((128, 64), np.float32), _data((128, 64), np.float32)
    n = 128 * 64
    _, _, reports, program = lowered(lambda x, y: (x - y) * (x + y) * 0.5, x, y)
    (kop,) = _kernels(program)
    c = reports[0].counters
    assert c.hbm_read_bytes == 2 * n * 4 + (n // 32) * 32 and c.hbm_write_bytes == n * 4
    cost = kernel_cost(kop)
    assert cost.flops == 4 * n and cost.hbm_bytes == (len(kop.operands) + 1) * n * 4  # operands x, y, 0.5


def test_vectorized_chains_keep_the_bits():
    x = _data((5, 77), ml_dtypes.bfloat16)
    got, want, _, _ = lowered(lambda x: abs(-x) * 0.25 + x, x, directives=dict(vectorize=4))
    assert_same_bits(got, want)
    assert bits(got[0]).dtype == np.uint16
