"""AD-1, AD-2, AD-4, AD-NEST-1: the transforms on one device, run on the backend (inside ``jit``
and eagerly). References: derivatives worked out by hand and evaluated with NumPy's IEEE
arithmetic in the order AD-REV-2 fixes, on dyadic inputs."""
import re

import ml_dtypes
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import autodiff, jit, op
from tessera_ref.errors import AutodiffError
from tessera_conformance import assert_bits, assert_close, clause, eager, run

from ..graph_ir._cases import skip_unsupported
from ._reference import dyadic, pow2

X = np.array([0.375, -1.25, 2.0])
Y = np.array([1.5, 0.25, -0.75])


def _ops(text):
    return re.findall(r'"tessera\.graph\.(\w+)"', text)


def _f(x, y):
    return op.sum(x * y + op.div(x, y) - op.abs(x))


# -- AD-1 --------------------------------------------------------------------------------------
@clause("AD-1")
@pytest.mark.parametrize("mode", ["jit", "eager"])
def test_grad_with_int_tuple_and_negative_argnums(backend, mode):
    """argnums as an int, a tuple and a negative position; hand derivatives in AD-REV-2's order."""
    go = run if mode == "jit" else eager
    gx = go(backend, lambda x, y: tr.grad(_f)(x, y), X, Y)
    # x's cotangents in reverse program order: abs (−sign x), then div (1/y), then mul (y)
    assert_bits(gx, (-np.sign(X) + 1.0 / Y) + Y)
    gx2, gy = go(backend, lambda x, y: tr.grad(_f, argnums=(0, 1))(x, y), X, Y)
    assert_bits(gx2, gx)
    assert_bits(gy, -((1.0 * (X / Y)) / Y) + X)
    (gy2,) = go(backend, lambda x, y: tr.grad(_f, argnums=(-1,))(x, y), X, Y)
    assert_bits(gy2, gy)


@clause("AD-1")
def test_value_and_grad_is_the_value_and_the_gradient(backend):
    """``value_and_grad`` returns ``(f(x), ∇f(x))``; the value has the forward's bits."""
    x = dyadic((5,), 1)
    v, g = run(backend, lambda x: tr.value_and_grad(lambda a: op.sum(op.exp(a)))(x), x)
    assert_bits(v, run(backend, lambda a: op.sum(op.exp(a)), x))
    assert_bits(g, eager(backend, op.exp, x))


@clause("AD-1")
def test_gradients_have_their_primals_shape_and_policy(backend):
    """Gradients have their primal's shape and policy; a differentiated Python float is f32."""
    x = tr.asarray(dyadic((2, 3), 2), policy="bf16")
    g = eager(backend, lambda x: tr.grad(lambda a: op.sum(a * a))(x), x)
    assert g.dtype == ml_dtypes.bfloat16 and g.shape == (2, 3)
    assert_bits(g, (2 * dyadic((2, 3), 2)).astype(ml_dtypes.bfloat16))
    g = eager(backend, lambda: tr.grad(lambda x: x * x)(3.0))
    assert_bits(g, np.float32(6.0))
    assert_bits(eager(backend, lambda: tr.grad(lambda x, n: x * n)(np.float64(3.0), 2.0)), np.float64(2.0))


@clause("AD-1")
def test_pytrees_of_dicts_lists_and_tuples(backend):
    """Derivatives have their argument's structure (dict entries in sorted key order)."""
    params = {"w": np.array([1.0, 2.0]), "b": [np.array(0.5), (np.array(-1.0),)]}
    x = np.array([0.25, 0.75])
    seen = []

    def f(p, x):
        return op.sum(p["w"] * x + p["b"][0]) * p["b"][1][0]

    def program(params, x):
        g = tr.grad(f)(params, x)
        seen.append((sorted(g), type(g["b"]).__name__, type(g["b"][1]).__name__))
        return g["w"], g["b"][0], g["b"][1][0]
    gw, gb0, gb1 = eager(backend, program, params, x)
    assert seen == [(["b", "w"], "list", "tuple")]
    assert_bits(gw, -x)  # ∂/∂w of −Σ(w x + b) · … = c·x with c = −1
    assert_bits(gb0, np.float64(-2.0))
    assert_bits(gb1, np.float64((1.0 * 0.25 + 0.5) + (2.0 * 0.75 + 0.5)))


@clause("AD-1")
def test_vjp_and_jvp_of_a_function_with_two_outputs(backend):
    """vjp (all arguments or argnums) and jvp of a two-output function, exact on dyadic values."""
    x, y = dyadic((4,), 3), dyadic((4,), 4)
    u = (pow2((4,), 5), pow2((4,), 6))

    def f(x, y):
        return x * y, x * x

    def program(x, y, u0, u1):
        out, pullback = tr.vjp(f, x, y)
        return (*out, *pullback((u0, u1)), *tr.vjp(f, x, y, argnums=(1,))[1]((u0, u1)))
    o0, o1, gx, gy, gy_only = run(backend, program, x, y, *u)
    assert_bits([o0, o1], [x * y, x * x])
    assert_bits(gx, u[1] * x + u[1] * x + u[0] * y)  # x*x's two uses (reverse order), then x*y
    assert_bits([gy, gy_only], [u[0] * x, u[0] * x])
    v = (pow2((4,), 7), pow2((4,), 8))
    (p0, p1), (t0, t1) = eager(backend, lambda: tr.jvp(f, (x, y), v))
    assert_bits([p0, p1, t0, t1], [x * y, x * x, v[0] * y + v[1] * x, v[0] * x + v[0] * x])


