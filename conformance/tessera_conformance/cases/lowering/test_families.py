"""LOWER-FAMILY-1 (what lowers, with which default schedule) and LOWER-PLAN-1 (launches and
the buffers the host sees)."""
import numpy as np
import pytest

import tessera_ref as t
from tessera_ref import op
from tessera_ref.errors import LoweringError
from tessera_ref.lowering import graph_to_schedule
from tessera_ref.lowering.family import FAMILIES, KernelFamily
from tessera_ref.numerics import Policy
from tessera_ref.ops import PRIMITIVES
from tessera_conformance import assert_bits, clause

from ..tiles.support import line_of, part
from .support import adversarial, graph, graph_of, kernels, lowered, schedule_of, tile_funcs

RNG = np.random.default_rng(9)

FAMILY_OPS = {
    "matmul": ["matmul"],
    "rows": ["layernorm_safe", "max", "mean", "min", "rmsnorm_safe", "softmax", "sum"],
    "elementwise": ["abs", "add", "cast", "cos", "div", "equal", "erf", "erfc", "exp", "expm1", "fma", "gelu",
                    "greater", "greater_equal", "less", "less_equal", "log", "logical_and", "logical_not",
                    "logical_or", "maximum", "minimum", "mul", "neg", "not_equal", "pow", "rsqrt", "sigmoid", "silu",
                    "sin", "sqrt", "sub", "tanh", "where"],
    "attention": ["flash_attention"],
    "random": ["dropout", "rand"],
}


@clause("LOWER-FAMILY-1")
def test_the_families_and_their_ops():
    assert list(FAMILIES) == list(FAMILY_OPS)
    for name, ops in FAMILY_OPS.items():
        family = FAMILIES[name]
        assert isinstance(family, KernelFamily) and family.ops() == ops
        assert all(PRIMITIVES[o].kernel_family is family for o in ops)
    lowering = {p.kernel_family for p in PRIMITIVES.values()}
    assert lowering == set(FAMILIES.values()) | {None}
    assert PRIMITIVES["argmax"].kernel_family is None and PRIMITIVES["transpose"].kernel_family is None


def _default(fn, *shapes):
    module = graph_to_schedule(graph_of(fn, *[np.ones(s, np.float32) for s in shapes]))
    (k,) = [o for o in module.body.first_op.regions[0].entry if o.name == "tessera.schedule.kernel"]
    s = schedule_of(k)
    return {key: s[key] for key in ("tile", "lanes", "vectorize", "shared", "async_copy", "stages", "swizzle")}


@clause("LOWER-FAMILY-1", "SCHED-FIT-1")
@pytest.mark.parametrize("fn, shapes, want", [
    (lambda a, b: op.matmul(a, b), [(256, 256), (256, 256)],
     dict(tile=[64, 64, 32], lanes=128, vectorize=1, shared=True, async_copy=True, stages=2, swizzle="none")),
    (lambda x: op.softmax(x), [(16, 64)],
     dict(tile=[4], lanes=128, vectorize=1, shared=False, async_copy=False, stages=1, swizzle="none")),
    (lambda a, b: a + b, [(4, 256), (4, 256)],
     dict(tile=[128], lanes=128, vectorize=1, shared=False, async_copy=False, stages=1, swizzle="none")),
    (lambda q: op.flash_attention(q, q, q, block_k=64), [(256, 64)],
     dict(tile=[64, 64, 64], lanes=128, vectorize=1, shared=True, async_copy=True, stages=2, swizzle="none")),
])
def test_default_schedules(fn, shapes, want):
    assert _default(fn, *shapes) == want


def bad_transpose(x):
    return op.transpose(x)  # LOWER-FAMILY bad op


def bad_reduction(x):
    return op.sum(x, axis=1)  # LOWER-FAMILY bad policy


def bad_matmul(a, b):
    return op.matmul(a, b, transpose_a=True)  # LOWER-FAMILY bad transpose


def bad_empty(a, b):
    return op.matmul(a, b)  # LOWER-FAMILY bad empty


def bad_axes(x):
    return op.sum(x, axis=(0, 2))  # LOWER-FAMILY bad axes


