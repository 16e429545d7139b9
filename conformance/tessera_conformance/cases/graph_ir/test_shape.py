"""GRAPH-RESHAPE-1 … GRAPH-SPLITQKV-1: shape ops move element codes (every element kind, NaN
payloads and −0 included); NumPy's data movement on the same storage arrays is the reference,
split_qkv is checked against a loop over its index formula."""
import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.errors import DTypeError, OpError, ShapeError, TesseraError
from tessera_conformance import assert_bits, clause, run

from ._cases import check, jit, run_text
from ._formats import from_codes

ELEMENTS = ["f32", "bf16", "fp8_e4m3", "fp4_e2m1", "i1", "index", "complex<f32>"]


def data(shape, element, seed=0):
    """A storage array of ``shape`` and ``element``; floats carry NaN payloads and −0."""
    g = np.random.default_rng(seed)
    n = int(np.prod(shape))
    if element == "i1":
        return g.random(shape) < 0.5
    if element == "index":
        return g.integers(-2 ** 40, 2 ** 40, shape)
    if element == "complex<f32>":
        return (g.standard_normal(shape) + 1j * g.standard_normal(shape)).astype(np.complex64)
    if element == "f32":
        codes = g.integers(0, 2 ** 32, n, dtype=np.uint64)   # every code, NaN payloads included
        return from_codes(codes, "f32").reshape(shape)
    x = np.asarray(tr.asarray(g.standard_normal(n), dtype=element))
    if n > 2:
        x[0], x[1] = -0.0, np.nan
    return x.reshape(shape)


def arg(x, element):
    return tr.asarray(x) if element != "f32" else x


@clause("GRAPH-RESHAPE-1")
@pytest.mark.parametrize("element", ELEMENTS)
def test_reshape_keeps_the_flat_order(backend, element):
    """reshape (one −1 inferred), expand_dims and squeeze: element of flat index f stays at f."""
    x = data((2, 3, 4), element)
    check(backend, lambda v: (op.reshape(v, (4, -1)), op.reshape(v, (24,)), op.reshape(v, (-1, 2, 1, 3)),
                              op.expand_dims(v, 1), op.squeeze(op.reshape(v, (1, 24, 1))),
                              op.squeeze(op.reshape(v, (1, 24, 1)), 2)), (arg(x, element),),
          [x.reshape(4, 6), x.reshape(24), x.reshape(4, 2, 1, 3), np.expand_dims(x, 1), x.reshape(24),
           x.reshape(1, 24)], what=element)


@clause("GRAPH-RESHAPE-1")
def test_reshape_errors_and_canonical_shape(backend):
    """Bad sizes, two -1s, squeezing a non-1 axis are ShapeErrors; the IR shape has no -1."""
    x = np.zeros((2, 3, 4), np.float32)
    f = jit(backend, lambda v: op.reshape(v, (4, -1)), rewrite=False)
    f(x)
    assert "shape = [4, 6]" in f.inspect_ir()
    for fn in (lambda v: op.reshape(v, (5, -1)), lambda v: op.reshape(v, (-1, -1)), lambda v: op.reshape(v, (25,)),
               lambda v: op.squeeze(v, 0)):
        with pytest.raises(ShapeError):
            run(backend, fn, x)


RESHAPE_SYM = '''"tessera.module"() ({
  "tessera.func"() ({
  ^bb0(%0: tensor<[B]x64xf32>, %1: tensor<[B]x[S]xf32>):
    %2 = "tessera.graph.reshape"(%0) {shape = ["B", 8, 8]} : (tensor<[B]x64xf32>) -> tensor<[B]x8x8xf32>
    %3 = "tessera.graph.reshape"(%1) {shape = ["S", "B"]} : (tensor<[B]x[S]xf32>) -> tensor<[S]x[B]xf32>
    "tessera.return"(%2, %3) : (tensor<[B]x8x8xf32>, tensor<[S]x[B]xf32>) -> ()
  }) {function_type = (tensor<[B]x64xf32>, tensor<[B]x[S]xf32>) -> (tensor<[B]x8x8xf32>, tensor<[S]x[B]xf32>), sym_name = "f"} : () -> ()
}) : () -> ()'''


