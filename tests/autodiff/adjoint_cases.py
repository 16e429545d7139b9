"""The adjoint-law cases: one or more applications of every differentiable primitive, on
float64 values (complex<f32> for the FFT family), and the helpers that run them eagerly."""
from __future__ import annotations

import dataclasses

import numpy as np

from tessera_ref.ops import PRIMITIVES, asarray, bind

#: Ops that run only on a mesh (their impl needs devices); their rules are checked by the
#: collective tests on simulated meshes, not eagerly here.
MESH_ONLY = {"all_reduce", "reduce_scatter", "all_gather", "all_to_all", "collective_permute", "shard_slice"}


@dataclasses.dataclass
class Case:
    """One application: operands (``diff[i]``: whether operand i gets a tangent), attributes,
    and the arithmetic the op computes in (``"f64"``, or ``"f32"`` for the complex ops)."""

    operands: list
    attrs: dict
    diff: tuple
    precision: str = "f64"
    label: str = ""


def rng(seed):
    return np.random.default_rng(seed)


def R(*shape, seed=0, low=None):
    """Random f64 values; ``low`` gives values in ``[low, low + 1)`` instead of normal ones."""
    g = rng(seed)
    return g.random(shape) + low if low is not None else g.standard_normal(shape)


def C(*shape, seed=0):
    """Random complex values (complex<f32> operands)."""
    g = rng(seed)
    return (g.standard_normal(shape) + 1j * g.standard_normal(shape)).astype(np.complex64)


def case(*operands, diff=None, precision="f64", label="", **attrs) -> Case:
    diff = tuple(True for _ in operands) if diff is None else diff
    return Case(list(operands), attrs, diff, precision, label)


def _spd(n, seed):
    a = R(n, n, seed=seed)
    return a @ a.T + n * np.eye(n)


def _csr():
    indptr = np.array([0, 2, 2, 5, 6], dtype=np.int64)
    indices = np.array([3, 0, 1, 1, 4, 2], dtype=np.int64)  # a duplicate column in row 2, unsorted row 0
    return indptr, indices


UNARY_POS = ("log", "sqrt", "rsqrt")
UNARY = ("exp", "expm1", "tanh", "erf", "erfc", "silu", "sigmoid", "sin", "cos", "neg", "abs")