def bad_where(m, a):
    return op.where(m, a, a)  # LOWER-FAMILY bad where


def bad_lanes(q):
    return op.flash_attention(q, q, q, block_k=12)  # LOWER-FAMILY bad lanes


@clause("LOWER-FAMILY-1")
@pytest.mark.parametrize("fn, args, directives, marker, types", [
    (bad_transpose, [np.ones((4, 8), np.float32)], None, "bad op", "tensor<4x8xf32>"),
    (bad_reduction, [t.asarray(np.ones((4, 64), np.float32), policy=Policy("f32", reduction="exact"))], None,
     "bad policy", "reduction=exact"),
    (bad_reduction, [t.asarray(np.ones((4, 64), np.float32), policy=Policy("f32", rounding="rtz"))], None,
     "bad policy", "rounding=rtz"),
    (bad_reduction, [t.asarray(np.ones((4, 64), np.float32), policy=Policy("f32", accum="f16"))], None,
     "bad policy", "accum=f16"),
    (bad_matmul, [np.ones((64, 64), np.float32)] * 2, dict(shared=False), "bad transpose", "transpose_a"),
    (bad_empty, [np.ones((0, 64), np.float32), np.ones((64, 64), np.float32)], None, "bad empty", "tensor<0x64xf32>"),
    (bad_axes, [np.ones((5, 7, 3), np.float32)], None, "bad axes", "tensor<5x7x3xf32>"),
    (bad_where, [np.ones((5, 1), bool), np.arange(35).reshape(5, 7)], None, "bad where", "tensor<5x7xindex>"),
    (bad_lanes, [np.ones((32, 16), np.float32)], dict(lanes=48), "bad lanes", "48 lanes"),
])
def test_anything_else_is_a_lowering_error_naming_op_types_and_line(backend, fn, args, directives, marker, types):
    with pytest.raises(LoweringError, match=line_of(__file__, f"# LOWER-FAMILY {marker}")) as info:
        lowered(backend, fn, *args, directives=directives)
    assert types in str(info.value)


@clause("LOWER-FAMILY-1", "LOWER-EXACT-1")
def test_supported_policies_f64_storage_and_accumulation(backend):
    x = adversarial(RNG, (4, 100), np.float64)
    f = lambda x: op.sum(x, axis=1)  # noqa: E731
    got, _, _ = lowered(backend, f, x)
    assert got[0].dtype == np.float64
    assert_bits(got, graph(f, x))


@clause("LOWER-FAMILY-1", "LOWER-PLAN-1", "LOWER-FUSE-1")
def test_constants_stay_on_the_host(backend):
    x = adversarial(RNG, (4, 40))
    f = lambda x: op.softmax(x * 3.0 + np.ones((4, 40), np.float32))  # noqa: E731
    got, reports, program = lowered(backend, f, x)
    hosted = [o.name for o, plan in program.steps if plan is None]
    assert hosted and set(hosted) == {"tessera.graph.constant"}
    assert len(reports) == 2  # the multiply and the add are one fused kernel, then the softmax
    assert_bits(got, graph(f, x))