@clause("AD-1")
def test_complex_arguments_are_differentiable(backend):
    """A complex<f32> leaf gets a complex<f32> gradient: ``∂(Σ re² + Σ im) = complex(2·re, 1)``."""
    z = np.array([1 + 2j, 3 - 1j, -0.5 + 0.25j], np.complex64)
    g = eager(backend, lambda z: tr.grad(lambda a: op.sum(op.real(a) * op.real(a)) + op.sum(op.imag(a)))(z), z)
    assert_bits(g, (2 * z.real + 1j).astype(np.complex64))


MISUSE = [
    (lambda: tr.grad(lambda x: x * 2.0)(X), "one real scalar"),
    (lambda: tr.grad(lambda x: op.sum(op.cast(x, "f64")))(np.array([1, 2])), "no derivative"),
    (lambda: tr.grad(lambda x: op.sum(x), argnums=3)(X), "argnums=3"),
    (lambda: tr.grad(lambda x: op.sum(x), argnums=-2)(X), "argnums=-2"),
    (lambda: tr.grad(lambda x, y: op.sum(x), argnums=(0, 0))(X, Y), "twice"),
    (lambda: tr.grad(lambda x, y: op.sum(x), argnums=(0, -2))(X, Y), "twice"),
    (lambda: tr.grad(lambda x, s: op.sum(x), argnums=1)(X, "name"), "not a tensor"),
    (lambda: tr.grad(lambda x, s: op.sum(x), argnums=1)(X, None), "not a tensor"),
    (lambda: tr.grad(lambda x: op.complex(op.sum(op.real(x)), op.sum(op.imag(x))))(np.ones(2, np.complex64)),
     "one real scalar"),
    (lambda: tr.vjp(lambda x: x * 2.0, X)[1](np.ones(4)), r"tensor<4xf64>.*tensor<3xf64>"),
    (lambda: tr.vjp(lambda x: x * 2.0, X)[1](np.ones(3, np.float32)), r"tensor<3xf32>.*tensor<3xf64>"),
    (lambda: tr.vjp(lambda x: (x, x), X)[1](np.ones(3)), "structure"),
    (lambda: tr.jvp(lambda x: x * 2.0, (X,), (np.ones(3, np.float32),)), r"tensor<3xf32>.*tensor<3xf64>"),
    (lambda: tr.jvp(lambda x: x * 2.0, (X,), ([np.ones(3)],)), "structure"),
]


@clause("AD-1")
@pytest.mark.parametrize("call, match", MISUSE, ids=[f"misuse-{i}" for i in range(len(MISUSE))])
def test_misuse_is_an_autodiff_error(backend, call, match):
    """Every misuse is an AutodiffError naming the argument and a fix."""
    with pytest.raises(AutodiffError, match=match) as info:
        eager(backend, call)
    assert info.value.fix


# -- AD-2 --------------------------------------------------------------------------------------
@clause("AD-2")
def test_a_transform_runs_one_program_with_forward_and_derivative_ops(backend):
    """value_and_grad is one tessera.func with forward and derivative ops, after DCE and CSE."""
    x = dyadic((4,), 9)

    def unused(a):
        op.tanh(a)  # dead
        return op.sum(op.sigmoid(a)) + op.sum(op.sigmoid(a))
    vg = tr.value_and_grad(unused)
    v, g = eager(backend, vg, x)
    text = vg.inspect_ir()
    assert text.count('"tessera.func"') == 1
    names = _ops(text)
    assert "tanh" not in names and names.count("sigmoid") == 1  # DCE and CSE
    assert "sub" in names and "mul" in names  # sigmoid's derivative y ⊗ (1 ⊖ y)
    s = eager(backend, op.sigmoid, x)
    assert_bits(g, s * (1.0 - s) + s * (1.0 - s))


@clause("AD-2")
def test_without_jit_every_call_traces_again(backend):
    """Closures are read anew on each call of an un-jitted transform."""
    w = np.array([1.0, 2.0, 3.0])
    g = tr.grad(lambda a: op.sum(a * w))
    x = np.zeros(3)
    assert_bits(eager(backend, g, x), np.array([1.0, 2.0, 3.0]))
    w[:] = [4.0, 5.0, 6.0]
    assert_bits(eager(backend, g, x), np.array([4.0, 5.0, 6.0]))


