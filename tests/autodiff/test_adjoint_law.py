"""The adjoint law for every differentiable primitive of the registry (issue 5, item 5).

For each op the rules are called directly, eagerly, on float64 values (complex<f32> ops, the
FFT family, on f32): with random tangents ``v`` and cotangents ``u``,

    ⟨J v, u⟩ = ⟨v, Jᵀ u⟩

where ``J v`` is the op's ``jvp`` rule — itself checked against a central finite difference —
or, for an op without one, the finite difference. ``⟨a, b⟩`` is the real inner product
``Σ Re(conj(a)·b)``, which makes a complex tensor a pair of real ones. The registry is
enumerated: a differentiable op with no case here fails the suite, so new rules get tested.
"""
from __future__ import annotations

import numpy as np
import pytest
from adjoint_cases import (CASES, MESH_ONLY, Case, R, call, case, finite_difference, full_attrs, inner,
                           random_like, rng)

from tessera_ref.interp import run_function
from tessera_ref.ir.verifier import verify
from tessera_ref.ops import NOT_DIFFERENTIABLE, PRIMITIVES, Trace, asarray, bind

TOL = {"f64": dict(law=1e-9, fd=1e-5, h=1e-6), "f32": dict(law=2e-5, fd=1e-3, h=1e-1)}


def check_adjoint(name: str, c: Case, seed: int = 0) -> None:
    """Assert the adjoint law (and the jvp against a finite difference) for one case."""
    prim = PRIMITIVES[name]
    tol = TOL[c.precision]
    operands = [asarray(x) for x in c.operands]
    attrs = full_attrs(name, operands, c.attrs)
    results = call(name, operands, attrs)
    g = rng(1000 + seed)
    v = [asarray(random_like(x, g)) if d else None for x, d in zip(operands, c.diff)]
    u = tuple(asarray(random_like(r, g)) for r in results)

    fd = finite_difference(name, operands, attrs, v, tol["h"])
    assert callable(prim.jvp), f"{name}: no jvp rule (registry slot empty)"
    jv = prim.jvp(attrs, tuple(operands), tuple(v), results)
    assert len(jv) == len(results), f"{name}: jvp returned {len(jv)} tangents for {len(results)} results"
    for i, (t, d) in enumerate(zip(jv, fd)):
        t = np.zeros_like(d) if t is None else np.asarray(t).astype(np.complex128)
        err, scale = np.max(np.abs(t - d), initial=0), np.max(np.abs(d), initial=0) + 1e-3
        assert err <= tol["fd"] * scale, f"{name} {c.label}: jvp of result {i} differs from the finite " \
                                         f"difference by {err:.3g} (scale {scale:.3g})"

    bars = prim.vjp(attrs, tuple(operands), results, u)
    assert len(bars) == len(operands), f"{name}: vjp returned {len(bars)} cotangents for {len(operands)} operands"
    lhs = rhs = scale = 0.0
    for t, ct in zip(jv, u):
        if t is not None:
            ip, s = inner(t, ct)
            lhs, scale = lhs + ip, scale + s
    for x, t, bar, d in zip(operands, v, bars, c.diff):
        if not d:
            assert bar is None, f"{name}: a cotangent for a non-differentiable operand"
            continue
        assert bar is not None, f"{name} {c.label}: no cotangent for a differentiable operand"
        assert bar.type == x.type, f"{name}: cotangent type {bar.type} differs from the operand's {x.type}"
        ip, s = inner(t, bar)
        rhs, scale = rhs + ip, scale + s
    assert abs(lhs - rhs) <= tol["law"] * (scale + 1e-12), \
        f"{name} {c.label}: <J v, u> = {lhs!r} but <v, J^T u> = {rhs!r}"


DIFFERENTIABLE = sorted(n for n, p in PRIMITIVES.items() if p.vjp is not NOT_DIFFERENTIABLE and n not in MESH_ONLY)
PARAMS = [pytest.param(n, i, id=f"{n}-{c.label or i if c else 'none'}") for n in DIFFERENTIABLE for i, c in enumerate(CASES.get(n, [None]))]


@pytest.mark.parametrize("name, index", PARAMS)
def test_adjoint_law(name, index):
    assert name in CASES, f"{name} is differentiable but has no adjoint-law case: add one to CASES"
    prim = PRIMITIVES[name]
    if prim.vjp is None:
        pytest.fail(f"{name} has no vjp rule yet (registry slot empty)")
    for seed in range(2):
        check_adjoint(name, CASES[name][index], seed)


