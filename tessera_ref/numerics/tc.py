"""Tensor-core arithmetic: the published block-FMA models (spec clauses ``NUM-TC-*``).

A tensor core does not compute a dot product as a chain of IEEE fmas. It adds a *block* of
``n`` exact products and the accumulator ``c`` in one multi-term addition:

1. every nonzero product ``a_i·b_i`` is exact; its exponent is ``e(a_i) + e(b_i)``, where
   ``e(x) = max(⌊log2|x|⌋, emin)``, ``emin`` the input format's (or the block's floor: its
   ``emin``) — a subnormal input keeps ``emin``;
   ``c``'s exponent is ``max(⌊log2|c|⌋, −126)``;
2. with ``E`` the largest of these exponents, every term (each product and ``c``) is
   truncated toward zero to a multiple of ``2^(E − 23 − align_bits)``;
3. the truncated terms are added exactly; the sum is rounded once: toward zero into f32
   (to ``24 + min(align_bits, 0)`` significant bits, f32's exponent range, ``±inf`` from
   ``2^128``), or to nearest even into f16 when the instruction accumulates in f16. A zero
   sum is +0.

A dot product of length K is cut into instructions of ``instruction_k`` products (a short
last one runs only its blocks that hold a product); each instruction is a chain of blocks of
``n`` products, taking its k in the instruction's ``order`` (ascending unless the model says
otherwise), block after block. The accumulator ``c`` enters the first block and each block's result the next — or,
for an instruction that adds ``C`` after (``fadd``), the blocks start from +0 and their result
is added to ``c`` by one IEEE f32 addition, rounded to nearest even. Special inputs decide the
output first: a NaN product (``0·inf`` included) or ``c``, or infinities of both signs, give
NaN; other infinities give that infinity. Otherwise an accumulator that overflows to ``±inf``
stays there. (With ``fadd`` the special values are decided per instruction and the f32 add
does the rest, as IEEE arithmetic does.)

Instructions (NUM-TC-5): a kernel's K walk must induce the same instructions. ``mma.sync``
with ``m16n8k16`` (f16/bf16) covers k = 16: on sm_80 two blocks of 8 — the accumulator enters
the first, whose f32 result (rounded toward zero) enters the second; on sm_90 one block of 16.
``m16n8k32`` (fp8, sm_90) is what NVRTC compiles it into: two f16 ``HMMA.16816.F32`` on the
inputs converted to f16 (exponent floor −14) — the first from +0 over the k with
``k mod 4 ∈ {0, 1}``, the second over the rest onto the first — then an f32 ``FADD`` of C.
sm_70's ``m8n8k4`` is one block of 4. So a kernel issuing instructions over k ascending, with
the accumulator fragment carried from one to the next, computes exactly :func:`mma` provided
every K tile starts at a multiple of ``instruction_k`` (the matmul kernel family checks this).

The block parameters (products per block ``n``, extra alignment bits) are those of Khattak &
Mikaitis, "Accurate models of NVIDIA tensor cores" (2025; their MATLAB models
``V100TC``/``A100TC``/``H100TC`` and the generic block FMA), which refine Fasi, Higham,
Mikaitis & Pranesh, "Numerical behavior of NVIDIA tensor cores" (PeerJ CS, 2021). The sm_90
rows are validated: every output of ``tests/cuda/data/h200_mma_2026-11-28.npz`` (an H200) has
the model's bits (``TCModel.validated``); sm_80 and sm_70 are published, not yet validated
here. Everything here is exact: products are exact in f64, aligned terms are integers below
``2^28`` and block sums integers below ``2^34``, so no floating-point rounding takes place
except the explicit ones above (the ``fadd`` is one f32 addition of two f32 values).
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from fractions import Fraction

import numpy as np

from ..errors import ArithError, PolicyError
from .formats import Format, get_format

__all__ = ["BlockFMA", "TCModel", "MODELS", "model", "mma", "error_bound", "PREFIX"]

#: How the policy spelling names a model: ``accum="tc:sm80"``.
PREFIX = "tc:"
_LOW = -(1 << 20)  # the exponent of "no term": below every real exponent


@dataclass(frozen=True)
class BlockFMA:
    """One input format's instruction (NUM-TC-1, -5): blocks of ``products`` with ``align_bits``
    kept beyond f32's 24-bit significand when aligning to a block's largest exponent (negative:
    fewer; the f32 result then also keeps ``24 + align_bits`` bits). ``instruction_k``, a
    multiple of ``products``, is the K of the ``mma`` instruction; ``order`` the order in which
    its blocks take its k, block after block (empty: ascending); ``emin`` the exponent floor of
    the inputs (None: the input format's own). With ``fadd`` each instruction's blocks start
    from +0 and ``C`` is added to their result by one IEEE f32 addition; otherwise ``C`` enters
    the first block."""

    products: int
    align_bits: int
    instruction_k: int
    order: tuple = ()
    emin: int | None = None
    fadd: bool = False

    def __post_init__(self):
        if self.instruction_k % self.products or (self.order and sorted(self.order) != list(range(self.instruction_k))):
            raise PolicyError(f"BlockFMA: an instruction of k = {self.instruction_k} cannot be cut into blocks of "
                              f"{self.products} in the order {self.order}",
                              fix="give an instruction_k that is a multiple of products and an order that is a "
                                  "permutation of range(instruction_k)")

    @property
    def out_bits(self) -> int:
        """Significant bits of a block's f32 result."""
        return 24 + min(self.align_bits, 0)

    @property
    def k_order(self) -> tuple:
        """The instruction's k in the order its blocks take them."""
        return self.order or tuple(range(self.instruction_k))

    def floor(self, fmt) -> int:
        """The exponent floor of inputs of ``fmt``: ``emin``, or the format's smallest normal exponent."""
        return self.emin if self.emin is not None else 1 - get_format(fmt).bias

    def resolved(self, fmt) -> BlockFMA:
        """This block with the floor of ``fmt`` inputs and the k order spelled out (what the
        CPU twin of ``mma.sync`` is given)."""
        return replace(self, emin=self.floor(fmt), order=self.k_order)


@dataclass(frozen=True)
class TCModel:
    """A named tensor-core model (one GPU generation's ``mma`` instructions).

    ``formats`` maps each accepted input format to its :class:`BlockFMA`; ``f16_accum`` lists
    the input formats whose instruction can also accumulate in f16 (rounded to nearest even
    per block). ``instruction`` names the PTX the CUDA kernels use. ``validated`` lists the
    input formats whose f32-accumulating instruction has been run on a GPU with every output
    equal to the model's (``source`` says where)."""

    name: str
    gpu: str
    instruction: str
    formats: tuple
    f16_accum: tuple
    source: str
    validated: tuple = ()

    def __post_init__(self):
        if any(blk.fadd for name, blk in self.formats if name in self.f16_accum):
            raise PolicyError(f"{self.name}: an instruction that adds C by an f32 add (fadd) cannot accumulate in f16",
                              fix="leave its format out of f16_accum")

    def block(self, fmt) -> BlockFMA:
        """The block FMA for inputs of ``fmt``; a PolicyError when the instruction does not take them."""
        fmt = get_format(fmt)
        for name, blk in self.formats:
            if name == fmt.name:
                return blk
        tf32 = " (tf32, the tensor cores' format for f32 data, is not modeled)" if fmt.name == "f32" else ""
        raise PolicyError(
            f"{self.name} ({self.gpu}, {self.instruction}) does not take {fmt.name} inputs{tf32}; it takes "
            f"{', '.join(self.accepts)}",
            fix=f"store the matmul operands as {' or '.join(self.accepts)} (op.cast), or drop the tc: policy "
                "to accumulate with IEEE fmas (@accum(f32))")

    @property
    def accepts(self) -> tuple:
        return tuple(name for name, _ in self.formats)


_KM = "Khattak & Mikaitis 2025, MATLAB model {}"
#: sm_90's m16n8k32 (fp8) as NVRTC compiles it: two sm_90 f16 blocks on the inputs converted
#: to f16 (floor −14), the first over k mod 4 ∈ {0, 1}, the second over the rest; then C by an FADD
_FP8_SM90 = BlockFMA(16, 2, 32, order=tuple(sorted(range(32), key=lambda k: k % 4 >= 2)), emin=-14, fadd=True)
MODELS = {
    m.name: m for m in (
        TCModel("tc:sm70", "V100 (sm_70)", "mma.sync.aligned.m8n8k4 (f16)",
                (("f16", BlockFMA(4, 0, 4)),), ("f16",),
                _KM.format("V100TC") + "; Fasi et al. 2021 (4 products, no extra bits, RZ)"),
        TCModel("tc:sm80", "A100 (sm_80)", "mma.sync.aligned.m16n8k16 (f16, bf16)",
                (("f16", BlockFMA(8, 1, 16)), ("bf16", BlockFMA(8, 1, 16))), ("f16",),
                _KM.format("A100TC") + " (8 products, 1 extra bit, RZ); tf32 (4 products) is not modeled"),
        TCModel("tc:sm90", "H100 (sm_90)", "mma.sync.aligned.m16n8k16 (f16, bf16), m16n8k32 (e4m3, e5m2)",
                (("f16", BlockFMA(16, 2, 16)), ("bf16", BlockFMA(16, 2, 16)),
                 ("fp8_e4m3", _FP8_SM90), ("fp8_e5m2", _FP8_SM90)), ("f16",),
                _KM.format("H100TC") + " (16 products, 2 extra bits, RZ); fp8 m16n8k32 as NVRTC 13.0 compiles "
                                        "it (two f16 HMMA.16816 over k mod 4 in {0, 1} then the rest, then an "
                                        "FADD of C: NUM-TC-1). Measured on an H200 on 2026-11-28 "
                                        "(tests/cuda/data/h200_mma_2026-11-28.npz): every output of "
                                        "m16n8k16 (bf16, f16) and m16n8k32 (e4m3, e5m2), f32 accumulation, "
                                        "has the model's bits; f16 accumulation and wgmma are not validated "
                                        "(wgmma is not modeled)",
                validated=("f16", "bf16", "fp8_e4m3", "fp8_e5m2")),
    )
}


def model(name) -> TCModel:
    """The model named ``"tc:sm80"`` (or ``"sm80"``); a PolicyError naming the known ones."""
    if isinstance(name, TCModel):
        return name
    key = name if isinstance(name, str) and name.startswith(PREFIX) else f"{PREFIX}{name}"
    found = MODELS.get(key)
    if found is None:
        raise PolicyError(f"unknown tensor-core model {name!r}", fix=f"use one of {', '.join(MODELS)}")
    return found


def _exponents(x: np.ndarray, emin: int) -> np.ndarray:
    """``max(⌊log2|x|⌋, emin)`` for finite nonzero ``x`` (others: anything; callers mask them)."""
    _, e = np.frexp(np.where(np.isfinite(x), x, 0.0))
    return np.maximum(e.astype(np.int64) - 1, emin)


def _values(x, what: str, fmt: Format) -> np.ndarray:
    """``x`` as exact f64 values, checked to be values of ``fmt``."""
    arr = np.asarray(x)
    out = arr.astype(np.float64)
    if not np.array_equal(out.astype(fmt.dtype).astype(np.float64), out, equal_nan=True):
        raise ArithError(f"the tensor-core {what} holds values that are not {fmt.name} values",
                         fix=f"round it into {fmt.name} first (numerics.cast)")
    return out


def _round(S: np.ndarray, g: np.ndarray, bits: int, emin: int, emax: int, nearest: bool) -> np.ndarray:
    """The exact value ``S·2^g`` (``S`` integers) rounded to ``bits`` significant bits above
    the subnormal quantum ``2^(emin − bits + 1)``: toward zero, or to nearest even;
    ``±inf`` from ``2^(emax+1)``. A zero ``S`` gives +0; a nonzero one keeps its sign."""
    _, ex = np.frexp(S)
    qe = np.maximum(ex.astype(np.int64) - 1 + g, emin) - (bits - 1)
    shift = np.maximum(qe - g, 0)
    scaled = np.ldexp(S, (-shift).astype(np.int32))  # exact: a power-of-two scaling
    q = np.rint(scaled) if nearest else np.trunc(scaled)
    value = np.ldexp(q, (g + shift).astype(np.int32))
    return np.where(np.abs(value) >= 2.0 ** (emax + 1), np.copysign(np.inf, value), value)


def _block(acc: np.ndarray, P: np.ndarray, Ep: np.ndarray, blk: BlockFMA, f16_out: bool) -> np.ndarray:
    """One block FMA for every output: ``acc`` [...] finite, ``P`` [..., n] finite exact
    products with exponents ``Ep`` (``_LOW`` for zero products)."""
    ec = np.where(acc != 0, _exponents(acc, -126), _LOW)
    E = np.maximum(Ep.max(axis=-1), ec)
    g = E - 23 - blk.align_bits
    T = np.trunc(np.ldexp(P, (-g[..., None]).astype(np.int32)))
    S = (T.sum(axis=-1) + np.trunc(np.ldexp(acc, (-g).astype(np.int32)))) + 0.0  # exact integers; -0 -> +0
    if f16_out:
        return _round(S, g, 11, -14, 15, nearest=True)
    return _round(S, g, blk.out_bits, -126, 127, nearest=False)


def mma(a, b, c, model_name, *, fmt=None, out="f32") -> np.ndarray:
    """``D = C + A·B`` as the tensor-core model computes it (NUM-TC-2…4).

    ``a`` is ``[..., M, K]`` and ``b`` ``[..., K, N]`` (batch axes broadcast): arrays of the
    input format (``ml_dtypes`` arrays), or its decoded values as float64 with ``fmt`` naming
    the format. ``c`` broadcasts to ``[..., M, N]`` and holds f32 values (f16 with
    ``out="f16"``). Returns float32 (float16) ``[..., M, N]``.
    """
    m = model(model_name)
    if fmt is None:
        dtypes = {np.asarray(a).dtype, np.asarray(b).dtype}
        if len(dtypes) != 1 or np.dtype(np.float64) in dtypes:
            raise ArithError(f"tc.mma: cannot tell the input format from dtypes {sorted(map(str, dtypes))}",
                             fix="pass fmt= (e.g. fmt='bf16') with float64 values, or arrays of one format")
        fmt = dtypes.pop()
    fmt = get_format(fmt)
    blk = m.block(fmt)
    if out not in ("f32", "f16") or (out == "f16" and fmt.name not in m.f16_accum):
        raise PolicyError(f"{m.name} accumulates {fmt.name} products in "
                          f"{' or '.join(('f32',) + (('f16',) if fmt.name in m.f16_accum else ()))}, not {out}",
                          fix="use out='f32'")
    A, B = _values(a, "operand a", fmt), _values(b, "operand b", fmt)
    if A.ndim < 2 or B.ndim < 2 or A.shape[-1] != B.shape[-2]:
        raise ArithError(f"tc.mma needs a [..., M, K] and b [..., K, N], got {A.shape} and {B.shape}",
                         fix="give both operands matrix axes with a common K")
    ofmt = get_format(out)
    shape = np.broadcast_shapes(A.shape[:-2], B.shape[:-2]) + (A.shape[-2], B.shape[-1])
    try:
        acc = np.array(np.broadcast_to(_values(c, "accumulator c", ofmt), shape))
    except ValueError:
        raise ArithError(f"tc.mma: c of shape {np.shape(c)} does not broadcast to {shape}",
                         fix="pass c with the shape of a @ b") from None
    starts = _block_starts(A.shape[-1], blk)
    A, B = _instructions(A, blk), _instructions(np.swapaxes(B, -1, -2), blk)
    emin = blk.floor(fmt)
    Ea, Eb = _exponents(A, emin), _exponents(B, emin)
    terms = A[..., :, None, :], Ea[..., :, None, :], B[..., None, :, :], Eb[..., None, :, :]
    if not blk.fadd:
        return _decide(*_chain(acc, np.isnan(acc), acc == np.inf, acc == -np.inf, terms, starts, blk,
                               out == "f16")).astype(ofmt.dtype)
    acc = acc.astype(np.float32)
    zero, no, ik = np.zeros(shape), np.zeros(shape, bool), blk.instruction_k
    for k0 in range(0, A.shape[-1], ik):
        mine = [j for j in starts if k0 <= j < k0 + ik]
        part = _decide(*_chain(zero, no, no, no, terms, mine, blk, False)).astype(np.float32)
        with np.errstate(over="ignore", invalid="ignore"):
            acc = acc + part  # one IEEE f32 addition, rounded to nearest even (inf − inf: NaN)
    return np.where(np.isnan(acc), np.float32(np.nan), acc)


def _instructions(x: np.ndarray, blk: BlockFMA) -> np.ndarray:
    """``x`` [..., K] padded with zeros to whole instructions, each one's k in ``blk``'s order."""
    ik, K = blk.instruction_k, x.shape[-1]
    n = -(-K // ik) * ik
    x = np.concatenate([x, np.zeros(x.shape[:-1] + (n - K,))], axis=-1)
    return x[..., (np.arange(0, n, ik)[:, None] + np.asarray(blk.k_order, np.int64)).reshape(-1)]


def _block_starts(K: int, blk: BlockFMA) -> list:
    """Where the blocks holding one of the ``K`` products start in :func:`_instructions`'s order
    (a block of padding alone is left out: a short last instruction)."""
    real = _instructions(np.ones(K), blk).reshape(-1, blk.products).any(axis=1)
    return [int(i) * blk.products for i in np.flatnonzero(real)]


def _chain(acc, nan, pinf, ninf, terms, starts: list, blk: BlockFMA, f16_out: bool) -> tuple:
    """The blocks starting at ``starts`` (in ``terms``' order) onto ``acc`` (NUM-TC-3): the
    last block's results and the special-value flags (NaN, +inf, −inf seen) updated."""
    A, Ea, Bt, Ebt = terms
    n = blk.products
    for j in starts:
        with np.errstate(invalid="ignore"):
            P = A[..., j:j + n] * Bt[..., j:j + n]  # exact in f64; 0·inf is NaN
        nan = nan | np.isnan(P).any(axis=-1)
        pinf = pinf | (P == np.inf).any(axis=-1)
        ninf = ninf | (P == -np.inf).any(axis=-1)
        live = np.isfinite(P) & (P != 0)
        Ep = np.where(live, Ea[..., j:j + n] + Ebt[..., j:j + n], _LOW)
        finite = np.isfinite(acc)
        new = _block(np.where(finite, acc, 0.0), np.where(live, P, 0.0), Ep, blk, f16_out)
        acc = np.where(finite, new, acc)  # an accumulator that overflowed stays infinite
    return acc, nan, pinf, ninf


def _decide(acc, nan, pinf, ninf) -> np.ndarray:
    """The chain's result with the special values deciding first (NUM-TC-3)."""
    special = np.where(nan | (pinf & ninf), np.nan, np.where(pinf, np.inf, -np.inf))
    return np.where(nan | pinf | ninf, special, acc)


def error_bound(a, b, c, model_name, *, fmt=None) -> np.ndarray:
    """NUM-TC-4's bound on ``|D − (C + Σ_k a_k·b_k)|`` for every output of :func:`mma` (f32
    accumulation, finite results), as float64 values never below the exact bound.

    ``((1 + ε)^R − 1)·T + R·(1 + ε)^R·2^−126`` with ``R`` rounding steps (the blocks holding
    a product, plus one f32 add per instruction with ``fadd``),
    ``ε = (n + 1)·2^(−23−α) + 2^(−23−min(α, 0))`` and ``T = |C| + Σ_k â_k·b̂_k``,
    ``x̂ = max(|x|, 2^emin)`` (``emin`` the block's floor). ``T`` is summed in f64 over k
    ascending and enlarged by ``K·2^−52`` (more than the f64 rounding of that sum);
    ``(1 + ε)^R`` is exact (a fraction) and the result is enlarged by ``2^−40`` for the last
    roundings. The CUDA kernels of the ``tc:`` policies not yet validated on a GPU are checked
    with it.
    """
    m = model(model_name)
    A, B = np.asarray(a), np.asarray(b)
    fmt = get_format(fmt if fmt is not None else A.dtype)
    blk = m.block(fmt)
    lo = 2.0 ** blk.floor(fmt)
    Ah = np.maximum(np.abs(A.astype(np.float64)), lo)
    Bh = np.maximum(np.abs(B.astype(np.float64)), lo)
    K = A.shape[-1]
    total = np.abs(np.broadcast_to(np.asarray(c, np.float64),
                                   np.broadcast_shapes(A.shape[:-2], B.shape[:-2]) + (A.shape[-2], B.shape[-1])))
    for k in range(K):  # ascending: the same bits on every machine
        total = total + Ah[..., :, k, None] * Bh[..., k, None, :]
    total = total * (1 + K * 2.0 ** -52)
    eps = Fraction(blk.products + 1, 2 ** (23 + blk.align_bits)) + Fraction(1, 2 ** (23 + min(blk.align_bits, 0)))
    steps = max(1, len(_block_starts(K, blk)) + (-(-K // blk.instruction_k) if blk.fadd else 0))
    grow = (1 + eps) ** steps  # exact: (grow - 1) loses nothing to cancellation
    return (float(grow - 1) * total + steps * float(grow) * 2.0 ** -126) * (1 + 2.0 ** -40)