@clause("AD-2")
def test_inside_a_trace_a_transform_records_into_it(backend):
    """jit(grad(f)) is one program holding the backward ops, traced once per signature."""
    g = jit(tr.grad(lambda a: op.sum(op.sigmoid(a))), backend=backend)
    x = dyadic((3,), 10)
    with skip_unsupported(backend):
        got = g(x)
    names = _ops(g.inspect_ir())
    assert "sigmoid" in names and "sub" in names and len(g.cache) == 1
    g(x + 1.0)
    assert len(g.cache) == 1
    assert_bits(np.asarray(got), eager(backend, tr.grad(lambda a: op.sum(op.sigmoid(a))), x))


@clause("AD-2")
def test_jit_of_vjp_of_a_strided_convolution(backend):
    """jit of a vjp through a stride-2 convolution w.r.t. its kernel gives ``w̄ = 4``."""
    x = np.ones((1, 1, 4, 4))
    (g,) = run(backend, lambda w, u: tr.vjp(lambda k: op.conv2d(x, k, stride=(2, 2)), w)[1](u),
               np.ones((1, 1, 1, 1)), np.ones((1, 1, 2, 2)))
    assert_bits(g, np.full((1, 1, 1, 1), 4.0))


# -- AD-4 --------------------------------------------------------------------------------------
@clause("AD-4")
def test_autodiff_decorator(backend):
    """@autodiff: calling runs f; f.grad / value_and_grad / vjp / jvp are the transforms."""
    @autodiff
    def f(x, y):
        return op.sum(x * y)
    x, y = dyadic((3,), 11), dyadic((3,), 12)
    assert_bits(eager(backend, f, x, y), np.float64(np.sum(x * y)))  # dyadic: every sum exact
    gx, gy = eager(backend, f.grad((0, 1)), x, y)
    assert_bits([gx, gy], [y, x])
    assert f.grad([0, 1]) is f.grad((0, 1))
    v, g = eager(backend, f.value_and_grad(1), x, y)
    assert_bits(g, x)
    assert_bits(eager(backend, lambda: f.vjp(x, y)[1](2.0 * np.ones(()))), [2.0 * y, 2.0 * x])
    assert_bits(eager(backend, lambda: f.jvp((x, y), (y, x))[1]), np.float64(np.sum(y * y + x * x)))
    with pytest.raises(AutodiffError, match="not jitted"):
        f.inspect_ir()
    assert callable(tr.autodiff) and isinstance(tr.autodiff(lambda x: x), autodiff.AutodiffFunction)


@clause("AD-4")
def test_jit_autodiff_decorator_expression(backend):
    """@jit @autodiff: the forward runs through jit; f.grad is traced once per signature."""
    @jit @autodiff
    def block(x, w):
        return op.tanh(op.matmul(x, w))
    x, w = dyadic((2, 3), 13), dyadic((3, 4), 14)
    y = eager(backend, block, x, w)
    assert _ops(block.inspect_ir()) == ["matmul", "tanh"]
    assert_bits(y, eager(backend, lambda a, b: op.tanh(op.matmul(a, b)), x, w))
    loss = jit @ autodiff  # the decorator expression itself
    g = loss(lambda x, w: op.sum(block(x, w))).grad(1)
    assert g is not None and g.jit
    gw = eager(backend, g, x, w)
    eager(backend, g, x + 1.0, w)
    assert len(g.cache) == 1
    t = y.astype(np.float64)
    assert_close(gw, x.T @ (1 - t * t), rel=1e-14)


# -- AD-NEST-1 ---------------------------------------------------------------------------------
@clause("AD-NEST-1")
def test_closing_over_the_differentiated_value_sees_a_constant(backend):
    """``grad(lambda x: grad(lambda y: x * y)(x))(3.0)`` is 1, not 2."""
    g = run(backend, lambda x: tr.grad(lambda a: tr.grad(lambda b: a * b)(a))(x), np.float64(3.0))
    assert_bits(g, np.float64(1.0))


@clause("AD-NEST-1")
def test_grad_of_grad_is_the_second_derivative(backend):
    """grad(grad(f)) is the second derivative (exact cases, and the math ops' closed forms)."""
    x = np.float64(1.5)
    assert_bits(run(backend, lambda a: tr.grad(tr.grad(lambda b: b * b * b))(a), x), np.float64(9.0))
    hxy = run(backend, lambda a, b: tr.grad(lambda p, q: tr.grad(lambda s, t: s / t)(p, q), argnums=1)(a, b),
              np.float64(2.0), np.float64(0.5))
    assert_bits(hxy, np.float64(-4.0))
    x0 = 0.7
    sig = 1 / (1 + np.exp(-x0))
    second = {"exp": np.exp(x0), "log": -1 / x0 ** 2, "sqrt": -0.25 * x0 ** -1.5,
              "tanh": -2 * np.tanh(x0) * (1 - np.tanh(x0) ** 2),
              "sin": -np.sin(x0), "cos": -np.cos(x0), "sigmoid": sig * (1 - sig) * (1 - 2 * sig),
              "erf": -4 * x0 / np.sqrt(np.pi) * np.exp(-x0 ** 2)}
    for name, want in second.items():
        got = run(backend, lambda a: tr.grad(tr.grad(getattr(op, name)))(a), np.float64(x0))
        assert_close(got, want, rel=1e-13, what=name)
