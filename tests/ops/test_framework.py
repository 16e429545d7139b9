"""The primitive machinery: eager and traced binding, values, weak scalars, errors, caching,
the interpreter's argument checks, the closed Graph dialect and the elementwise family."""
import ml_dtypes
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, OpError, ShapeError, TraceError
from tessera_ref.interp import run_function
from tessera_ref.ir import VerifyError, parse_module, verify
from tessera_ref.ops import PRIMITIVES, Array, Tracer

HERE = "test_framework.py:"


def bits(x):
    return np.ascontiguousarray(np.asarray(x)).view(np.uint8)


# -- values -----------------------------------------------------------------------------------

def test_asarray_types_and_numpy_view():
    a = tr.asarray(np.array([1.5, -2.0], np.float32))
    assert str(a.type) == "tensor<2xf32>" and np.asarray(a).dtype == np.float32
    b = tr.asarray([0.1, 0.2], dtype="bf16")
    assert str(b.type) == "tensor<2xbf16>"
    assert np.array_equal(np.asarray(b), np.array([0.1, 0.2]).astype(ml_dtypes.bfloat16))
    assert str(tr.asarray(np.array([True, False])).type) == "tensor<2xi1>"
    assert str(tr.asarray(np.arange(3)).type) == "tensor<3xindex>"
    p = tr.asarray([1.0], policy=tr.fp8 @ tr.accum(tr.f32, rounding="rtz"))
    assert str(p.type) == "tensor<1xfp8_e4m3, #policy<rounding=rtz>>"
    assert tr.asarray(a) is a


def test_asarray_rounds_with_the_policy():
    x = np.array([1.0 + 2.0 ** -9], np.float64)  # between two bf16 values, nearer the lower one
    assert np.asarray(tr.asarray(x, policy=tr.bf16 @ tr.accum(tr.f32, rounding="rup")))[0] == 1.0078125
    assert np.asarray(tr.asarray(x, dtype="bf16"))[0] == 1.0


def test_asarray_errors():
    with pytest.raises(DTypeError, match="both dtype"):
        tr.asarray([1.0], dtype="f32", policy=tr.f32 @ tr.accum(tr.f32))
    with pytest.raises(DTypeError, match="index tensor holds integers"):
        tr.asarray([1.5], dtype="index")
    with pytest.raises(DTypeError, match="complex"):
        tr.asarray(np.array([1j]), dtype="f32")


# -- eager binding and weak scalars ----------------------------------------------------------------

def test_eager_ops_return_arrays_of_the_inferred_type():
    a = np.array([1, 2, 3], np.float32)
    r = op.add(a, a)
    assert isinstance(r, Array) and str(r.type) == "tensor<3xf32>"
    assert np.array_equal(np.asarray(r), a + a)
    assert isinstance(a * tr.asarray(a), Array)  # NumPy defers to Array (array priority)


def test_weak_scalar_takes_the_tensor_policy():
    x = tr.asarray([1.0, 3.0], dtype="bf16")
    r = x + 0.1
    assert str(r.type) == "tensor<2xbf16>"
    # independent: bf16(0.1), the exact sum in f64, rounded once to bf16 (f32 accum is exact here)
    b01 = float(np.float64(0.1).astype(ml_dtypes.bfloat16))
    expect = (np.array([1.0, 3.0]) + b01).astype(ml_dtypes.bfloat16)
    assert np.array_equal(bits(r), bits(expect))


def test_policy_mismatch_names_both_types_and_the_line():
    with pytest.raises(DTypeError) as info:
        op.add(tr.asarray([1.0], dtype="bf16"), np.float32([1.0]))
    text = str(info.value)
    assert "tensor<1xbf16>" in text and "tensor<1xf32>" in text and HERE in text and "op.cast" in text


def test_shape_mismatch_names_both_shapes_and_the_line():
    with pytest.raises(ShapeError) as info:
        op.mul(np.ones((2, 3), np.float32), np.ones((4,), np.float32))
    text = str(info.value)
    assert "tensor<2x3xf32>" in text and "tensor<4xf32>" in text and HERE in text


def test_unknown_attribute_suggests_the_right_one():
    with pytest.raises(OpError, match="did you mean 'seed'"):
        tr.ops.bind(PRIMITIVES["add"], np.float32(1), np.float32(2), sed=3)


def test_stochastic_policy_needs_a_seed_and_uses_it():
    pol = tr.bf16 @ tr.accum(tr.f32, rounding="stochastic")
    with pytest.raises(DTypeError, match="seed"):
        tr.asarray(np.full(4096, 1.0), policy=pol)
    x = tr.asarray(np.full(4096, 1.0), policy=pol, seed=0)
    y = tr.asarray(np.full(4096, 2.0 ** -10), policy=pol, seed=0)
    with pytest.raises(OpError, match="seed"):
        op.add(x, y)
    r1, r2, r3 = op.add(x, y, seed=1), op.add(x, y, seed=1), op.add(x, y, seed=2)
    assert np.array_equal(bits(r1), bits(r2)) and not np.array_equal(bits(r1), bits(r3))
    # 1 + 2^-10 lies 1/8 of the way from 1 to the next bf16 value 1 + 2^-7
    up = np.mean(np.asarray(r1).astype(np.float64) > 1.0)
    assert abs(up - 0.125) < 5 * np.sqrt(0.125 * 0.875 / 4096)


