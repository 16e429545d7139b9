"""AD-3, AD-REV-1, AD-REV-2, AD-REV-3, AD-FWD-1: the rule protocol, the backward and tangent
passes, the order cotangents are added in, stochastic-rounding keys (against a Philox written
from NUM-RNG-1/2 in ``_reference``), and source lines."""
import re

import ml_dtypes
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import jit, op
from tessera_ref.errors import AutodiffError
from tessera_ref.numerics import as_policy
from tessera_ref.ops import PRIMITIVES, missing_rules
from tessera_conformance import assert_bits, clause, eager, unsupported

from ._reference import derivative_seed, dyadic, grad_on, philox4x32_10, pow2, raw_op  # noqa: F401 (fixture)

STOCHASTIC = as_policy("bf16").with_(rounding="stochastic")
HERE = __file__.rsplit("/", 1)[-1]


def _seeds(text):
    return [int(s) for s in re.findall(r"seed = (\d+)", text)]


def _line_of(fn, offset=1):
    return fn.__code__.co_firstlineno + offset


# -- AD-3 --------------------------------------------------------------------------------------
@clause("AD-3")
def test_every_primitive_states_its_derivative():
    """No primitive has an empty vjp/jvp slot; NOT_DIFFERENTIABLE is in both or neither."""
    assert not any(slot in gaps for gaps in missing_rules().values() for slot in ("vjp", "jvp"))
    for name, prim in PRIMITIVES.items():
        assert (prim.vjp is tr.ops.NOT_DIFFERENTIABLE) == (prim.jvp is tr.ops.NOT_DIFFERENTIABLE), name


@clause("AD-3")
def test_rules_receive_full_attrs_and_materialized_zero_cotangents(backend, monkeypatch):
    """Rules get full attrs and a +0 cotangent for unused results; jvp rules None for absent tangents."""
    seen = {}
    svd, softmax, mul = PRIMITIVES["svd"], PRIMITIVES["softmax"], PRIMITIVES["mul"]
    real = {"svd": svd.vjp, "softmax": softmax.vjp, "mul": mul.jvp}

    def spy_svd(attrs, primals, results, cts):
        seen["svd"] = [(c.shape, str(c.type), c) for c in cts]
        return real["svd"](attrs, primals, results, cts)

    def spy_softmax(attrs, primals, results, cts):
        seen["softmax"] = dict(attrs)
        return real["softmax"](attrs, primals, results, cts)

    def spy_mul(attrs, primals, tangents, results):
        seen["mul"] = [t is None for t in tangents]
        return real["mul"](attrs, primals, tangents, results)
    monkeypatch.setattr(svd, "vjp", spy_svd)
    monkeypatch.setattr(softmax, "vjp", spy_softmax)
    monkeypatch.setattr(mul, "jvp", spy_mul)
    a = np.array([[3.0, 1.0], [1.0, 2.0], [0.5, 1.0]])
    w = np.array([1.0, 0.5])
    eager(backend, lambda a: tr.grad(lambda x: op.sum(op.svd(x)[1] * w) + op.sum(op.softmax(x)))(a), a)
    (u_shape, u_type, _), (s_shape, _, _), (vt_shape, vt_type, _) = seen["svd"]
    assert (u_shape, s_shape, vt_shape) == ((3, 2), (2,), (2, 2)) and "f64" in u_type and "f64" in vt_type
    assert "axis" in seen["softmax"]  # the default, filled in
    eager(backend, lambda a: tr.jvp(lambda x: x * w, (a[0],), (a[1],)), a)
    assert seen["mul"] == [False, True]


@clause("AD-3")
@pytest.mark.parametrize("slot", ["vjp", "jvp"])
def test_an_empty_slot_on_the_path_names_the_op_and_the_line(backend, monkeypatch, slot):
    """An empty rule slot on the path is an AutodiffError naming the op and the user's line."""
    monkeypatch.setattr(PRIMITIVES["tanh"], slot, None)
    x = np.array([0.5, -1.0])

    def f(a):
        return op.sum(op.tanh(a))  # the line the error names
    call = (lambda: tr.grad(f)(x)) if slot == "vjp" else (lambda: tr.jvp(f, (x,), (np.ones(2),)))
    with pytest.raises(AutodiffError, match=f"tanh has no {slot} rule") as info:
        eager(backend, call)
    assert f"{HERE}:{_line_of(f)}" in str(info.value) and info.value.fix


@clause("AD-3")
@pytest.mark.parametrize("slot", ["vjp", "jvp"])
def test_a_rule_returning_another_type_is_a_rule_bug(backend, monkeypatch, slot):
    """A rule returning another type than its primal's is an AssertionError naming the rule."""
    wrong = {"vjp": lambda attrs, p, r, c: (op.cast(c[0], "f64"),),
             "jvp": lambda attrs, p, t, r: (op.cast(t[0], "f64"),)}[slot]
    monkeypatch.setattr(PRIMITIVES["tanh"], slot, wrong)
    x = np.array([0.5, -1.0], np.float32)
    f = lambda a: op.sum(op.tanh(a))  # noqa: E731
    call = (lambda: tr.grad(f)(x)) if slot == "vjp" else (lambda: tr.jvp(f, (x,), (np.ones(2, np.float32),)))
    with pytest.raises(AssertionError, match=f"{slot} rule of tessera.graph.tanh .*tensor<2xf64>.*rule bug"):
        eager(backend, call)


