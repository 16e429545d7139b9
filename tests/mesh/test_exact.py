"""Exact mode on the mesh (NUM-RED-4, MESH-COLL-1): a sum split over any number of devices gives
the exact sum rounded once — the same bits for every mesh — while the canonical mode's bits
depend on the split (that is the point of exact mode)."""
from fractions import Fraction

import numpy as np
import pytest

from mesh_reference import fold_f32, same_bits
from tessera_ref import dist, op
from tessera_ref.numerics import Policy, exact_sum
from tessera_ref.numerics.reduce import reduce_canonical
from tessera_ref.ops.values import asarray

S = dist.ShardSpec
EXACT = Policy("f32", reduction="exact")

#: (mesh, axis) pairs splitting over 1, 2, 8, 9 and 72 devices
SPLITS = [
    (dist.Mesh(("tp", "dp"), range(2), (1, 2)), "tp"),
    (dist.Mesh(("tp", "dp"), range(6), (2, 3)), "tp"),
    (dist.Mesh(("tp",), range(8), (8,)), "tp"),
    (dist.Mesh(("dp", "tp", "pp"), range(72), (4, 9, 2)), "tp"),
    (dist.Mesh(("x",), range(72), (72,)), "x"),
]


def round_to_f32(q: Fraction) -> np.float32:
    """A rational rounded to nearest-even f32 (subnormals and overflow included), by integer arithmetic."""
    if q == 0:
        return np.float32(0.0)
    sign, a = (-1 if q < 0 else 1), abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1                                       # now 2^e <= a < 2^(e+1)
    ulp = Fraction(2) ** (max(e, -126) - 23)
    m, r = divmod(a, ulp)
    m = int(m) + (1 if r > ulp / 2 or (r == ulp / 2 and int(m) % 2) else 0)
    value = m * ulp
    if value >= Fraction(2) ** 128:
        return np.float32(sign * np.inf)
    return np.float32(sign * float(value))


def exact_reference(x: np.ndarray) -> np.float32:
    return round_to_f32(sum((Fraction(float(v)) for v in x.reshape(-1)), Fraction(0)))


def adversarial(n: int, seed: int = 0) -> np.ndarray:
    """Wide dynamic range (2^-60 … 2^60) with large cancelling pairs: rounding depends on the order."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(n) * 2.0 ** rng.integers(-60, 61, n)).astype(np.float32)
    big = np.float32(2.0 ** 70)
    x[5], x[n // 2 + 3], x[n - 2] = big, -big, np.float32(1.0)
    return x


def test_reference_rounding():
    assert round_to_f32(Fraction(1) + Fraction(1, 2**24)) == np.float32(1.0)  # a tie: to even
    assert round_to_f32(Fraction(1) + Fraction(3, 2**25)) == np.float32(1.0) + np.float32(2.0 ** -23)
    assert round_to_f32(Fraction(1, 2**149)) == np.float32(1e-45)
    assert round_to_f32(Fraction(2) ** 128) == np.float32(np.inf)


@pytest.mark.parametrize("k", [1, 4])
def test_exact_sum_is_the_same_on_every_mesh(k):
    x = adversarial(72 * k)
    want = exact_reference(x)
    assert same_bits(np.asarray(exact_sum(x)), want)
    exact_bits, canonical_bits = set(), set()
    for mesh, axis in SPLITS:
        t = dist.tensor(x.shape, S((0,), (axis,)), mesh, dtype=EXACT, data=x)
        s = op.sum(t)
        assert s.layout.partial == (axis,)
        r = dist.all_reduce(s, axis)
        for i in (0, mesh.size - 1):
            assert same_bits(r.shard(i), want)
        exact_bits.add(r.numpy().tobytes())
        c = dist.all_reduce(op.sum(dist.tensor(x.shape, S((0,), (axis,)), mesh, data=x)), axis).numpy()
        # canonical: each device's block by NUM-RED-2, then the blocks folded in rank order
        p = mesh.axis_size(axis)
        blocks = [reduce_canonical(b, axis=-1, op="sum", accum="f32") for b in np.split(x, p)]
        assert same_bits(c, fold_f32(blocks))
        canonical_bits.add(c.tobytes())
    assert len(exact_bits) == 1
    assert len(canonical_bits) >= 2, "the adversarial input should tell the canonical splits apart"


def test_exact_sum_of_a_2d_tensor_over_a_split_axis():
    x = np.stack([adversarial(72, seed=s) for s in range(3)], axis=1)  # (72, 3), sum over axis 0
    want = np.array([exact_reference(x[:, j]) for j in range(3)], np.float32)
    for mesh, axis in SPLITS[1:4]:
        t = dist.tensor(x.shape, S((0,), (axis,)), mesh, dtype=EXACT, data=x)
        assert same_bits(op.sum(t, axis=0).numpy(), want)  # the pending sum carried out by .numpy()
        assert same_bits(dist.all_reduce(op.sum(t, axis=0), axis).numpy(), want)
    one = asarray(x, policy=EXACT)
    assert same_bits(np.asarray(op.sum(one, axis=0)), want)


def test_exact_f64_sum_over_a_split_axis():
    """An f64 exact sum split over devices is held in the f64 domain (it once raised ArithError)."""
    x = np.array([1e300, 1.0, -1e300, 2.0 ** -60, 3.0, -3.0, 0.5, 0.25], np.float64)
    want = np.float64(1.75)  # the exact 1.75 + 2^-60 rounded once; any f64 order loses the 1
    mesh = dist.Mesh(("tp",), range(4), (4,))
    t = dist.tensor(x.shape, S((0,), ("tp",)), mesh, dtype=Policy("f64", reduction="exact"), data=x)
    assert same_bits(dist.all_reduce(op.sum(t), "tp").numpy(), want)


def test_exact_all_reduce_of_given_contributions():
    """Contributions given per device (from_shards) are summed exactly as well."""
    mesh = dist.Mesh(("dp", "tp"), range(6), (2, 3))
    c = [adversarial(16, seed=s) for s in range(3)]
    shards = [c[mesh.coords(i)["tp"]] for i in range(6)]
    y = dist.all_reduce(dist.from_shards(shards, S(None, ("tp",), reduce="sum"), mesh, dtype=EXACT), "tp")
    want = np.array([round_to_f32(sum(Fraction(float(v[j])) for v in c)) for j in range(16)], np.float32)
    assert same_bits(y.numpy(), want)
    canonical = dist.all_reduce(dist.from_shards(shards, S(None, ("tp",), reduce="sum"), mesh), "tp")
    assert same_bits(canonical.numpy(), fold_f32(c))


@pytest.mark.parametrize("reduce", ["max", "min"])
def test_exact_policy_max_over_a_split_axis_runs_per_device(reduce):
    """A max/min over a split axis under reduction="exact" leaves a partial max: each device
    reduces its own block (a partial max needs no exact accumulator) — it used to run the stacked
    blocks as one tensor and raise a raw ValueError. Checked against NumPy's max of the global
    value (max is exact)."""
    mesh = dist.Mesh(("dp", "tp"), range(4), (2, 2))
    a = np.random.default_rng(5).standard_normal((4, 6, 10)).astype(np.float32)
    x = dist.tensor(a.shape, S((0, 2), ("dp", "tp")), mesh, EXACT, data=a)
    for keepdims in (False, True):
        got = getattr(op, reduce)(x, axis=-1, keepdims=keepdims)
        assert got.layout.partial == ("tp",)
        assert np.array_equal(got.numpy(), getattr(a, reduce)(axis=-1, keepdims=keepdims))
