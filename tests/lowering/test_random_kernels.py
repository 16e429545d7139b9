"""LOWER-RNG-1, TILE-RNG-1: rand and dropout lower to kernels that draw in the kernel
(Tile IR ``uniform``, the counter-based Philox RNG) and give the Graph IR's bits — for any
shape, tiling and format, keyed by (seed, stream, global element index)."""
import ml_dtypes
import numpy as np
import pytest
from lowering_helpers import assert_same_bits, bits, lowered

import tessera_ref as t
from tessera_ref import backends, op
from tessera_ref.errors import LoweringError
from tessera_ref.ir import schedule as S
from tessera_ref.ir import tile as T
from tessera_ref.lowering import lower
from tessera_ref.numerics import rng


def _kernels(program):
    return [k.attributes["op"] for k in program.func.regions[0].entry if k.name == S.KERNEL]


@pytest.mark.parametrize("dtype", ["f32", "f64", "bf16", "fp8_e4m3", "f16"])
@pytest.mark.parametrize("directives", [None, {"lanes": 64, "vectorize": 4}])
def test_rand_draws_in_the_kernel_with_the_graphs_bits(dtype, directives):
    f = lambda: op.rand((7, 93), seed=3, stream=11, dtype=dtype)  # noqa: E731
    got, want, reports, program = lowered(f, directives=directives)
    assert _kernels(program) == ["rand"] and reports[0].findings == []
    assert_same_bits(got, want)


def test_rand_is_numerics_uniform_of_the_element_index():
    """Independent of the graph op: element i is NUM-RNG-5's uniform(RNGKey(seed, stream), i)."""
    got, _, _, _ = lowered(lambda: op.rand((3, 1000), seed=2 ** 64 - 1, stream=2 ** 40))
    want = rng.uniform(rng.RNGKey(2 ** 64 - 1, 2 ** 40), np.arange(3000, dtype=np.uint64), np.float32)
    assert np.array_equal(bits(got[0]).reshape(-1), bits(want))


def test_rand_with_a_directed_rounding_policy():
    from tessera_ref.numerics import Policy
    got, want, _, _ = lowered(lambda: op.rand((4, 256), seed=9, dtype=Policy("bf16", rounding="rtz")))
    assert_same_bits(got, want)
    assert float(np.max(got[0].astype(np.float32))) < 1.0  # rtz keeps [0, 1): rne would give some 1.0


@pytest.mark.parametrize("dtype", [np.float32, ml_dtypes.bfloat16, np.float16, np.float64])
@pytest.mark.parametrize("rate", [0.0, 0.25, 0.9])
def test_dropout_keeps_the_graphs_elements_and_scale(dtype, rate):
    r = np.random.default_rng(2)
    x = (r.standard_normal((6, 130)) * 10).astype(dtype)
    x.flat[:3] = [np.nan, np.inf, -0.0]
    got, want, _, program = lowered(lambda x: op.dropout(x, rate, seed=5, stream=1), x)
    assert _kernels(program) == ["dropout"]
    assert_same_bits(got, want)


def test_the_kernel_holds_a_uniform_op_and_renders_the_key_words():
    program = lower(t.jit(lambda x: op.dropout(x, 0.5, seed=42)).trace(np.ones((2, 64), np.float32)))
    assert str(program.tile).count(f'"{T.DIALECT}.uniform"') == 1
    text = backends.get("interp").inspect_program(program, "target")
    k0, k1 = (int(w) for w in rng.RNGKey(42).words)
    assert f"tsr_uniform_f32((tsr_u64)(" in text and f"{k0:#010x}u, {k1:#010x}u)" in text


def test_stochastic_rounding_of_the_draws_is_refused():
    from tessera_ref.numerics import Policy
    with pytest.raises(LoweringError, match="stochastic"):
        lower(t.jit(lambda: op.rand((4, 32), seed=1, dtype=Policy("bf16", rounding="stochastic"))).trace())