@pytest.mark.parametrize("name, index", PARAMS)
def test_vjp_traces_to_graph_ir_with_the_eager_bits(name, index):
    """The vjp rule applied to tracers records Graph IR that verifies, and running that IR
    gives the cotangents of the eager rule bit for bit (the rules are made of primitives)."""
    if name not in CASES or PRIMITIVES[name].vjp is None:
        pytest.skip("covered by test_adjoint_law's failure")
    prim, c = PRIMITIVES[name], CASES[name][index]
    operands = [asarray(x) for x in c.operands]
    attrs = full_attrs(name, operands, c.attrs)
    results = call(name, operands, attrs)
    g = rng(7)
    u = [asarray(random_like(r, g)) for r in results]
    eager = [b for b in prim.vjp(attrs, tuple(operands), results, tuple(u)) if b is not None]
    with Trace(f"vjp_{name}") as trace:
        args = trace.arguments([x.type for x in operands + u])
        traced_results = call(name, args[:len(operands)], attrs)
        bars = [b for b in prim.vjp(attrs, tuple(args[:len(operands)]), traced_results, tuple(args[len(operands):]))
                if b is not None]
        trace.finish(bars)
    verify(trace.func)
    replay = run_function(trace.func, *[x.data for x in operands + u])
    assert len(replay) == len(eager)
    for r, e in zip(replay, eager):
        assert r.dtype == e.data.dtype and r.tobytes() == e.data.tobytes()


def test_every_op_states_its_derivative():
    """Every primitive has both slots filled, or NOT_DIFFERENTIABLE in both."""
    gaps = {n: [r for r in ("vjp", "jvp") if getattr(p, r) is None] for n, p in PRIMITIVES.items()}
    gaps = {n: g for n, g in gaps.items() if g}
    assert not gaps, f"ops with an empty derivative slot: {gaps}"
    for name, prim in PRIMITIVES.items():
        assert (prim.vjp is NOT_DIFFERENTIABLE) == (prim.jvp is NOT_DIFFERENTIABLE), \
            f"{name}: NOT_DIFFERENTIABLE in one slot only"


def test_cases_name_only_registered_ops():
    assert set(CASES) <= set(PRIMITIVES)


# -- planted bugs: the check must catch wrong rules ----------------------------------------------
def test_a_planted_wrong_vjp_is_caught(monkeypatch):
    """transpose's vjp using ``perm`` instead of its inverse: fine for an involution, wrong for
    the 3-cycle of the case, and the law must say so."""
    prim = PRIMITIVES["transpose"]

    def wrong(attrs, primals, results, cts):
        return (bind(prim, cts[0], perm=attrs["perm"][::-1]),)
    monkeypatch.setattr(prim, "vjp", wrong)
    with pytest.raises(AssertionError, match="<J v, u>"):
        check_adjoint("transpose", case(R(3, 3, 3, seed=90), perm=(1, 2, 0)))


def test_a_planted_scaled_vjp_is_caught(monkeypatch):
    """softmax's vjp off by a factor 1.001 — a small error the f64 law still catches."""
    prim = PRIMITIVES["softmax"]
    right = prim.vjp

    def wrong(attrs, primals, results, cts):
        (bar,) = right(attrs, primals, results, cts)
        return (bind(PRIMITIVES["mul"], bar, 1.001),)
    monkeypatch.setattr(prim, "vjp", wrong)
    with pytest.raises(AssertionError, match="<J v, u>"):
        check_adjoint("softmax", CASES["softmax"][0])


def test_a_planted_wrong_jvp_is_caught(monkeypatch):
    """A jvp and vjp that agree with each other but not with the op: the finite difference
    catches what the law alone cannot."""
    prim = PRIMITIVES["reshape"]
    monkeypatch.setattr(prim, "jvp", lambda attrs, p, t, r: (bind(PRIMITIVES["mul"], bind(prim, t[0], **attrs), 2.0),))
    monkeypatch.setattr(prim, "vjp", lambda attrs, p, r, c: (bind(PRIMITIVES["mul"], bind(prim, c[0], shape=p[0].shape), 2.0),))
    with pytest.raises(AssertionError, match="finite difference"):
        check_adjoint("reshape", CASES["reshape"][0])
