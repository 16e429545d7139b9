"""CUDA-RUN-3 on the harness: a NaN that rendered arithmetic produces (x86's default NaN on the
twin, a GPU's own) is the interpreter's canonical quiet NaN where it is stored or cast, a NaN
loaded and stored keeps its bits, and widening casts follow the policy's overflow mode on every
f16/bf16 code."""
import ml_dtypes
import numpy as np
import pytest

from cpu_programs import bits
from tessera_ref import backends
from tessera_ref.ir import tile as T
from tessera_ref.ir.launch import Launch
from tessera_ref.numerics import Policy

DTYPES = {"f64": np.dtype(np.float64), "f32": np.dtype(np.float32), "f16": np.dtype(np.float16),
          "bf16": np.dtype(ml_dtypes.bfloat16)}
#: the canonical quiet NaN (sign clear) of each format, written out
CANONICAL = {"f64": 0x7FF8000000000000, "f32": 0x7FC00000, "f16": 0x7E00, "bf16": 0x7FC0}
#: the format a value of each format is cast into (narrowing or widening)
CAST_TO = {"f64": "f32", "f32": "f16", "f16": "f32", "bf16": "f32"}
N = 32
OUTPUTS = ("add", "div", "neg", "abs", "cast", "copy", "select", "loop")


def _launch(backend, module, buffers, grid=1, lanes=N):
    backends.get(backend).launch(Launch(module, None, grid, lanes, buffers))