# -- elementwise semantics -------------------------------------------------------------------------

def test_no_implicit_contraction_and_fma_single_rounding():
    a = b = np.float32(1 + 2 ** -12)
    c = np.float32(-(1 + 2 ** -11))
    two = op.add(op.mul(a, b), c)
    one = op.fma(a, b, c)
    # a*b = 1 + 2^-11 + 2^-24 is a tie in f32 and rounds to the even 1 + 2^-11
    assert float(np.asarray(two)) == 0.0
    assert float(np.asarray(one)) == 2.0 ** -24


def test_minimum_maximum_ieee_2019():
    a = np.array([-0.0, 0.0, np.nan, 1.0], np.float32)
    b = np.array([0.0, -0.0, 1.0, np.nan], np.float32)
    mx, mn = np.asarray(op.maximum(a, b)), np.asarray(op.minimum(a, b))
    assert list(np.signbit(mx[:2])) == [False, False] and list(np.signbit(mn[:2])) == [True, True]
    assert np.isnan(mx[2:]).all() and np.isnan(mn[2:]).all()


def test_comparisons_are_ieee_and_where_selects_without_rounding():
    a = np.array([np.nan, -0.0, 1.0], np.float32)
    b = np.array([np.nan, 0.0, 2.0], np.float32)
    assert list(np.asarray(op.equal(a, b))) == [False, True, False]
    assert list(np.asarray(op.not_equal(a, b))) == [True, False, True]
    assert list(np.asarray(op.less(a, b))) == [False, False, True]
    r = op.where(op.less(a, b), a, b)
    assert np.array_equal(bits(r), bits(np.array([np.nan, 0.0, 1.0], np.float32)))
    with pytest.raises(DTypeError, match="i1"):
        op.where(a, a, b)
    with pytest.raises(DTypeError, match="i1 operands"):
        op.logical_and(a, b)
    assert list(np.asarray(op.logical_not(op.less(a, b)))) == [True, True, False]


def test_arithmetic_on_masks_is_a_type_error():
    with pytest.raises(DTypeError, match="op.cast"):
        op.add(np.array([True]), np.array([False]))


@pytest.mark.parametrize("fmt", ["f32", "bf16", "f16", "fp8_e4m3"])
def test_elementwise_against_f64_within_one_rounding(fmt):
    rng = np.random.default_rng(1)
    x = tr.asarray(rng.uniform(-4, 4, 64), dtype=fmt)
    y = tr.asarray(rng.uniform(0.5, 4, 64), dtype=fmt)
    xv, yv = (np.asarray(v).astype(np.float64) for v in (x, y))
    for f, ref in ((op.add, xv + yv), (op.sub, xv - yv), (op.mul, xv * yv), (op.div, xv / yv)):
        got = np.asarray(f(x, y)).astype(np.float64)
        # f32 accum rounding then one storage rounding: at most one ulp of the storage format
        # (plus 2^-24 relative from the accum step, negligible)
        eps = 2.0 ** -tr.numerics.get_format(fmt).man_bits
        assert np.all(np.abs(got - ref) <= eps * np.abs(ref) + 1e-30), f.__name__


# -- tracing -----------------------------------------------------------------------------------

def test_jit_traces_once_per_signature_and_matches_eager():
    calls = []

    @tr.jit
    def f(a, b, s):
        calls.append(1)
        return op.fma(a, b, a) * s, op.maximum(a, b)

    a = np.linspace(-1, 1, 8, dtype=np.float32)
    b = np.linspace(2, 3, 8, dtype=np.float32)
    r1 = f(a, b, 0.5)
    r2 = f(a + 1, b, 0.5)
    assert len(calls) == 1
    f(a, b, 0.25)  # a different static scalar: a new signature
    f(a[:4], b[:4], 0.5)  # a different shape
    assert len(calls) == 3 and len(f.cache) == 3
    assert isinstance(r1, tuple) and len(r1) == 2
    eager = op.fma(a, b, a) * 0.5
    assert np.array_equal(bits(r1[0]), bits(eager))
    assert not np.array_equal(bits(r2[0]), bits(eager))


def test_jit_returns_the_pytree_the_function_returns():
    """GRAPH-TRACE-1: the result's leaves are the module's results, rebuilt into its structure."""
    from typing import NamedTuple

    class Pair(NamedTuple):
        lo: object
        hi: object

    @tr.jit
    def f(a, b):
        return {"sum": a + b, "pair": Pair(op.minimum(a, b), op.maximum(a, b)), "none": ()}, [a * b]

    a, b = np.float32([1, -2]), np.float32([3, -4])
    out, (prod,) = f(a, b)
    assert sorted(out) == ["none", "pair", "sum"] and out["none"] == () and isinstance(out["pair"], Pair)
    assert np.array_equal(bits(out["pair"].hi), bits(np.float32([3, -2]))) and np.array_equal(bits(prod), bits(a * b))
    assert len(f.cache[next(iter(f.cache))].func.regions[0].blocks[0].last_op.operands) == 4