@clause("LOWER-PLAN-1")
@pytest.mark.parametrize("fn, shapes, buffers, grid", [
    (lambda a, b: op.matmul(a, b), [(64, 48), (48, 96)], ["64x48", "48x96", "64x96"], [2, 3]),
    (lambda a, b: op.matmul(a, b, transpose_a=True, transpose_b=True), [(48, 64), (96, 48)],
     ["48x64", "96x48", "64x96"], [2, 3]),
    (lambda a, b: op.matmul(a, b, transpose_b=True), [(2, 1, 32, 16), (3, 32, 16)],
     ["2x32x16", "3x32x16", "6x32x32"], [1, 1, 6]),
    (lambda x: op.sum(x, axis=1), [(5, 7, 3)], ["5x7x3", "5x3"], [5]),
    (lambda x: op.max(x, axis=(1, 2), keepdims=True), [(5, 7, 3)], ["5x21x1", "5x1"], [5]),
    (lambda x: op.softmax(x, axis=0), [(6, 10)], ["1x6x10", "1x6x10"], [5]),
    (lambda a, b: a * b, [(5, 7, 3), (5, 7, 3)], ["105", "105", "105"], [1]),
    (lambda q, k, v: op.flash_attention(q, k, v, block_k=32), [(2, 64, 16), (2, 96, 16), (2, 96, 8)],
     ["2x64x16", "2x96x16", "2x96x8", "2x64x8"], [1, 2]),
])
def test_kernels_see_the_host_arrays_reshaped(backend, fn, shapes, buffers, grid):
    """Matmul [M, K] [K, N] [M, N] (batched: each operand's batch flattened, transposed as
    stored), rows [O, L, I] -> [O, I] or [O, L, I], elementwise flat, attention [batch, S, D];
    each kernel a func of one module with its launch."""
    args = [adversarial(RNG, s) for s in shapes]
    got, reports, program = lowered(backend, fn, *args, directives=dict(tile=(32, 32, 16)) if "matmul" in
                                    fn.__code__.co_names else None)
    (func,) = tile_funcs(program)
    assert [str(ty) for ty in func.attributes["function_type"].inputs] == \
        [f"tensor<{b}xf32>" for b in buffers]
    assert list(func.attributes["launch.grid"]) == grid and tuple(part(backend, reports[0], "grid")) == tuple(grid)
    assert part(backend, reports[0], "lanes") == func.attributes["launch.lanes"]
    assert len(kernels(program)) == 1
    assert_bits(got, graph(fn, *args))


@clause("LOWER-PLAN-1")
def test_the_kernels_of_a_function_form_one_module(backend):
    a = adversarial(RNG, (32, 32))
    got, reports, program = lowered(backend, lambda a, b: op.softmax(op.matmul(a, b) - b), a, a)
    funcs = tile_funcs(program)
    assert len(funcs) == len(reports) == 3 and len({f.attributes["sym_name"] for f in funcs}) == 3
    assert all("launch.grid" in f.attributes and "launch.lanes" in f.attributes for f in funcs)


@clause("LOWER-CAST-1", "LOWER-FUSE-1")
@pytest.mark.parametrize("to, rounding, overflow", [("bf16", "rtz", "native"), ("fp8_e4m3", "rne", "saturate"),
                                                    ("fp8_e5m2", "rup", "native"), ("f64", "rdown", "saturate"),
                                                    ("fp8_e4m3", "stochastic", "native")])
def test_casts_lower_to_elementwise_kernels_with_the_graphs_bits(backend, to, rounding, overflow):
    x = adversarial(RNG, (4, 96))
    x.flat[:5] = [np.nan, -np.inf, 3e38, -0.0, 1e-42]
    seed = 2 ** 64 - 3 if rounding == "stochastic" else None
    f = lambda x: op.cast(op.cast(x, to, rounding=rounding, overflow=overflow, seed=seed), "f32") * 2.0  # noqa: E731
    got, _, program = lowered(backend, f, x)
    assert [k.attributes["op"] for k in kernels(program)] == ["cast+cast+mul"]
    assert_bits(got[0], t.jit(f, backend="interp")(x).numpy())


@clause("LOWER-RNG-1")
@pytest.mark.parametrize("fn", [lambda: op.rand((5, 70), seed=2 ** 63 + 1, stream=4, dtype="bf16"),
                                lambda: op.rand((5, 70), seed=8, dtype="f64"),
                                lambda x: op.dropout(x, 0.4, seed=12, stream=2)],
                         ids=["rand_bf16", "rand_f64", "dropout"])
def test_random_ops_draw_in_the_kernel_with_the_graphs_bits(backend, fn):
    x = adversarial(RNG, (5, 70))
    args = (x,) if fn.__code__.co_argcount else ()
    got, _, program = lowered(backend, fn, *args, directives={"lanes": 64, "vectorize": 2})
    assert len(kernels(program)) == 1 and kernels(program)[0].attributes["op"] in ("rand", "dropout")
    assert_bits(got[0], t.jit(fn, backend="interp")(*args).numpy())