def _cases() -> dict:
    cases = {n: [case(R(3, 4, seed=1))] for n in UNARY}
    cases.update({n: [case(R(3, 4, seed=2, low=0.5))] for n in UNARY_POS})
    cases["gelu"] = [case(R(3, 4, seed=3)), case(R(3, 4, seed=3), approximate="tanh")]
    for n in ("add", "sub", "mul", "minimum", "maximum"):
        cases[n] = [case(R(3, 4, seed=4), R(3, 4, seed=5)), case(R(2, 1, 4, seed=6), R(3, 1, seed=7), label="bcast")]
    cases["div"] = [case(R(3, 4, seed=8), R(4, seed=9, low=1.0))]
    cases["pow"] = [case(R(3, 4, seed=10, low=0.5), R(3, 4, seed=11))]
    cases["fma"] = [case(R(3, 4, seed=12), R(4, seed=13), R(3, 1, seed=14))]
    cases["where"] = [case(rng(15).random((3, 4)) < 0.5, R(3, 4, seed=16), R(4, seed=17), diff=(False, True, True))]
    cases["cast"] = [case(R(3, 4, seed=18), to="f64")]
    cases["sum"] = [case(R(3, 4, 5, seed=19), axis=(0, 2)), case(R(3, 4, seed=20), keepdims=True),
                    case(R(70, seed=21), axis=0)]
    cases["mean"] = [case(R(3, 4, 5, seed=22), axis=1), case(R(3, 4, seed=23), axis=(0, 1), keepdims=True)]
    cases["max"] = [case(R(3, 4, 5, seed=24), axis=(0, 2)), case(R(3, 4, seed=25), axis=1, keepdims=True)]
    cases["min"] = [case(R(3, 4, 5, seed=26), axis=2), case(R(3, 4, seed=27))]
    cases["reshape"] = [case(R(2, 3, 4, seed=28), shape=(6, -1))]
    cases["transpose"] = [case(R(2, 3, 4, seed=29), perm=(1, 2, 0))]
    cases["broadcast_to"] = [case(R(3, 1, seed=30), shape=(2, 3, 5))]
    cases["slice"] = [case(R(7, 6, seed=31), starts=(1, 5), stops=(7, -1), steps=(2, -2)),
                      case(R(5, 4, seed=32), starts=(2, 0), stops=(3, 4), steps=(1, 3))]
    cases["concat"] = [case(R(2, 3, seed=33), R(2, 1, seed=34), R(2, 2, seed=35), axis=1)]
    cases["split"] = [case(R(6, 2, seed=36), sizes=(1, 3, 2), axis=0)]
    cases["split_qkv"] = [case(R(2, 3, 24, seed=37), heads=4), case(R(3, 24, seed=38), heads=4, groups=2)]
    cases["matmul"] = [
        case(R(3, 4, seed=39), R(4, 5, seed=40)),
        case(R(2, 4, 3, seed=41), R(5, 4, seed=42), transpose_a=True, transpose_b=True, label="batched"),
        case(R(1, 3, 4, seed=43), R(2, 4, 5, seed=44), R(5, seed=45), label="gemm"),
        case(R(4, 3, seed=46), R(4, 5, seed=47), R(3, 1, seed=48), transpose_a=True, label="gemm-ta")]
    cases["cholesky"] = [case(_spd(4, 49)), case(np.stack([_spd(3, 50), _spd(3, 51)]), label="batched")]
    cases["svd"] = [case(R(5, 3, seed=52)), case(R(3, 5, seed=53)), case(R(2, 4, 4, seed=54), label="batched")]
    indptr, indices = _csr()
    cases["spmm"] = [case(indptr, indices, R(6, seed=55), R(5, 3, seed=56), diff=(False, False, True, True),
                          shape=(4, 5))]
    ids = np.array([[3, 0, 3], [1, 3, 4]], dtype=np.int32)  # repeated ids: their cotangents add up
    cases["take"] = [case(R(5, 3, seed=90), ids, diff=(True, False)),
                     case(R(2, 5, seed=91), ids[0].astype(np.int64), axis=1, diff=(True, False), label="axis 1")]
    cases["scatter_add"] = [case(R(2, 3, 4, seed=92), ids, size=6, diff=(True, False)),
                            case(R(4, 3, seed=93), ids[1].astype(np.uint8), size=5, axis=1, diff=(True, False),
                                 label="axis 1")]
    cases["softmax"] = [case(R(3, 5, seed=57)), case(R(4, 3, seed=58), axis=0)]
    cases["log_softmax"] = [case(R(3, 5, seed=94)), case(R(4, 3, seed=95), axis=0)]
    labels = np.array([[4, 0], [2, 4]], dtype=np.int32)
    cases["cross_entropy"] = [case(R(2, 2, 5, seed=96), labels, diff=(True, False), reduction=r, label=r)
                              for r in ("mean", "sum", "none")]
    x = R(3, 6, seed=59)
    cases["layernorm_safe"] = [case(x), case(x, R(6, seed=60), R(6, seed=61), eps=0.1),
                               case(R(5, 2, seed=62), R(5, seed=63), axis=0)]
    cases["rmsnorm_safe"] = [case(x), case(x, R(6, seed=64), eps=0.1), case(R(5, 2, seed=65), axis=0)]
    cases["norm_safe_bwd"] = [case(x, R(3, 6, seed=95), R(6, seed=96), eps=1e-5, center=True, bias=True),
                              case(x, R(3, 6, seed=97), eps=0.1, center=False),
                              case(R(5, 2, seed=98), R(5, 2, seed=99), R(5, seed=100), axis=0, eps=1e-6, center=False),
                              case(R(2, 3, 4, seed=101), R(2, 3, 4, seed=102), R(4, seed=103), eps=1e-5, center=True)]
    q, k, v = R(2, 3, 4, seed=66), R(2, 5, 4, seed=67), R(2, 5, 3, seed=68)
    cases["flash_attention"] = [case(q, k, v), case(q, k, v, causal=True, scale=0.7, block_k=2),
                                case(R(1, 3, 4, seed=69), R(2, 3, 4, seed=70), R(1, 3, 2, seed=71), label="bcast")]
    cases["flash_attention_lse"] = [case(q, k), case(q, k, causal=True, scale=0.7, block_k=2),
                                    case(R(1, 3, 4, seed=69), R(2, 3, 4, seed=70), label="bcast")]
    o, do = R(2, 3, 3, seed=90), R(2, 3, 3, seed=91)
    lse = np.log(np.exp(0.5 * q @ np.swapaxes(k, -1, -2)).sum(-1))  # near the true statistic: P sums to about 1
    cases["flash_attention_bwd"] = [case(q, k, v, o, lse, do), case(q, k, v, o, lse, do, causal=True, block_k=2, block_q=2),
                                    case(R(1, 3, 4, seed=69), R(2, 3, 4, seed=70), R(1, 3, 2, seed=71), R(2, 3, 2, seed=92),
                                         R(2, 3, seed=93), R(2, 3, 2, seed=94), scale=0.5, label="bcast")]
    cases["conv2d"] = [case(R(2, 3, 6, 5, seed=72), R(4, 3, 3, 2, seed=73)),
                       case(R(1, 2, 9, 8, seed=74), R(3, 2, 2, 3, seed=75), stride=(2, 3), padding=(1, 2, 0, 1),
                            dilation=(2, 1)),
                       case(R(1, 5, 6, 2, seed=76), R(3, 2, 3, 3, seed=77), padding="same", layout="NHWC")]
    cases["fft"] = [case(C(3, 8, seed=78), precision="f32"), case(C(6, 3, seed=79), axis=0, precision="f32"),
                    case(R(2, 5, seed=80).astype(np.float32), precision="f32", label="real input")]
    cases["ifft"] = [case(C(3, 8, seed=81), precision="f32"), case(C(5, seed=82), precision="f32")]
    cases["fft2d"] = [case(C(2, 4, 3, seed=83), precision="f32")]
    cases["real"] = [case(C(3, 4, seed=84), precision="f32")]
    cases["imag"] = [case(C(3, 4, seed=85), precision="f32")]
    cases["complex"] = [case(R(3, 4, seed=86).astype(np.float32), R(4, seed=87).astype(np.float32), precision="f32")]
    cases["dropout"] = [case(R(4, 5, seed=88), rate=0.3, seed=7, stream=2), case(R(3, seed=89), rate=0.0, seed=1)]
    return cases