# -- AD-REV-1 ----------------------------------------------------------------------------------
@clause("AD-REV-1")
def test_unreached_inputs_get_plus_zero_and_the_seed_is_one(backend):
    """An unreached input gets +0 of its type; grad seeds the output with 1 of its policy."""
    x = dyadic((3,), 1)
    gx, gy = grad_on(backend, lambda a, b: op.sum(a * 2.0), x, -x, argnums=(0, 1))
    assert_bits(gy, np.zeros(3))
    xb = tr.asarray(x, policy="bf16")
    assert_bits(eager(backend, tr.grad(lambda a: op.sum(a)), xb), np.ones(3, ml_dtypes.bfloat16))
    gb = eager(backend, tr.grad(lambda a, b: op.sum(a), argnums=1), xb, tr.asarray(x, policy="bf16"))
    assert_bits(gb, np.zeros(3, ml_dtypes.bfloat16))


@clause("AD-REV-1")
def test_an_op_of_no_primitive_on_the_path_is_an_error(backend, raw_op):
    """An unregistered op on the differentiated path is active, so an AutodiffError naming it."""
    def f(a):
        return op.sum(raw_op("ident", a) * 2.0) + op.sum(a)
    with pytest.raises(AutodiffError, match="cadtest.ident"):
        eager(backend, tr.grad(f), np.array([1.0, 2.0]))


@clause("AD-REV-1")
def test_not_differentiable_ops_pass_nothing(backend):
    """Comparisons, argmax and constants stop cotangents: only the direct use counts."""
    x = np.array([0.5, -1.5, 2.0])

    def f(a):
        mask = op.cast(op.greater(a, 0.0), "f64")
        return op.sum(a * mask) + op.sum(op.cast(op.argmax(a), "f64") * a)
    assert_bits(grad_on(backend, f, x), (x > 0).astype(np.float64) + 2.0)  # argmax = 2: a constant factor


# -- AD-REV-2 ----------------------------------------------------------------------------------
@clause("AD-REV-2", "AD-DET-1")
def test_cotangents_of_several_uses_are_added_in_reverse_program_order(backend):
    """Three uses' cotangents 1, 2⁻⁵³, 2⁻⁵³ add in reverse order to ``1 + 2⁻⁵²`` (program order: 1)."""
    a, b = np.ones(3), np.full(3, 2.0 ** -53)

    def f(x):
        return op.sum(x * a) + op.sum(x * b) + op.sum(x * b * 1.0)
    g = grad_on(backend, f, np.ones(3))
    assert_bits(g, np.full(3, 1.0 + 2.0 ** -52))
    assert_bits(grad_on(backend, f, np.ones(3)), g)
    assert_bits(eager(backend, tr.grad(f), np.ones(3)), g)