@clause("GRAPH-RESHAPE-1", "GRAPH-TYPE-1")
def test_reshape_symbolic(backend):
    """[B]x64 -> [B]x8x8 and [B]x[S] -> [S]x[B] are legal; [B]x64 -> [B]x2x16 is rejected."""
    x, y = data((3, 64), "f32"), data((3, 5), "f32", 1)
    a, b = run_text(backend, RESHAPE_SYM, x, y)
    assert_bits(a, x.reshape(3, 8, 8))
    assert_bits(b, y.reshape(5, 3))
    bad = RESHAPE_SYM.replace('{shape = ["B", 8, 8]}', '{shape = ["B", 2, 16]}').replace("[B]x8x8", "[B]x2x16")
    with pytest.raises(TesseraError, match="reshape"):
        run_text(backend, bad, x, y)


@clause("GRAPH-TRANSPOSE-1")
@pytest.mark.parametrize("element", ELEMENTS)
def test_transpose_is_numpy_transpose(backend, element):
    """Result axis i is operand axis perm[i]: default/.T reverse, .mT swaps the last two, permute."""
    x = data((2, 3, 4), element)
    check(backend, lambda v: (op.transpose(v), v.T, v.mT, op.transpose(v, (1, -1, 0)), op.permute(v, (2, 0, 1))),
          (tr.asarray(x),), [x.T, x.T, np.swapaxes(x, -1, -2), np.transpose(x, (1, 2, 0)), np.transpose(x, (2, 0, 1))],
          what=element)


@clause("GRAPH-TRANSPOSE-1")
def test_transpose_errors_and_canonical_perm(backend):
    """A non-permutation is a ShapeError; the IR stores perm non-negative."""
    x = np.zeros((2, 3, 4), np.float32)
    for perm in ((0, 1), (0, 0, 1), (0, 1, 3)):
        with pytest.raises(ShapeError):
            run(backend, lambda v: op.transpose(v, perm), x)
    f = jit(backend, lambda v: (v.T, op.transpose(v, (-1, 0, 1))), rewrite=False)
    f(x)
    text = f.inspect_ir()
    assert "perm = [2, 1, 0]" in text and "perm = [2, 0, 1]" in text


@clause("GRAPH-BROADCASTTO-1")
@pytest.mark.parametrize("element", ELEMENTS)
def test_broadcast_to_is_numpy(backend, element):
    """Right-aligned, size-1 axes repeated, missing leading axes added."""
    x = data((3, 1, 4), element)
    check(backend, lambda v: (op.broadcast_to(v, (2, 3, 5, 4)), op.broadcast_to(v, (3, 1, 4))), (arg(x, element),),
          [np.broadcast_to(x, (2, 3, 5, 4)), x], what=element)


@clause("GRAPH-BROADCASTTO-1")
def test_broadcast_to_errors(backend):
    """Unfitting dimensions are ShapeErrors; a size-1 axis cannot grow to a symbolic size."""
    x = np.zeros((2, 3, 4), np.float32)
    for shape in ((3, 3, 4), (3, 4)):
        with pytest.raises(ShapeError):
            run(backend, lambda v: op.broadcast_to(v, shape), x)
    x = data((3, 1), "f32")
    assert_bits(run_text(backend, _one_op("broadcast_to", '{shape = [2, "B", 5]}', "[B]x1", "2x[B]x5"), x)[0],
                np.broadcast_to(x, (2, 3, 5)))
    with pytest.raises(TesseraError):
        run_text(backend, _one_op("broadcast_to", '{shape = ["B"]}', "1", "[B]"), np.ones(1, np.float32))


def _one_op(name, attrs, in_shape, out_shape, element="f32"):
    """A module applying one op with ``attrs`` to a tensor<in_shape>, giving tensor<out_shape>."""
    t_in, t_out = f"tensor<{in_shape}x{element}>", f"tensor<{out_shape}x{element}>"
    return (f'"tessera.module"() ({{\n  "tessera.func"() ({{\n  ^bb0(%0: {t_in}):\n'
            f'    %1 = "tessera.graph.{name}"(%0) {attrs} : ({t_in}) -> {t_out}\n'
            f'    "tessera.return"(%1) : ({t_out}) -> ()\n'
            f'  }}) {{function_type = ({t_in}) -> {t_out}, sym_name = "f"}} : () -> ()\n}}) : () -> ()')


INDICES = [(1,), (-1,), (slice(None, None, -1),), (slice(1, None), 2), (Ellipsis, slice(None, None, 2)),
           (None, 0, Ellipsis, None), (slice(-2, None), slice(5, 1, -2), slice(-100, 100)), (0, -1, -4),
           (slice(3, 1),), ()]


