"""LOWER-EW-3: the NUM-MATH functions as elementwise kernels — the Tile IR's one definition
(``math_in_accum``), rounded once into accum and once into storage — with the Graph IR's bits,
specials included, alone and fused."""
import ml_dtypes
import numpy as np
import pytest
from lowering_helpers import assert_same_bits, lowered

from tessera_ref import op
from tessera_ref.ir import schedule as S

RNG = np.random.default_rng(23)
UNARY = ["exp", "expm1", "log", "sqrt", "rsqrt", "tanh", "erf", "erfc", "sigmoid", "silu", "gelu", "sin", "cos"]
SPECIALS = [0.0, -0.0, np.inf, -np.inf, np.nan, -1.5, 1e4, 3e6, 0.84375, 1.25, 30.0, -40.0, 1e-30]


def _data(shape, dtype):
    x = RNG.standard_normal(shape) * 4
    x.flat[:len(SPECIALS)] = SPECIALS
    with np.errstate(over="ignore"):
        return x.astype(dtype)


def _ops(program):
    return [k.attributes["op"] for k in program.func.regions[0].entry if k.name == S.KERNEL]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, ml_dtypes.bfloat16, np.float16], ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("name", UNARY)
def test_each_function_gives_the_graphs_bits(name, dtype):
    x = _data((3, 40), dtype)
    got, want, reports, program = lowered(lambda x: getattr(op, name)(x), x)
    assert_same_bits(got, want)
    assert _ops(program) == [name] and reports[0].findings == []
    # one NUM-MATH unary per element; sqrt, an IEEE operation like neg and abs, is not counted (TILE-COUNT-4)
    assert reports[0].counters.flops == (0 if name == "sqrt" else x.size)


def test_gelu_tanh_and_pow_with_a_broadcast_exponent():
    x, y = _data((4, 33), np.float32), _data((33,), np.float32)
    got, want, _, program = lowered(lambda x, y: (op.gelu(x, approximate="tanh"), op.pow(op.abs(x), y),
                                                  op.pow(x, 3.0)), x, y)
    assert_same_bits(got, want)
    text = str(program.tile)
    assert '{fn = "gelu_tanh"}' in text and text.count('{fn = "pow"}') == 2 and len(_ops(program)) == 1
    neg = x < 0
    assert np.array_equal(np.signbit(got[2][neg & np.isfinite(x)]), np.ones(int((neg & np.isfinite(x)).sum()), bool))


def test_a_fused_activation_rounds_each_op_once():
    """bf16 SwiGLU-style ``silu(a) ⊗ b``: silu rounds into bf16 before the product (the data
    tells that from rounding once at the end), and the chain is one kernel."""
    a, b = _data((8, 64), ml_dtypes.bfloat16), _data((8, 64), ml_dtypes.bfloat16)
    got, want, _, program = lowered(lambda a, b: op.silu(a) * b, a, b, directives=dict(vectorize=2))
    assert_same_bits(got, want)
    assert _ops(program) == ["silu+mul"]
    a64 = a.astype(np.float64)
    once = (a64 / (1 + np.exp(-a64)) * b.astype(np.float64)).astype(ml_dtypes.bfloat16)
    finite = np.isfinite(got[0].astype(np.float64)) & np.isfinite(once.astype(np.float64))
    assert not np.array_equal(got[0][finite].view(np.uint16), once[finite].view(np.uint16))