def test_traced_module_round_trips_and_reruns_identically():
    @tr.graph.module("blend")
    def blend(a, b):
        m = op.greater(a, b)
        return op.where(m, op.sub(a, b), op.fma(a, b, b))

    a = np.random.default_rng(0).normal(size=(3, 5)).astype(np.float32)
    b = np.random.default_rng(1).normal(size=(3, 5)).astype(np.float32)
    expect = blend(a, b)
    text = blend.inspect_ir("graph")
    assert '"tessera.graph.where"' in text and 'sym_name = "blend"' in text
    assert 'test_framework.py":' in text  # ops carry the user's source lines
    module = parse_module(text)
    assert str(module) == text
    verify(module)
    (got,) = run_function(module.body.first_op, a, b)
    assert np.array_equal(bits(got), bits(expect))


def test_tracer_control_flow_is_a_clear_error():
    @tr.jit
    def f(x):
        if op.greater(x, 0.0):
            return x
        return -x

    with pytest.raises(TraceError, match="op.where"):
        f(np.ones(3, np.float32))


def test_leaked_tracer_is_a_clear_error():
    leaked = []

    @tr.jit
    def f(x):
        leaked.append(x)
        return x + 1.0

    f(np.ones(2, np.float32))
    assert isinstance(leaked[0], Tracer)
    with pytest.raises(TraceError, match="after its trace ended"):
        @tr.jit
        def g(y):
            return y + leaked[0]
        g(np.ones(2, np.float32))


def test_nested_graph_functions_inline():
    @tr.jit
    def inner(x):
        return x * 2.0

    @tr.jit
    def outer(x):
        return inner(x) + 1.0

    r = outer(np.ones(2, np.float32))
    assert np.array_equal(np.asarray(r), np.full(2, 3.0, np.float32))
    assert "tessera.func" in outer.inspect_ir() and outer.inspect_ir().count('"tessera.func"') == 1
    assert not inner.cache


def test_inspect_ir_errors():
    @tr.jit
    def f(x):
        return x

    with pytest.raises(TraceError, match="has not been traced"):
        f.inspect_ir()
    f(np.ones(1, np.float32))
    with pytest.raises(OpError, match="IR level"):
        f.inspect_ir("bogus")


def test_interpreter_checks_arguments():
    @tr.jit
    def f(x):
        return x + 1.0

    f(np.ones(3, np.float32))
    func = f.trace(np.ones(3, np.float32)).body.first_op
    with pytest.raises(DTypeError, match="dtype float64"):
        run_function(func, np.ones(3))
    with pytest.raises(ShapeError, match="shape"):
        run_function(func, np.ones(4, np.float32))
    with pytest.raises(OpError, match="takes 1 argument"):
        run_function(func)


def test_symbolic_parameters_bind_one_size_per_name():
    text = '''"tessera.module"() ({
  "tessera.func"() ({
  ^bb0(%0: tensor<[n]xf32>, %1: tensor<[n]xf32>):
    %2 = "tessera.graph.add"(%0, %1) : (tensor<[n]xf32>, tensor<[n]xf32>) -> tensor<[n]xf32>
    "tessera.return"(%2) : (tensor<[n]xf32>) -> ()
  }) {function_type = (tensor<[n]xf32>, tensor<[n]xf32>) -> tensor<[n]xf32>, sym_name = "f"} : () -> ()
}) : () -> ()'''
    module = parse_module(text)
    verify(module)
    (r,) = run_function(module.body.first_op, np.ones(5, np.float32), np.ones(5, np.float32))
    assert np.array_equal(r, np.full(5, 2.0, np.float32))
    with pytest.raises(ShapeError, match="symbolic dimension n"):
        run_function(module.body.first_op, np.ones(5, np.float32), np.ones(6, np.float32))


def test_graph_dialect_is_closed_and_verified_by_the_same_rules():
    good = '''"tessera.module"() ({
  "tessera.func"() ({
  ^bb0(%0: tensor<4xf32>):
    %1 = "tessera.graph.add"(%0, %0) : (tensor<4xf32>, tensor<4xf32>) -> tensor<4xf32>
    "tessera.return"(%1) : (tensor<4xf32>) -> ()
  }) {function_type = (tensor<4xf32>) -> tensor<4xf32>, sym_name = "f"} : () -> ()
}) : () -> ()'''
    verify(parse_module(good))
    with pytest.raises(VerifyError, match="did you mean add"):
        verify(parse_module(good.replace("graph.add", "graph.ad")))
    with pytest.raises(VerifyError, match="unknown attribute"):
        verify(parse_module(good.replace("(%0, %0) :", "(%0, %0) {sed = 1} :")))
    bad_type = good.replace("-> tensor<4xf32>\n", "-> tensor<4xf16>\n", 1).replace(
        '"tessera.return"(%1) : (tensor<4xf32>)', '"tessera.return"(%1) : (tensor<4xf16>)')
    with pytest.raises(VerifyError, match="differ from the inferred"):
        verify(parse_module(bad_type))