@clause("GRAPH-SLICE-1")
@pytest.mark.parametrize("index", INDICES, ids=[repr(i) for i in INDICES])
def test_getitem_is_numpy_basic_indexing(backend, index):
    """x[index]: ints, slices (negative steps, clamping), None and one ..., as NumPy."""
    x = data((3, 5, 4), "f32")
    check(backend, lambda v: v[index], (x,), x[index])


@clause("GRAPH-SLICE-1")
@pytest.mark.parametrize("element", ELEMENTS)
def test_slice_takes_python_slice_bounds(backend, element):
    """op.slice bounds are Python's slice(...).indices(d) on the leading axes, others whole."""
    x = data((4, 6, 3), element)
    check(backend, lambda v: (op.slice(v, (1, -1), (None, 0), (1, -2)), op.slice(v, (-10,), (10,)),
                              op.slice(v, (2, 5, 2), (0, 1, 0), (-1, -1, -1))), (arg(x, element),),
          [x[1:, -1:0:-2], x[-10:10], x[2:0:-1, 5:1:-1, 2:0:-1]], what=element)


@clause("GRAPH-SLICE-1")
def test_slice_attributes_are_tight_and_errors(backend):
    """Tight slice attributes; bad ints are ShapeError+IndexError; advanced indices OpErrors."""
    x = np.zeros((2, 3, 4), np.float32)
    f = jit(backend, lambda v: (v[:, ::-2], v[:, 5:], v[1], v[:, 0:3:2]), rewrite=False)
    f(x)
    text = f.inspect_ir()
    for want in ("starts = [0, 2, 0], steps = [1, -2, 1], stops = [2, -1, 4]",
                 "starts = [0, 0, 0], steps = [1, 1, 1], stops = [2, 0, 4]",
                 "starts = [1, 0, 0], steps = [1, 1, 1], stops = [2, 3, 4]",
                 "starts = [0, 0, 0], steps = [1, 2, 1], stops = [2, 3, 4]"):
        assert want in text, want
    for bad in (lambda v: v[2], lambda v: v[0, -4]):
        with pytest.raises(ShapeError):
            run(backend, bad, x)
        with pytest.raises(IndexError):
            run(backend, bad, x)
    for bad in (lambda v: v[np.array([0, 1]), 0], lambda v: v[[True]], lambda v: v[True], lambda v: v[::0],
                lambda v: v[..., ...]):
        with pytest.raises(OpError):
            run(backend, bad, x)
    assert len([r for r in tr.asarray(np.arange(3, dtype=np.float32))]) == 3


@clause("GRAPH-CONCAT-1")
@pytest.mark.parametrize("element", ELEMENTS)
def test_concat_in_operand_order(backend, element):
    """The joined axis holds operand m at [o_m, o_m + d_m); a negative axis counts from the end."""
    a, b, c = data((2, 3, 4), element, 1), data((2, 1, 4), element, 2), data((2, 0, 4), element, 3)
    check(backend, lambda x, y, z: (op.concat([x, y, z, x], axis=1), op.concat([x, x], axis=-1), op.concat([y])),
          (arg(a, element), arg(b, element), arg(c, element)),
          [np.concatenate([a, b, c, a], axis=1), np.concatenate([a, a], axis=2), b], what=element)


@clause("GRAPH-SLICE-1", "GRAPH-CONCAT-1", "GRAPH-SPLITQKV-1")
def test_symbolic_axes(backend):
    """Symbolic axes: slice keeps them whole, concat joins static axes only, split_qkv passes them."""
    x = data((3, 6), "f32")
    text = _one_op("slice", '{starts = [0, 1], steps = [1, 2], stops = ["B", 6]}', "[B]x6", "[B]x3")
    got = run_text(backend, text, x)
    assert_bits(got[0], x[:, 1::2])
    with pytest.raises(TesseraError):
        run_text(backend, _one_op("slice", '{starts = [1, 0], steps = [1, 1], stops = ["B", 6]}', "[B]x6", "[B]x6"), x)
    with pytest.raises(TesseraError):
        run_text(backend, _one_op("concat", "{axis = 0}", "[B]x6", "[B]x6"), x)
    assert_bits(run_text(backend, _one_op("concat", "{axis = 1}", "[B]x6", "[B]x6"), x)[0], x)
    q = data((2, 3, 48), "bf16")
    text = _one_op("split_qkv", "{groups = 2, heads = 4}", "[B]x[S]x48", "[B]x4x[S]x4", "bf16")
    text = text.replace('%1 = "tessera.graph.split_qkv"', '%1, %2, %3 = "tessera.graph.split_qkv"').replace(
        "-> tensor<[B]x4x[S]x4xbf16>\n", "-> (tensor<[B]x4x[S]x4xbf16>, tensor<[B]x4x[S]x4xbf16>, "
        "tensor<[B]x4x[S]x4xbf16>)\n", 1)
    text = text.replace('"tessera.return"(%1) : (tensor<[B]x4x[S]x4xbf16>)', '"tessera.return"(%1, %2, %3) : '
                        "(tensor<[B]x4x[S]x4xbf16>, tensor<[B]x4x[S]x4xbf16>, tensor<[B]x4x[S]x4xbf16>)")
    text = text.replace("-> tensor<[B]x4x[S]x4xbf16>, sym_name", "-> (tensor<[B]x4x[S]x4xbf16>, "
                        "tensor<[B]x4x[S]x4xbf16>, tensor<[B]x4x[S]x4xbf16>), sym_name")
    assert_bits(run_text(backend, text, q), _qkv_reference(q, 4, 2))


