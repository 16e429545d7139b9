"""The shape ops (GRAPH-RESHAPE-1 … GRAPH-SPLITQKV-1).

Shape ops move element codes and never round, so the bound against NumPy is exact equality
of the bits (``bits``): NumPy's reshape/transpose/indexing/concatenate on the same storage
arrays is an independent reference for where each element goes. ``split_qkv`` is checked
against a loop over the index formula of its clause.
"""
import ml_dtypes
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, OpError, ShapeError
from tessera_ref.interp import run_function
from tessera_ref.ir import TensorType, parse_module, verify
from tessera_ref.ops import PRIMITIVES, bind

HERE = "test_shape.py:"
RNG = np.random.default_rng(7)


def bits(x):
    return np.ascontiguousarray(np.asarray(x)).view(np.uint8)


def same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(bits(a), bits(b))


def data(shape, element):
    """An array of ``shape`` holding ``element`` values, with NaN and -0.0 among the floats."""
    if element == "i1":
        return tr.asarray(RNG.random(shape) < 0.5)
    if element == "index":
        return tr.asarray(RNG.integers(-2 ** 40, 2 ** 40, shape))
    if element == "complex<f32>":
        return tr.asarray((RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(np.complex64))
    values = RNG.standard_normal(shape).astype(np.float32)
    if values.size > 2:
        values.flat[0], values.flat[1] = np.nan, -0.0
    return tr.asarray(values, dtype=element)


ELEMENTS = ["f32", "bf16", "fp8_e4m3", "fp4_e2m1", "i1", "index", "complex<f32>"]


# -- (a) agreement with NumPy, every element -----------------------------------------------------

@pytest.mark.parametrize("element", ELEMENTS)
def test_every_op_moves_values_as_numpy_does(element):
    x = data((2, 3, 4), element)
    a = np.asarray(x)
    assert same(op.reshape(x, (4, -1)), a.reshape(4, 6))
    assert same(op.reshape(x, (24,)), a.reshape(24))
    assert same(op.transpose(x), a.T) and same(x.T, a.T) and same(x.mT, np.swapaxes(a, -1, -2))
    assert same(op.transpose(x, (1, -1, 0)), np.transpose(a, (1, 2, 0)))
    assert same(op.permute(x, (2, 0, 1)), np.transpose(a, (2, 0, 1)))
    assert same(op.broadcast_to(x[:, :1], (5, 2, 3, 4)), np.broadcast_to(a[:, :1], (5, 2, 3, 4)))
    assert same(op.slice(x, (1, None), (None, -1), (1, -2)), a[1:, :-1:-2])
    assert same(op.concat([x, x[:, :2]], axis=1), np.concatenate([a, a[:, :2]], axis=1))
    parts = op.split(x, [1, 0, 3], axis=-1)
    assert len(parts) == 3 and all(same(p, r) for p, r in zip(parts, (a[..., :1], a[..., 1:1], a[..., 1:])))
    assert all(x1.type.policy is x.type.policy for x1 in (op.reshape(x, (24,)), parts[0]))
    assert same(op.expand_dims(x, -1), a[..., None]) and same(op.squeeze(x[:, :1]), a[:, 0])


INDICES = [0, -1, (1, 2), (slice(None), 1), (Ellipsis, 0), (None, 1, Ellipsis, None), (slice(None, None, -1),),
           (slice(5, -9, -2), slice(1, 100), 3), (1, slice(3, 1)), (Ellipsis,), (slice(-100, 100, 3), None),
           (np.int64(-2), slice(None, None, 2), slice(None, 1, -1))]


@pytest.mark.parametrize("index", INDICES, ids=repr)
def test_getitem_is_numpy_basic_indexing(index):
    x = data((2, 3, 4), "bf16")
    assert same(x[index], np.asarray(x)[index])


def test_slice_with_fewer_entries_than_axes_keeps_the_rest_whole():
    x = data((4, 5), "f16")
    assert same(op.slice(x, [1], [3]), np.asarray(x)[1:3])


def test_rank_zero_tensors():
    s = tr.asarray(np.float32(-0.0))
    assert same(op.slice(s, (), ()), np.float32(-0.0)) and same(s[None], np.array([-0.0], np.float32))
    assert same(op.reshape(s, (1, 1)), np.full((1, 1), -0.0, np.float32)) and same(s.T, np.float32(-0.0))


def test_iterating_over_an_array_stops_at_its_end():
    x = data((3, 2), "f32")
    rows = list(x)
    assert len(rows) == 3 and all(same(r, np.asarray(x)[i]) for i, r in enumerate(rows))


def test_split_into_equal_parts_and_a_single_part_is_a_tuple():
    x = data((6, 2), "f32")
    a, b, c = op.split(x, 3)
    assert same(b, np.asarray(x)[2:4])
    (whole,) = op.split(x, 1)
    assert same(whole, x)


def split_qkv_reference(x, heads):
    """GRAPH-SPLITQKV-1's index formula, one element at a time."""
    *lead, s_len, width = x.shape
    e = width // 3
    d_len = e // heads
    out = [np.empty((*lead, heads, s_len, d_len), x.dtype) for _ in range(3)]
    for idx in np.ndindex(*lead, heads, s_len, d_len):
        *b, h, s, d = idx
        for m in range(3):
            out[m][idx] = x[(*b, s, m * e + h * d_len + d)]
    return out


@pytest.mark.parametrize("shape,heads,element", [((5, 12), 2, "f32"), ((2, 3, 24), 4, "bf16"),
                                                 ((1, 2, 2, 6), 1, "index"), ((3, 18), 3, "i1")])
def test_split_qkv_follows_the_clause_layout(shape, heads, element):
    x = data(shape, element)
    q, k, v = op.split_qkv(x, heads=heads)
    for got, want in zip((q, k, v), split_qkv_reference(np.asarray(x), heads)):
        assert same(got, want)


def test_nan_payloads_and_signed_zeros_are_moved_bit_for_bit():
    raw = np.array([0x7FC00001, 0xFFC12345, 0x80000000, 0x3F800000], np.uint32).view(np.float32)
    x = tr.asarray(raw)
    for result, want in ((op.reshape(x, (2, 2)).T, raw.reshape(2, 2).T), (op.concat([x, x]), np.tile(raw, 2)),
                         (x[::-1], raw[::-1]), (op.broadcast_to(x, (2, 4)), np.stack([raw, raw]))):
        assert same(result, want)  # NumPy moves float32 codes without touching them


# -- attributes in canonical form ------------------------------------------------------------------

def test_attributes_are_stored_canonically():
    x = np.zeros((2, 3, 4), np.float32)
    m = tr.jit(lambda x: (op.reshape(x, (-1, 4)), x.T, op.concat([x, x], -1), op.split(x, 2, axis=-1)[0],
                          x[:, ::-2], x[:, 5:], x[1]), rewrite=False).trace(x)
    text = str(m)
    for expected in ("shape = [6, 4]", "perm = [2, 1, 0]", "axis = 2", "sizes = [2, 2]",
                     "starts = [0, 2, 0], steps = [1, -2, 1], stops = [2, -1, 4]",
                     "starts = [0, 0, 0], steps = [1, 1, 1], stops = [2, 0, 4]",
                     "starts = [1, 0, 0], steps = [1, 1, 1], stops = [2, 3, 4]"):
        assert expected in text, expected


def test_non_canonical_attributes_in_parsed_ir_are_rejected():
    text = ('"tessera.module"() ({\n  "tessera.func"() ({\n  ^bb0(%0: tensor<2x3xf32>):\n'
            '    %1 = "tessera.graph.transpose"(%0) {perm = [-1, 0]} : (tensor<2x3xf32>) -> tensor<3x2xf32>\n'
            '    "tessera.return"(%1) : (tensor<3x2xf32>) -> ()\n'
            '  }) {function_type = (tensor<2x3xf32>) -> tensor<3x2xf32>, sym_name = "f"} : () -> ()\n}) : () -> ()')
    with pytest.raises(tr.errors.TesseraError, match="canonical"):
        verify(parse_module(text))


# -- symbolic dimensions -----------------------------------------------------------------------------

def infer(name, *types, **attrs):
    prim = PRIMITIVES[name]
    return prim.infer_types(prim.check_attrs(attrs), types)


def test_symbolic_dimensions_pass_through_when_provable():
    bx = TensorType(("B", 64), "f32")
    assert str(infer("reshape", bx, shape=("B", 8, 8))[0]) == "tensor<[B]x8x8xf32>"
    assert str(infer("reshape", bx, shape=(-1, 8, 8))[0]) == "tensor<[B]x8x8xf32>"
    assert str(infer("reshape", bx, shape=("B", -1))[0]) == "tensor<[B]x64xf32>"
    assert str(infer("transpose", bx)[0]) == "tensor<64x[B]xf32>"
    assert str(infer("broadcast_to", TensorType(("B", 1), "f32"), shape=(2, "B", 5))[0]) == "tensor<2x[B]x5xf32>"
    q = infer("split_qkv", TensorType(("B", "S", 48), "bf16"), heads=4)
    assert [str(t) for t in q] == ["tensor<[B]x4x[S]x4xbf16>"] * 3
    with pytest.raises(ShapeError, match=r"\[B\]x64xf32"):
        infer("reshape", bx, shape=(-1, 2, 16, 4))
    with pytest.raises(ShapeError, match="symbolic"):
        infer("broadcast_to", TensorType((1,), "f32"), shape=("B",))
    with pytest.raises(ShapeError, match="whole axis"):
        infer("slice", bx, starts=(1, 0), stops=("B", 64), steps=(1, 1))
    with pytest.raises(ShapeError, match="whole axis"):
        infer("slice", TensorType((4,), "f32"), starts=(0,), stops=("B",), steps=(1,))


def test_a_symbolic_module_runs_on_concrete_sizes():
    text = ('"tessera.module"() ({\n  "tessera.func"() ({\n  ^bb0(%0: tensor<[B]x64xf32>):\n'
            '    %1 = "tessera.graph.reshape"(%0) {shape = ["B", 8, 8]} : (tensor<[B]x64xf32>) -> tensor<[B]x8x8xf32>\n'
            '    %2 = "tessera.graph.slice"(%1) {starts = [0, 1, 0], steps = [1, 2, 1], stops = ["B", 8, 8]} : '
            '(tensor<[B]x8x8xf32>) -> tensor<[B]x4x8xf32>\n'
            '    "tessera.return"(%2) : (tensor<[B]x4x8xf32>) -> ()\n'
            '  }) {function_type = (tensor<[B]x64xf32>) -> tensor<[B]x4x8xf32>, sym_name = "f"} : () -> ()\n'
            '}) : () -> ()')
    x = RNG.standard_normal((3, 64)).astype(np.float32)
    (out,) = run_function(parse_module(text).body.first_op, x)
    assert same(out, x.reshape(3, 8, 8)[:, 1::2])


# -- (c) errors ------------------------------------------------------------------------------------------

ERRORS = [
    (lambda x: op.reshape(x, (5, -1)), ShapeError, r"2x3x4xf32.*\(5x-1\)"),
    (lambda x: op.reshape(x, (-1, -1)), ShapeError, "single -1"),
    (lambda x: op.transpose(x, (0, 1)), ShapeError, "2 entries for tensor<2x3x4xf32>"),
    (lambda x: op.transpose(x, (0, 0, 1)), ShapeError, "not a permutation"),
    (lambda x: op.transpose(x, (0, 1, 3)), ShapeError, "axis 3 is out of range"),
    (lambda x: op.broadcast_to(x, (3, 3, 4)), ShapeError, r"2x3x4xf32.*dimension 0 is 2"),
    (lambda x: op.broadcast_to(x, (3, 4)), ShapeError, "fewer dimensions"),
    (lambda x: x[2], ShapeError, "index 2 is out of range for axis 0 of tensor<2x3x4xf32>"),
    (lambda x: x[0, 0, 0, 0], ShapeError, "too many indices"),
    (lambda x: x[..., ...], OpError, "more than one"),
    (lambda x: x[np.array([0, 1]), 0], OpError, "advanced indexing"),  # x[ids] alone is a take (GRAPH-TAKE-1)
    (lambda x: x[[True, False]], OpError, "advanced indexing"),
    (lambda x: x[True], OpError, "advanced indexing"),
    (lambda x: x[::0], OpError, "slice step cannot be zero"),
    (lambda x: op.slice(x, (0, 0), (1,)), ShapeError, "same length"),
    (lambda x: op.concat([x, x[:, :1, :1]], axis=1), ShapeError, r"dimension 2 differs \(tensor<2x3x4xf32>"),
    (lambda x: op.concat([x, x[0]]), ShapeError, "different ranks"),
    (lambda x: op.concat([x, op.cast(x, "bf16")]), DTypeError, "different element types"),
    (lambda x: op.concat([]), OpError, "at least one operand"),
    (lambda x: op.split(x, 3, axis=-1), ShapeError, "3 equal parts do not divide axis -1 of tensor<2x3x4xf32>"),
    (lambda x: op.split(x, [1, 2]), ShapeError, r"sizes \[1, 2\] do not split axis 0 of tensor<2x3x4xf32>"),
    (lambda x: op.split_qkv(x, heads=2), ShapeError, "3\\*heads = 6"),
    (lambda x: op.squeeze(x, 0), ShapeError, "axis 0 of tensor<2x3x4xf32> has size 2"),
]


@pytest.mark.parametrize("fn,kind,message", ERRORS, ids=[m for _, _, m in ERRORS])
def test_user_errors_name_the_shapes_and_the_line(fn, kind, message):
    x = data((2, 3, 4), "f32")
    with pytest.raises(kind, match=message) as info:
        fn(x)
    assert HERE in str(info.value)


def test_out_of_range_index_is_also_an_index_error():
    with pytest.raises(IndexError):
        data((2,), "f32")[5]


@pytest.mark.parametrize("name", ["reshape", "transpose", "broadcast_to", "slice", "concat", "split", "split_qkv"])
def test_unknown_attributes_are_op_errors(name):
    with pytest.raises(OpError, match="unknown attribute") as info:
        bind(PRIMITIVES[name], data((2, 3), "f32"), bogus=1)
    assert HERE in str(info.value)


# -- (d) eager == jit and (e) the traced module round-trips ------------------------------------------------

def pipeline(x):
    q, k, v = op.split_qkv(x, heads=2)
    t = op.concat([q.mT, op.permute(k, (0, 2, 1))], axis=1)
    parts = op.split(t, [1, 4], axis=-1)
    return (op.reshape(t, (-1,)), parts[1][::-1, None, 1:], op.broadcast_to(v[:1], (3, 2, 5, 2)),
            op.expand_dims(op.squeeze(v[:, :1]), 0))


@pytest.mark.parametrize("element", ["f32", "bf16", "fp8_e5m2", "index", "i1"])
def test_eager_traced_and_parsed_results_have_the_same_bits(element):
    x = data((5, 12), element)
    eager = pipeline(x)
    f = tr.jit(pipeline)
    traced = f(x)
    m = f.trace(x)
    assert str(parse_module(str(m))) == str(m)
    parsed = run_function(parse_module(str(m)).body.first_op, np.asarray(x))
    for e, t, p in zip(eager, traced, parsed):
        assert same(e, t) and same(e, p)


def test_costs_count_bytes_moved_and_no_flops():
    from tessera_ref.ops import Call
    x, y = TensorType((4, 8), "bf16"), TensorType((8, 4), "bf16")

    def cost(name, ins, outs, **attrs):
        return PRIMITIVES[name].cost(Call(PRIMITIVES[name], attrs, ins, outs))
    assert cost("reshape", (x,), (y,), shape=(8, 4)) == (0, 0)  # a view
    assert cost("transpose", (x,), (y,), perm=(1, 0)) == (0, 128)
    half = TensorType((2, 8), "bf16")
    assert cost("slice", (x,), (half,), starts=(0, 0), stops=(2, 8), steps=(1, 1)) == (0, 64)
    assert cost("split", (x,), (half, half), sizes=(2, 2), axis=0) == (0, 128)
    assert ml_dtypes.bfloat16(1).nbytes == 2  # the byte counts above are 2 bytes per element