CASES = _cases()


# -- the check ------------------------------------------------------------------------------------
def call(name: str, operands, attrs) -> tuple:
    out = bind(PRIMITIVES[name], *operands, **attrs)
    return out if isinstance(out, tuple) else (out,)


def full_attrs(name: str, operands, attrs) -> dict:
    """The attribute dict the rules see: defaults filled, canonical."""
    prim = PRIMITIVES[name]
    full = prim.check_attrs(dict(attrs))
    prim.infer_types(full, tuple(asarray(x).type for x in operands))
    return full


def random_like(x, g):
    a = np.asarray(x)
    values = g.standard_normal(a.shape)
    if a.dtype.kind == "c":
        values = values + 1j * g.standard_normal(a.shape)
    return values.astype(a.dtype)


def inner(a, b) -> tuple:
    """``(Σ Re(conj(a)·b), Σ |a|·|b|)`` in f64: the real inner product and its magnitude scale."""
    a, b = np.asarray(a).astype(np.complex128), np.asarray(b).astype(np.complex128)
    return float(np.sum((np.conj(a) * b).real)), float(np.sum(np.abs(a) * np.abs(b)))


def finite_difference(name, operands, attrs, tangents, h) -> tuple:
    def at(sign):
        moved = [x if t is None else asarray(np.asarray(x) + sign * h * np.asarray(t)) for x, t in zip(operands, tangents)]
        return [np.asarray(r).astype(np.complex128) for r in call(name, moved, attrs)]
    return tuple((p - m) / (2 * h) for p, m in zip(at(1), at(-1)))