@clause("GRAPH-CONCAT-1")
def test_concat_errors(backend):
    """Different elements DTypeError, differing ranks/dimensions ShapeError, no operand OpError."""
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(DTypeError):
        run(backend, lambda v: op.concat([v, op.cast(v, "bf16")]), x)
    for bad in (lambda v: op.concat([v, v[:1, :1]], axis=0), lambda v: op.concat([v, v[0]])):
        with pytest.raises(ShapeError):
            run(backend, bad, x)
    with pytest.raises(OpError):
        run(backend, lambda v: op.concat([]), x)


@clause("GRAPH-SPLIT-1")
@pytest.mark.parametrize("element", ELEMENTS)
def test_split_sizes_and_equal_parts(backend, element):
    """split(x, n) gives n equal parts, split(x, sizes) parts of those sizes; always a tuple."""
    x = data((6, 4), element)
    got = run(backend, lambda v: (*op.split(v, 3), *op.split(v, [1, 0, 3], axis=-1), *op.split(v, 1)), arg(x, element))
    want = list(np.split(x, 3)) + [x[:, :1], x[:, 1:1], x[:, 1:]] + [x]
    assert_bits(got, want, element)


@clause("GRAPH-SPLIT-1")
def test_split_errors_and_canonical_sizes(backend):
    """A non-dividing n or wrong sizes are ShapeErrors; the IR holds sizes and a >= 0 axis."""
    x = np.zeros((2, 3, 4), np.float32)
    for bad in (lambda v: op.split(v, 3, axis=-1), lambda v: op.split(v, [1, 2])):
        with pytest.raises(ShapeError):
            run(backend, bad, x)
    f = jit(backend, lambda v: op.split(v, 2, axis=-1))
    assert isinstance(f(x), tuple)
    assert "sizes = [2, 2]" in f.inspect_ir() and "axis = 2" in f.inspect_ir()


def _qkv_reference(x, H, G):
    *lead, S, E3 = x.shape
    E = E3 // 3
    D, Hg = E // H, H // G
    out = [np.empty(tuple(lead) + (H, S, D), x.dtype) for _ in range(3)]
    for g in range(G):
        for h in range(Hg):
            for d in range(D):
                for which in range(3):
                    out[which][..., g * Hg + h, :, d] = x[..., :, g * 3 * E // G + which * E // G + h * D + d]
    return out


@clause("GRAPH-SPLITQKV-1")
@pytest.mark.parametrize("shape,heads,groups", [((5, 24), 2, 1), ((2, 3, 48), 4, 1), ((2, 3, 48), 4, 2),
                                                ((1, 4, 36), 6, 3)])
def test_split_qkv_index_formula(backend, shape, heads, groups):
    """q/k/v[..., g·Hg + h, s, d] = x[..., s, g·3E/G + {0,1,2}·E/G + h·D + d]."""
    for element in ("f32", "bf16"):
        x = data(shape, element)
        got = run(backend, lambda v: op.split_qkv(v, heads=heads, groups=groups), arg(x, element))
        assert_bits(got, _qkv_reference(x, heads, groups), element)


@clause("GRAPH-SPLITQKV-1")
def test_split_qkv_errors(backend):
    """A last dimension not divisible by 3·H, or G not dividing H, is a ShapeError."""
    x = np.zeros((2, 3, 24), np.float32)
    for kw in ({"heads": 3}, {"heads": 4, "groups": 3}):
        with pytest.raises(ShapeError):
            run(backend, lambda v: op.split_qkv(v, **kw), x)