@clause("AD-REV-2")
def test_philox_reference_matches_the_known_answers():
    """The reference Philox4x32-10 of ``_reference`` reproduces Random123's known answers."""
    assert philox4x32_10((0, 0, 0, 0), (0, 0)) == (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)
    assert philox4x32_10((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2) == (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)


@clause("AD-REV-2", "AD-DET-1")
@pytest.mark.parametrize("mode", ["grad", "jvp"])
def test_derivative_ops_have_keys_of_their_own(backend, mode):
    """Stochastic rounding: rule ops take ``RNGKey(seed).fold(k)``, use sums ``fold(0)``; all distinct."""
    x = tr.asarray(np.array([0.3, 1.7, -2.2, 0.45]), policy=STOCHASTIC, seed=1)

    def f(a):
        return op.sum(op.mul(op.tanh(a, seed=11), a, seed=12), seed=13)
    if mode == "grad":
        g = tr.grad(f)
        first = eager(backend, g, x)
        assert_bits(eager(backend, g, x), first)
    else:
        g = jit(lambda a, t: tr.jvp(f, (a,), (t,))[1], backend=backend)
        try:
            first = np.asarray(g(x, x))
        except tr.errors.BackendError as exc:
            unsupported(backend, exc)
        assert_bits(np.asarray(g(x, x)), first)
    seeds = _seeds(g.inspect_ir())
    assert len(set(seeds)) == len(seeds), "two ops share a key"
    derived = {derivative_seed(12, 0, 1), derivative_seed(11, 0, 1)}  # mul's and tanh's first rule ops
    assert derived <= set(seeds)
    if mode == "grad":  # x's second cotangent (tanh's, visited last) is added with tanh's fold(0)
        assert derivative_seed(11, 0, 0) in seeds


@clause("AD-REV-2")
def test_sums_at_ops_without_a_seed_and_at_the_outputs_are_keyed(backend):
    """Sums at seedless ops take ``RNGKey(0xAD5EED).fold(i)``; output sums ``i = len(ops)``."""
    xs = np.arange(6.0).reshape(2, 3)
    x = tr.asarray(xs, policy=STOCHASTIC, seed=1)

    def f(a):  # reshape (0), transpose (1), reshape (2), mul (3), sum (4)
        return op.sum(op.mul(op.reshape(a, (3, 2)), op.reshape(op.transpose(a), (3, 2)), seed=2), seed=3)
    g = tr.grad(f)
    got = eager(backend, g, x)
    assert_bits(got, (xs.T.reshape(3, 2).reshape(2, 3) + xs.reshape(3, 2).T).astype(ml_dtypes.bfloat16))
    assert set(_seeds(g.inspect_ir())) == {derivative_seed(None, 0, 0), derivative_seed(2, 0, 1),
                                           derivative_seed(2, 0, 2)}
    y = tr.asarray(np.array([0.5, 1.5]), policy=STOCHASTIC, seed=1)
    out, pullback = tr.vjp(lambda a: (lambda t: (t, t))(op.tanh(a, seed=5)), y)
    eager(backend, pullback, (y, y))
    seeds = _seeds(pullback.inspect_ir())
    assert {derivative_seed(None, 1, 0)} | {derivative_seed(5, 0, k) for k in (1, 2, 3)} <= set(seeds)


@clause("AD-REV-2")
def test_a_backward_rounding_does_not_replay_the_forward_bits(backend):
    """A backward rounding of the forward's product does not replay the forward's random bits."""
    a, b = (tr.asarray(np.full(256, v), policy=STOCHASTIC, seed=0) for v in (1 + 2.0 ** -7, 1.5 + 2.0 ** -7))
    fwd = eager(backend, lambda x: op.mul(x, b, seed=7), a).astype(np.float64)
    (bar,) = eager(backend, lambda: tr.vjp(lambda x: op.mul(x, b, seed=7), a)[1](a))
    bar = bar.astype(np.float64)
    assert set(fwd) | set(bar) <= {1.5 + 2.0 ** -6, 1.5 + 2.0 ** -6 + 2.0 ** -7}
    assert 64 < np.count_nonzero(fwd != bar) < 192


# -- AD-REV-3 ----------------------------------------------------------------------------------
@clause("AD-REV-3")
def test_backward_ops_carry_their_forward_ops_line(backend):
    """The ops a rule emits carry its forward op's source line."""
    def f(a):
        y = op.exp(a)
        return op.sum(y * 3.0)
    g = tr.grad(f)
    eager(backend, g, dyadic((3,), 2))
    text = g.inspect_ir()
    ops_at = {}
    for m in re.finditer(r'"tessera\.graph\.(\w+)".*loc\("[^"]*":(\d+):0\)', text):
        ops_at.setdefault(int(m.group(2)), []).append(m.group(1))
    assert "exp" in ops_at[_line_of(f)] and ops_at[_line_of(f)].count("mul") >= 1  # ḡ ⊗ y at exp's line
    assert "exp" not in ops_at.get(_line_of(f, 2), [])


@clause("AD-REV-3")
def test_a_rule_error_names_the_forward_line(backend, monkeypatch):
    """An error raised while a rule runs names the line whose derivative it is."""
    def broken(attrs, primals, results, cts):
        raise tr.errors.OpError("planted failure")
    monkeypatch.setattr(PRIMITIVES["sin"], "vjp", broken)

    def f(a):
        b = a * 2.0
        return op.sum(op.sin(b))
    with pytest.raises(tr.errors.OpError, match="planted failure") as info:
        eager(backend, tr.grad(f), np.ones(2))
    assert f"{HERE}:{_line_of(f, 2)}" in str(info.value)


# -- AD-FWD-1 ----------------------------------------------------------------------------------
@clause("AD-FWD-1")
def test_tangent_ops_follow_the_forward_ops(backend):
    """Tangent ops follow the forward ops, terms in operand order; a zero output tangent is +0."""
    def f(x):
        return op.sin(x) * op.exp(x), tr.asarray(np.ones(3))

    def program(a, t):
        (y0, y1), (t0, t1) = tr.jvp(f, (a,), (t,))
        return y0, t0, t1
    g = jit(program, backend=backend, rewrite=False)
    x, v = dyadic((3,), 3), pow2((3,), 4)
    try:
        _, t0, t1 = g(x, v)
    except tr.errors.BackendError as exc:
        unsupported(backend, exc)
    names = [n for n in re.findall(r'"tessera\.graph\.(\w+)"', g.inspect_ir(optimized=False)) if n != "constant"]
    # x ⊗ 1 (the fresh name of AD-NEST-1), the forward ops, then the tangent ops
    assert names[:4] == ["mul", "sin", "exp", "mul"] and "cos" in names[4:] and "sin" not in names[4:]
    s, e, c = (eager(backend, getattr(op, n), x) for n in ("sin", "exp", "cos"))
    assert_bits(np.asarray(t0), (v * c) * e + (v * e) * s)  # (ṡ ⊗ e) ⊕ (ė ⊗ s): operand order
    assert_bits(np.asarray(t1), np.zeros(3))