def _specials(fmt):
    """x, y: lane i holds pattern i mod 8 (NaNs of both signs with a payload bit included)."""
    dt = DTYPES[fmt]
    neg_nan = np.array([CANONICAL[fmt] | (1 << (8 * dt.itemsize - 1)) | 1], f"u{dt.itemsize}").view(dt)[0]
    pos_nan = np.array([CANONICAL[fmt] | 2], f"u{dt.itemsize}").view(dt)[0]
    inf = np.inf
    x = np.array([inf, 0, neg_nan, 1, -inf, -4, 3, pos_nan] * (N // 8), dt)
    y = np.array([-inf, 0, 1, neg_nan, -inf, 2, 0, 1] * (N // 8), dt)
    return x, y


def _nan_kernel(fmt):
    out = CAST_TO[fmt]
    kb = T.KernelBuilder("nans", [("X", T.buffer((N,), fmt)), ("Y", T.buffer((N,), fmt))]
                         + [(o.upper(), T.buffer((N,), out if o == "cast" else fmt), True) for o in OUTPUTS])
    X, Y, ADD, DIV, NEG, ABS, CAST, COPY, SEL, LOOP = kb.params
    i = kb.lane_id()
    x, y = kb.load(X, [i]), kb.load(Y, [i])
    total = kb.binary("add", x, y)
    kb.store(ADD, [i], total)
    kb.store(DIV, [i], kb.binary("div", x, y))
    kb.store(NEG, [i], kb.unary("neg", x))
    kb.store(ABS, [i], kb.unary("abs", x))
    kb.store(CAST, [i], kb.cast(kb.binary("sub", y, x), out))
    kb.store(COPY, [i], x)
    kb.store(SEL, [i], kb.select(kb.binary("lt", x, y), total, y))
    (acc,) = kb.for_(0, 2, 1, init=[kb.const(0.0, fmt)], body=lambda k, a: [kb.binary("add", a, kb.binary("mul", x, y))])
    kb.store(LOOP, [i], acc)
    return kb.finish()


def _run(backend, module, inputs, out_dtypes):
    outs = [np.zeros(N, d) for d in out_dtypes]
    _launch(backend, module, list(inputs) + outs)
    return outs


@pytest.mark.parametrize("fmt", sorted(DTYPES))
def test_stored_and_cast_nans_are_the_interpreters(fmt):
    x, y = _specials(fmt)
    out_dtypes = [DTYPES[CAST_TO[fmt]] if o == "cast" else DTYPES[fmt] for o in OUTPUTS]
    module = _nan_kernel(fmt)
    got = _run("cuda-cpu", module, (x, y), out_dtypes)
    want = _run("interp", module, (x, y), out_dtypes)
    for name, g, w in zip(OUTPUTS, got, want):
        assert np.array_equal(bits(g), bits(w)), (name, bits(g)[:8], bits(w)[:8])
    got = dict(zip(OUTPUTS, (bits(g)[:8] for g in got)))
    canon, canon_to = CANONICAL[fmt], CANONICAL[CAST_TO[fmt]]
    assert all(got["add"][j] == canon for j in (0, 2, 3, 7))  # inf + (−inf), NaN + 1, 1 + NaN
    assert all(got["div"][j] == canon for j in (0, 1, 2, 3, 4, 7))  # inf / inf, 0 / 0, NaN operands
    assert got["neg"][2] == canon and got["abs"][2] == canon and got["neg"][7] == canon
    assert got["cast"][4] == canon_to and got["cast"][2] == canon_to  # −inf − (−inf): NaN, not x86's −NaN
    assert got["copy"][2] == bits(x)[2] and got["copy"][7] == bits(x)[7]  # a loaded NaN keeps its bits
    assert got["select"][0] == DTYPES[fmt].type(-np.inf).view(got["select"].dtype)  # inf < −inf: no
    assert got["select"][5] == DTYPES[fmt].type(-2).view(got["select"].dtype)
    assert got["loop"][2] == canon and got["loop"][0] == DTYPES[fmt].type(-np.inf).view(got["loop"].dtype)


def _mma_kernel():
    kb = T.KernelBuilder("mma_nan", [("A", T.buffer((4, 4), "f32")), ("B", T.buffer((4, 4), "f32")),
                                     ("C", T.buffer((4, 4), "f32"), True), ("D", T.buffer((4, 4), "f32"), True)])
    A, B, C, D = kb.params
    acc = kb.mma(A, B, kb.fill((4, 4), "f32", 0.0))
    kb.frag_store(C, acc)
    kb.frag_store(D, kb.binary("sub", acc, kb.frag_load(A)))
    return kb.finish()


def test_fragment_nans_from_mma_and_fragment_arithmetic_are_the_interpreters():
    a = np.arange(16, dtype=np.float32).reshape(4, 4)
    a[0, 0], a[1, 1], a[2, 2] = np.inf, -np.inf, np.array([0xFFC00001], np.uint32).view(np.float32)[0]
    b = np.ones((4, 4), np.float32)
    b[0, :] = 0  # inf · 0
    b[1, 1] = -1  # −inf · −1 = inf, plus finite products
    module = _mma_kernel()
    got = [np.zeros((4, 4), np.float32) for _ in range(2)]
    want = [np.zeros((4, 4), np.float32) for _ in range(2)]
    _launch("cuda-cpu", module, [a, b] + got)
    _launch("interp", module, [a, b] + want)
    for g, w in zip(got, want):
        assert np.array_equal(bits(g), bits(w))
    c, d = bits(got[0]), bits(got[1])
    assert (c[0] == 0x7FC00000).all() and (c[2] == 0x7FC00000).all()  # inf·0 in row 0, the −NaN of row 2
    assert c[1, 1] == 0x7F800000 and c[1, 0] == 0xFF800000
    assert d[0, 0] == 0x7FC00000 and (d[2] == 0x7FC00000).all()  # NaN − inf, NaN − (−NaN)


def _cast_kernel(src, dst, rounding, overflow, n):
    policy = Policy(dst, rounding=rounding, overflow=overflow)
    kb = T.KernelBuilder("widen", [("X", T.buffer((n,), src)), ("Y", T.buffer((n,), dst), True)])
    X, Y = kb.params
    i = kb.linear_id()
    kb.store(Y, [i], kb.cast(kb.load(X, [i]), policy))
    return kb.finish()


def _widened(x, dst, overflow):
    """GRAPH-CAST-1 into a wider float format, computed here: the exact value, ±inf kept
    (native) or ±max (saturate), a NaN the target's canonical quiet NaN with its sign."""
    dt = DTYPES[dst]
    with np.errstate(invalid="ignore"):  # NaN codes
        wide = x.astype(np.float64)
        y = wide.astype(dt)
    if overflow == "saturate":
        y = np.where(np.isinf(wide), np.copysign(np.finfo(dt).max, wide), y).astype(dt)
    out = bits(y).copy()
    sign = np.signbit(wide).astype(out.dtype) << (8 * dt.itemsize - 1)
    out[np.isnan(wide)] = (CANONICAL[dst] | sign)[np.isnan(wide)]
    return out


@pytest.mark.parametrize("overflow", ["native", "saturate"])
@pytest.mark.parametrize("rounding", ["rne", "rtz", "rup", "rdown"])
@pytest.mark.parametrize("src, dst", [("f16", "f32"), ("bf16", "f32"), ("f16", "f64"), ("bf16", "f64")])
def test_widening_casts_follow_the_overflow_mode_on_every_code(src, dst, rounding, overflow):
    n = 1 << 16
    x = np.arange(n, dtype=np.uint32).astype(np.uint16).view(DTYPES[src])
    y = np.zeros(n, DTYPES[dst])
    _launch("cuda-cpu", _cast_kernel(src, dst, rounding, overflow, n), [x, y], grid=n // 256, lanes=256)
    want = _widened(x, dst, overflow)
    assert np.array_equal(bits(y), want), np.flatnonzero(bits(y) != want)[:4]
    assert bits(y)[0x7C00 if src == "f16" else 0x7F80] == (bits(np.array(np.inf, DTYPES[dst]))
                                                          if overflow == "native" else bits(np.finfo(DTYPES[dst]).max))


def _carried_kernel():
    """acc = X[i]; for _ in range(n): acc = acc + Y[i]; Z[i] = acc: a loaded NaN carried
    through a loop that may not run."""
    kb = T.KernelBuilder("carried", [("X", T.buffer((N,), "f32")), ("Y", T.buffer((N,), "f32")),
                                     ("Z", T.buffer((N,), "f32"), True), ("n", "index")])
    X, Y, Z, n = kb.params
    i = kb.lane_id()
    x, y = kb.load(X, [i]), kb.load(Y, [i])
    (acc,) = kb.for_(0, n, 1, init=[x], body=lambda k, a: [kb.binary("add", a, y)])
    kb.store(Z, [i], acc)
    return kb.finish()


@pytest.mark.parametrize("trips", [0, 1, 2])
def test_a_loaded_nan_carried_by_a_loop_keeps_its_bits_only_if_the_loop_does_not_run(trips):
    x, y = _specials("f32")
    module = _carried_kernel()
    got, want = np.zeros(N, np.float32), np.zeros(N, np.float32)
    _launch("cuda-cpu", module, [x, y, got, trips])
    _launch("interp", module, [x, y, want, trips])
    assert np.array_equal(bits(got), bits(want))
    assert bits(got)[2] == (bits(x)[2] if trips == 0 else CANONICAL["f32"])  # −NaN with a payload
    assert bits(got)[3] == CANONICAL["f32"] if trips else bits(got)[3] == bits(x)[3]


def _observed_kernel():
    """acc = X[i]; for k in range(2): W[i] = acc; acc = acc + Y[i]: the carried value is stored
    in a loop that surely runs (its first iteration stores the loaded NaN, the second a sum)."""
    kb = T.KernelBuilder("observed", [("X", T.buffer((N,), "f32")), ("Y", T.buffer((N,), "f32")),
                                      ("W", T.buffer((N,), "f32"), True), ("Z", T.buffer((N,), "f32"), True)])
    X, Y, W, Z = kb.params
    i = kb.lane_id()
    x, y = kb.load(X, [i]), kb.load(Y, [i])

    def body(k, a):
        kb.store(W, [i], a)
        return [kb.binary("add", a, y)]
    (acc,) = kb.for_(0, 2, 1, init=[x], body=body)
    kb.store(Z, [i], acc)
    return kb.finish()


def test_a_carried_value_stored_in_a_loop_that_runs_is_made_canonical_where_it_is_a_sum():
    x, y = _specials("f32")
    module = _observed_kernel()
    got = [np.zeros(N, np.float32) for _ in range(2)]
    want = [np.zeros(N, np.float32) for _ in range(2)]
    _launch("cuda-cpu", module, [x, y] + got)
    _launch("interp", module, [x, y] + want)
    for g, w in zip(got, want):
        assert np.array_equal(bits(g), bits(w))
    assert bits(got[0])[2] == CANONICAL["f32"] and bits(got[1])[2] == CANONICAL["f32"]  # (−NaN) + 1, stored
