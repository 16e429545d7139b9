"""LOWER-EW-2: elementwise kernels read broadcast operands at NumPy's positions, alone and in
fused chains (LOWER-FUSE-1), with the Graph IR's bits."""
import numpy as np
import pytest
from lowering_helpers import assert_same_bits, lowered

from tessera_ref import op
from tessera_ref.interp.tile import run
from tessera_ref.ir import schedule as S
from tessera_ref.ir import tile as T
from tessera_ref.lowering.plan import broadcast_index, broadcasts_to

RNG = np.random.default_rng(17)

#: (result shape, operand shape): a scalar, a bias, a row statistic, size-1 axes anywhere
CASES = [((2, 3, 5), ()), ((2, 3, 5), (5,)), ((2, 3, 5), (2, 3, 1)), ((2, 3, 5), (3, 1)), ((4, 5, 6), (4, 1, 6)),
         ((4, 5, 6), (1, 5, 1)), ((4, 1, 6), (4, 1, 1)), ((3, 1, 4, 2), (1, 1, 4, 1)), ((7,), (1,)), ((), ()),
         ((2, 3, 5), (2, 3, 5)), ((6, 1), (1,))]


@pytest.mark.parametrize("out, x", CASES, ids=str)
def test_the_index_is_numpys_broadcast_position(out, x):
    """A kernel storing broadcast_index for every element of ``out`` gives what
    ``np.broadcast_to`` of the operand's flat positions gives (a wrong // or mod fails)."""
    n = int(np.prod(out))
    kb = T.KernelBuilder("k", [("y", T.buffer((n,), "f64"), True)])
    (y,) = kb.params
    e = kb.lane_id()
    kb.if_(kb.binary("lt", e, n), then=lambda: kb.store(y, [e], kb.cast(broadcast_index(kb, e, out, x), "f64"))
           or [])
    got = np.zeros(n)
    run(kb.finish(), [got], grid=1, lanes=max(n, 1), checks=True)
    want = np.broadcast_to(np.arange(int(np.prod(x))).reshape(x), out).reshape(-1)
    assert np.array_equal(got, want)


def test_broadcasts_to_is_numpys_rule_on_static_shapes():
    assert broadcasts_to((5,), (2, 3, 5)) and broadcasts_to((), ()) and broadcasts_to((3, 1), (2, 3, 5))
    assert not broadcasts_to((3,), (2, 3, 5)) and not broadcasts_to((2, 3, 5), (3, 5))
    assert not broadcasts_to(("S", 1), ("S", 4))  # symbolic: no static index arithmetic


def _kernels(program):
    return [o for o in program.func.regions[0].entry if o.name == S.KERNEL]


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_training_step_broadcasts_are_one_kernel_with_the_graphs_bits(dtype):
    """softmax-backward's ``x − rowstat``, a bias add, a ``tensor<1xf32>`` scale and the neg
    of a 0-d loss: each rounded once, the chain one kernel."""
    x = (RNG.standard_normal((2, 3, 8)) * 4).astype(dtype)
    m = RNG.standard_normal((2, 3, 1)).astype(dtype)
    b = RNG.standard_normal(8).astype(dtype)
    s = np.array([0.3], dtype)
    loss = np.array(2.5, dtype)
    f = lambda x, m, b, s, loss: ((x - m) * s + b, op.neg(loss) * 3.0)  # noqa: E731
    got, want, reports, program = lowered(f, x, m, b, s, loss)
    assert_same_bits(got, want)
    assert [k.attributes["op"] for k in _kernels(program)] == ["sub+mul+add", "neg+mul"]
    assert all(r.findings == [] for r in reports)
    text = str(program.tile)
    assert text.count('"tessera.tile.load"') == 6  # x, m, b, s; loss, 3.0: each once per element


def test_a_chain_across_shapes_keeps_every_rounding():
    """bf16: each op of ``(x ⊗ g) ⊕ bias`` rounds into bf16 (not once at the end)."""
    import ml_dtypes
    x = RNG.standard_normal((3, 1, 40)).astype(ml_dtypes.bfloat16)
    g = RNG.standard_normal((5, 40)).astype(ml_dtypes.bfloat16)
    bias = RNG.standard_normal((5, 1)).astype(ml_dtypes.bfloat16)
    got, want, _, program = lowered(lambda x, g, b: x * g + b, x, g, bias, directives=dict(vectorize=4))
    assert_same_bits(got, want)
    assert got[0].shape == (3, 5, 40) and len(_kernels(program)) == 1
    once = (x.astype(np.float32) * g.astype(np.float32) + bias.astype(np.float32)).astype(ml_dtypes.bfloat16)
    assert not np.array_equal(got[0].view(np.uint16), once.view(np.uint16))  # the data tells the roundings apart
