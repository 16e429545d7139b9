"""Tile IR -> CUDA C text (the ``"target"`` level of ``inspect_ir``), compiled by NVRTC.

:func:`emit_cuda` prints every tile kernel of a module as one ``__global__`` function, op by
op (LOWER-TARGET-1) through :data:`RULES`, one rule per Tile IR op (:data:`NO_RULE` names
the ops without one, and why): a tile is a thread block, a lane a thread
(``threadIdx.x``), tile ids are ``blockIdx``; global buffers are row-major pointers;
``alloc`` is a typed pointer into the kernel's one dynamic shared-memory array
``extern __shared__ __align__(16) unsigned char tsr_smem[]`` at the byte offset
:func:`tessera_ref.ir.tile.shared_layout` gives it (program order, 128-byte boundaries: the
interpreter's placement), rows padded by ``pad`` elements, byte offsets through
``TSR_SWIZZLE`` (CuTe ``Swizzle<3,4,3>``) with ``swizzle = "xor"``. A launch passes the
kernel's byte count (:func:`dynamic_smem`; also printed above the kernel) as its dynamic
shared memory, and above 48 KB (:data:`SMEM_STATIC_LIMIT`) first raises the kernel's
``cudaFuncAttributeMaxDynamicSharedMemorySize`` (CuPy:
``RawKernel.max_dynamic_shared_size_bytes``); :func:`emit_cuda` refuses a kernel over its
architecture's limit (:data:`SMEM_LIMIT`). A view is a base pointer plus an element offset,
strides and a proven alignment (:meth:`_Emitter.divisor`); ``cp_async`` is an unrolled loop
of ``tsr_cp_async<bytes>`` pieces (its ``bytes``, or the widest of 16, 8, 4 the views prove
aligned; a plain per-thread copy when none fits), piece ``j`` by thread ``j mod lanes``;
``cp_async_commit`` / ``cp_async_wait`` / ``barrier`` are ``tsr_cp_async_commit()`` /
``tsr_cp_async_wait<N>()`` / ``__syncthreads()``; ``shfl_xor`` is ``tsr_shfl_xor(v, offset)``,
the device header's ``__shfl_xor_sync(0xffffffff, v, offset)``. A fragment is a register
array of the slots the thread owns (TILE-FRAG-1: its ``layout``, :mod:`.owned`, else the
elements ``j ≡ lane (mod lanes)``), indexed by constants in fully unrolled loops so it stays
in registers; ``mma`` updates each owned element with ``fmaf`` (``fma`` in f64) over k
ascending — the NUM-RED-1 order, so the compiled kernel computes the interpreter's bits —
and on a separable layout loads, per ``k``, the thread's rows of ``a`` and columns of ``b``
once into registers (``float4`` / ``float2`` vector loads where aligned, as are the
epilogue's stores), the register-blocked SGEMM. Fragment ``binary`` / ``unary`` act on the
owned elements; an operand
broadcast along an axis (``[Br, 1]`` against ``[Br, Dv]``) is not owned by the lane that
needs it, so it is read from the shared view it was ``frag_load``-ed from — which the
emitter allows only when nothing between the load and the use writes memory or waits.

Formats: f64 ``double``, f32 ``float``, f16 ``__half`` (cuda_fp16.h), bf16
``__nv_bfloat16`` (cuda_bf16.h), fp8_e4m3 / fp8_e5m2 ``__nv_fp8_e4m3`` / ``__nv_fp8_e5m2``
(cuda_fp8.h); any other format is a LoweringError. A conversion into f32 or f64 from a
narrower format is exact: a C cast where the value feeds arithmetic (mma operands), the
header's ``tsr_widen<T>(x)`` (NaN made the canonical quiet NaN of its sign) for a store or
a ``cast`` op with ``rne``/``native``; every other conversion calls the device header's
``tsr_cvt<T>(x)``, or ``tsr_cvt<T, R, O>(x)`` for a ``cast`` into a policy with another
rounding or overflow (CUDA-HDR-3: GRAPH-CAST-1's rule; see ``HEADER`` for how CUDA's own
conversions differ). A NaN that arithmetic produces has the hardware's bits; the values that
may hold one (:func:`_nan_classes`) go through ``tsr_canon`` where stored, cast or merged
with a loaded value (CUDA-RUN-3).
Tensor-core ``mma`` ops call the header's ``tsr_mma_m16n8k16_{bf16,f16}`` or
``tsr_mma_m16n8k32_{e4m3,e5m2}`` and the kernel is guarded to its model's architecture (CUDA-TC-1).
``exp`` / ``rsqrt`` call ``tsr_exp`` / ``tsr_rsqrt``, the NUM-MATH algorithms, and float
``max`` / ``min`` call ``tsr_max`` / ``tsr_min`` (IEEE 754-2019 maximum/minimum: NaN
propagates, which ``fmaxf`` does not), all from the device header the CUDA phase provides
(``tessera_device.cuh``; DESIGN §9). Index values are ``int`` when every buffer is static
with fewer than 2³¹ elements (and the launch has fewer than 2³¹ threads), else ``long``
(:func:`_index_type`); they are never negative in the lowered kernels, so C's ``/`` and
``%`` agree with Tile IR's ``floordiv`` and ``mod``.

The text is what :mod:`tessera_ref.backends.cuda.compile` compiles with NVRTC (the header
names the options; docs/spec/cuda.md).
"""
from __future__ import annotations

import math

from ...errors import LoweringError
from ...ir import Module
from ...ir import tile as T
from ...ir.builtin import RETURN
from ...ir.fragment import layout_of, mma_sync
from ...ir.types import IndexType, ScalarType, TensorType
from ...numerics.rng import RNGKey
from ...numerics.tc import PREFIX as TC_PREFIX
from .owned import Owned
from .report import ARCH_LIMITS

_REGISTER_FILE = min(lim.registers_per_sm for lim in ARCH_LIMITS.values())  # 32-bit registers per SM

__all__ = ["emit_cuda", "HEADER", "RULES", "NO_RULE", "SMEM_LIMIT", "SMEM_STATIC_LIMIT", "dynamic_smem", "tc_arch"]

HEADER = """\
// Tessera target text: CUDA C for sm_80 / sm_90 generated from Tile IR.
// Compiled by NVRTC (tessera_ref.backends.cuda.compile; docs/spec/cuda.md CUDA-COMPILE-1) with
// --fmad=false (no contraction of a*b+c), -std=c++17, -arch=sm_80|sm_90, -I<tessera_device.cuh's
// directory> -I<the pinned CUDA runtime headers>, --ptxas-options=-v.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include "tessera_device.cuh"  // tsr_cp_async*, tsr_exp, tsr_rsqrt, tsr_max/min, tsr_cvt, TSR_SWIZZLE
// tsr_cvt<T>(x) is NUM-CVT: round to nearest even, native overflow, a NaN stays a NaN of its sign
// (the format's canonical quiet NaN). CUDA's conversions (cuda_bf16.hpp, cuda_fp8.hpp of
// CUDA 12.2 and 13.0) agree except on NaN inputs: __float2bfloat16_rn rounds to nearest even
// (overflow to inf) but gives the NaN 0x7FFF; __nv_cvt_float_to_fp8(x, __NV_NOSAT, __NV_E4M3
// or __NV_E5M2) (via __nv_cvt_double_to_fp8) rounds to nearest even, maps |x| above the
// largest finite value plus half an ulp to 0x7F | sign for e4m3 (its NaN; e4m3 has no inf)
// and 0x7C | sign (inf) for e5m2, but first replaces a NaN input by +NaN, giving 0x7F in
// both, where NUM-CVT gives 0x7F / 0xFF and 0x7E / 0xFE. So tsr_cvt handles NaN inputs
// itself (tessera_device.cuh rounds every conversion with one integer encoder).
"""

_CTYPE = {"f64": "double", "f32": "float", "f16": "__half", "bf16": "__nv_bfloat16", "fp8_e4m3": "__nv_fp8_e4m3",
          "fp8_e5m2": "__nv_fp8_e5m2", "i1": "bool"}
#: the side-effecting ops after which a broadcast fragment cannot be re-read from its view
_WRITES = {f"{T.DIALECT}.{short}" for short in ("store", "frag_store", "cp_async", "cp_async_wait", "barrier",
                                                 "for", "if")}
#: vector types for one 8- or 16-byte access of consecutive elements
_VECTOR = {("float", 4): "float4", ("float", 2): "float2", ("double", 2): "double2"}
#: the mma.sync of a tensor-core mma by operand format: (shape, PTX type, instruction k)
_MMA_SHAPES = {"bf16": ("m16n8k16", "bf16", 16), "f16": ("m16n8k16", "f16", 16),
               "fp8_e4m3": ("m16n8k32", "e4m3", 32), "fp8_e5m2": ("m16n8k32", "e5m2", 32)}
#: the raw-bits type of one 4-, 8- or 16-byte access of narrow elements
_RAW = {4: "unsigned int", 8: "uint2", 16: "uint4"}
_BIN = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "/", "mod": "%", "lt": "<", "le": "<=",
        "gt": ">", "ge": ">=", "eq": "==", "ne": "!=", "and": "&&", "or": "||"}


def _format(t) -> str | None:
    """The format name of a scalar, buffer or fragment type (None for index and masks)."""
    if isinstance(t, IndexType) or isinstance(t, TensorType) and t.rank == 0:
        return None
    return t.format.name if isinstance(t, ScalarType) else t.policy.storage.name


def _c(fmt: str, what, location=None) -> str:
    """The C type of format ``fmt``; a LoweringError for a format the emitter has none for."""
    if fmt not in _CTYPE:
        raise LoweringError(f"the CUDA emitter has no C type for the format {fmt} (of {what})", location=location,
                            fix=f"use one of {', '.join(f for f in _CTYPE if f != 'i1')}")
    return _CTYPE[fmt]


def _ctype(t, location=None) -> str:
    if isinstance(t, IndexType):
        return "long"
    if isinstance(t, TensorType) and t.rank == 0:
        return "bool"
    return _c(_format(t), t, location)


#: the device header's names of the rounding and overflow modes of ``tsr_cvt<T, R, O>``
_ROUNDING = {"rne": "TSR_RNE", "rtz": "TSR_RTZ", "rup": "TSR_RUP", "rdown": "TSR_RDOWN"}
_OVERFLOW = {"native": "TSR_NATIVE", "saturate": "TSR_SATURATE"}


#: rounding to nearest even with the format's own overflow: tsr_cvt's defaults
_NEAREST = ("rne", "native")


def _convert(expr: str, src, dst, location=None, modes=None) -> str:
    """``expr`` (a value of format ``src``) as a value of format ``dst`` (see the module
    docstring: an exact widening into f32/f64 is a C cast, anything else ``tsr_cvt``).
    With ``modes`` (rounding, overflow: a ``cast`` op's target policy) the conversion is
    GRAPH-CAST-1's: an exact widening with ``rne``/``native`` is ``tsr_widen``
    (a NaN becomes the canonical quiet NaN of its sign), a conversion into the source's own
    format canonicalizes NaN too, and ``tsr_cvt`` takes other rounding and overflow modes
    (saturate maps ±inf to the largest finite value even when widening)."""
    if src is None or dst is None or src == dst and modes is None:
        return expr
    ctype = _c(dst, f"a conversion from {src}", location)
    widening = src != dst and (dst == "f64" or dst == "f32" and src != "f64")
    if widening and modes in (None, _NEAREST):
        return f"tsr_widen<{ctype}>({expr})" if modes else f"({ctype})({expr})"
    suffix = f", {_ROUNDING[modes[0]]}, {_OVERFLOW[modes[1]]}" if modes not in (None, _NEAREST) else ""
    return f"tsr_cvt<{ctype}{suffix}>({expr})"


def _stored(expr: str, src, dst, location=None) -> str:
    """``expr`` (format ``src``) stored into a buffer of format ``dst``: as it is into its own
    format, else converted with rounding to nearest even and the format's own overflow (TILE-NUM-2)."""
    return expr if src == dst else _convert(expr, src, dst, location, _NEAREST)


_CONSTANT, _BINARY = T._name("constant"), T._name("binary")


def tc_arch(model: str) -> str:
    """The architecture a tensor-core model describes: ``"tc:sm80"`` -> ``"sm_80"`` (CUDA-TC-1)."""
    return "sm_" + model[len(TC_PREFIX) + 2:]


#: Float ops whose NaN results carry the hardware's bits, not the canonical NaN (NUM-EW-1)
_RAW_FNS = {"add", "sub", "mul", "div", "floordiv", "mod", "sqrt", "neg", "abs"}
#: Ops whose NaN results are bits the kernel must keep: loads (any payload) and casts (a sign)
_KEPT_OPS = {T._name(short) for short in ("load", "frag_load", "cast")}
_SELECT, _SHFL, _MMA, _UNARY = T._name("select"), T._name("shfl_xor"), T._name("mma"), T._name("unary")


def _closure(pairs) -> set:
    """The least set holding every ``value`` of ``pairs`` ``(value, via)`` whose ``via`` is
    None or has a member in the set (a fixpoint: loops carry values around)."""
    out: set = set()
    changed = True
    while changed:
        changed = False
        for value, via in pairs:
            if value not in out and (via is None or any(v in out for v in via)):
                out.add(value)
                changed = True
    return out


def _nan_classes(func) -> tuple:
    """``(raw, kept)``: the float values of ``func`` that may hold a NaN whose sign or payload
    is the hardware's (x86 and GPUs differ) rather than the interpreter's canonical quiet NaN
    — the results of + - * / sqrt neg abs and mma, and what shfl_xor, select and for/if pass
    on from them — and those that may hold a NaN whose bits the interpreter keeps (loads,
    casts, scalar parameters, and what they pass on). The emitter canonicalizes a raw value
    where its bits are observed (stores, casts), and where it meets a kept one (a select's
    operand, a for/if's initial or yielded value): there the merged value is kept, not raw
    (CUDA-RUN-3). A loop that surely runs gives its last yielded values, and a carried value
    that only feeds arithmetic and mma (an accumulator) is never observed: neither makes
    its loop canonicalize."""
    def floating(v) -> bool:
        return _format(v.type) not in (None, "i1")

    seeds, merges, unseen = [], [], []  # (value, None); (value, the values it takes a NaN from)
    seeds += [(a, None) for a in func.regions[0].entry.args if not (isinstance(a.type, TensorType) and a.type.rank)]
    for op in func.walk():
        yields = [r.entry.last_op.operands for r in op.regions if r.entry.ops and r.entry.last_op.name == T.YIELD]
        if op.name == _SELECT:
            merges.append((op.results[0], op.operands[1:]))
        elif op.name == T.FOR:
            args, init = op.regions[0].entry.args[1:], op.operands[3:]
            for i, r in enumerate(op.results):
                merges.append((r, ([] if _runs(op) else [init[i]]) + [y[i] for y in yields]))
                (unseen if _unobserved(args[i]) else merges).append((args[i], [init[i]] + [y[i] for y in yields]))
        elif op.name == T.IF:
            merges += [(r, [y[i] for y in yields]) for i, r in enumerate(op.results)]
    kept_seeds = [(op.results[0], None) for op in func.walk() if op.name in _KEPT_OPS]
    shfl = [(op.results[0], op.operands[:1]) for op in func.walk() if op.name == _SHFL]
    kept = _closure([p for p in seeds + kept_seeds + shfl + merges if floating(p[0])])
    raw_seeds = [(op.results[0], None) for op in func.walk() if op.name == _MMA
                 or op.name in (_BINARY, _UNARY) and op.attributes["fn"] in _RAW_FNS]
    raw = _closure([p for p in raw_seeds + shfl + unseen + [m for m in merges if m[0] not in kept]
                    if floating(p[0])])
    return raw, kept


def _runs(loop) -> bool:
    """Whether ``loop`` (a for) has constant bounds and at least one iteration: its results
    are then its last yielded values, never its initial ones."""
    bounds = [v.defining_op for v in loop.operands[:3]]
    if any(b is None or b.name != _CONSTANT for b in bounds):
        return False
    return len(range(*(b.attributes["value"] for b in bounds))) > 0


def _unobserved(value) -> bool:
    """Whether no use of ``value`` shows a NaN's bits: it only feeds arithmetic, comparisons,
    max/min, math functions and mma, whose NaN results do not depend on an operand's NaN bits
    (a carried accumulator may then mix a loaded NaN and a raw one)."""
    return all(u.name in (_BINARY, _UNARY, _MMA) for u in value.users)


def _index_type(func) -> str:
    """``int`` when every index fits in 32 bits — every buffer static with fewer than 2³¹
    elements, and the launch (if known) under 2³¹ lanes — else ``long`` (LOWER-TARGET-1)."""
    limit = 2 ** 31
    for arg in func.regions[0].entry.args:
        t = arg.type
        if isinstance(t, TensorType) and t.rank and (not t.is_static or math.prod(t.shape) >= limit):
            return "long"
    grid = func.attributes.get("launch.grid")
    if grid is not None and math.prod(grid) * func.attributes.get("launch.lanes", 1) >= limit:
        return "long"
    return "int"


#: The most shared memory one block may use (hardware.md): 227 KB on sm_90, 163 KB on sm_80.
SMEM_LIMIT = {"sm_80": 163 * 1024, "sm_90": 227 * 1024}
#: Above this many bytes a launch must first raise the kernel's
#: ``cudaFuncAttributeMaxDynamicSharedMemorySize`` (CuPy: ``max_dynamic_shared_size_bytes``).
SMEM_STATIC_LIMIT = 48 * 1024


def dynamic_smem(module: Module) -> dict:
    """``{kernel name: bytes of dynamic shared memory}`` for every tile kernel of ``module``:
    what a launch passes (CuPy ``shared_mem=``), raising the kernel's maximum dynamic
    shared memory attribute first when it is above :data:`SMEM_STATIC_LIMIT`."""
    return {op.attributes["sym_name"]: T.shared_layout(op)[1] for op in module.body if T.is_kernel(op)}


class _View:
    """A buffer region: pointer name, element offset expression, shape, strides, swizzled?"""

    def __init__(self, ptr, offset, shape, strides, swizzle=False, itemsize=4, align=0):
        self.ptr, self.offset, self.shape, self.strides = ptr, offset, tuple(shape), tuple(strides)
        self.swizzle, self.itemsize = swizzle, itemsize
        self.align = align  # the offset is a multiple of it, in elements (0: the offset is 0)

    def vector(self, divisors, n: int) -> bool:
        """Whether ``n`` consecutive elements (along the last axis) at an index whose entries
        are multiples of ``divisors`` are one naturally aligned 8- or 16-byte access."""
        if n == 1:
            return True
        if self.swizzle or n * self.itemsize not in (4, 8, 16) or self.strides[-1] != "1" or \
                not all(s.isdigit() for s in self.strides):
            return False
        terms = [d * int(st) for d, st in zip(divisors[:-1], self.strides[:-1])]
        return math.gcd(self.align, divisors[-1], *terms) % n == 0

    def at(self, index) -> str:
        terms = [self.offset] + [f"({i}) * {s}" if s != 1 else f"({i})" for i, s in zip(index, self.strides)]
        flat = " + ".join(t for t in terms if t != "0")
        flat = flat or "0"
        if self.swizzle:
            flat = f"TSR_SWIZZLE({flat}, {self.itemsize})"
        return f"{self.ptr}[{flat}]"


def _unflatten(flat: str, shape) -> list:
    """The index expressions of the row-major element ``flat`` of a box of ``shape``: once
    the extents after an axis multiply to 1, that axis takes all of ``flat`` and every later
    one is 0 (a box ``[3, 1]`` is element ``j`` at ``[j, 0]``, not ``[j, j]``)."""
    idx, rest = [], flat
    for i in range(len(shape)):
        inner = math.prod(shape[i + 1:])
        idx.append(f"({rest}) / {inner}" if inner > 1 else rest)
        rest = f"({rest}) % {inner}" if inner > 1 else "0"
    return idx


def _plus(origin: str, offset: int) -> str:
    return str(offset) if origin == "0" else f"{origin} + {offset}"


class _Emitter:
    def __init__(self, func):
        self.func, self.lines, self.names, self.count = func, [], {}, 0
        self.location = func.location  # of the op being emitted, for errors
        self.loaded = {}  # fragment value -> (its frag_load op, the view it was loaded from)
        self.indent = 1
        self.lanes = func.attributes.get("launch.lanes")
        self.sizes = dict(func.attributes.get("tile.sizes", {}))
        self.layouts = {}  # fragment value -> its Owned (absent: cyclic)
        self.idx = _index_type(func)
        self.tc_models = {}  # tensor-core model (accum "tc:…") of the kernel's mma ops -> the first one's location
        self.smem_offsets, self.smem_bytes = T.shared_layout(func)
        self.raw, self.kept = _nan_classes(func)  # raw NaNs are made canonical where observed

    def name(self, value) -> str:
        if value not in self.names:
            self.names[value] = f"v{self.count}"
            self.count += 1
        return self.names[value]

    def ctype(self, t) -> str:
        return self.idx if isinstance(t, IndexType) else _ctype(t, self.location)

    def divisor(self, v) -> int:
        """A number the index value ``v`` is always a multiple of (0: it is 0)."""
        op = v.defining_op
        loop = v.block.parent_op if op is None else None
        if loop is not None and loop.name == T.FOR and v.index == 0:  # an induction variable
            return math.gcd(self.divisor(loop.operands[0]), self.divisor(loop.operands[2]))
        if op is None or op.name not in (_CONSTANT, _BINARY):
            return 1
        if op.name == _CONSTANT:
            value = op.attributes["value"]
            return abs(value) if isinstance(value, int) else 1
        a, b = (self.divisor(x) for x in op.operands)
        fn = op.attributes["fn"]
        return a * b if fn == "mul" else math.gcd(a, b) if fn in ("add", "sub") else 1

    def emit(self, text: str) -> None:
        self.lines.append("  " * self.indent + text)

    def dim(self, d) -> str:
        return str(d)

    def strides(self, shape, pad=0):
        out, running = [], None
        for i in range(len(shape) - 1, -1, -1):
            if running is None:
                out.append("1")
                running = f"{shape[-1] + pad}" if isinstance(shape[-1], int) else f"{shape[-1]}"
            else:
                out.append(running)
                running = str(eval(f"{running} * {shape[i]}")) if isinstance(shape[i], int) and running.isdigit() \
                    else f"{running} * {shape[i]}"
        return list(reversed(out))

    # -- the kernel ---------------------------------------------------------------------
    def kernel(self) -> str:
        attrs = self.func.attributes
        mut = set(attrs.get("tile.mut", []))
        params = []
        for arg, pname in zip(self.func.regions[0].entry.args, attrs["tile.params"]):
            t = arg.type
            if isinstance(t, TensorType) and t.rank > 0:
                const = "" if pname in mut else "const "
                params.append(f"{const}{self.ctype(t)}* __restrict__ {pname}")
                self.names[arg] = _View(pname, "0", t.shape, self.strides(t.shape), itemsize=t.dtype.itemsize)
            else:
                params.append(f"{self.ctype(t)} {pname}")
                self.names[arg] = pname
        params += [f"long {s}" for s in self.sizes]  # symbolic sizes make every index a long
        launch = ""
        if "launch.grid" in attrs:
            launch = f"// launch: grid {tuple(attrs['launch.grid'])}, {attrs['launch.lanes']} threads per block\n"
        if self.smem_bytes:
            raise_limit = (f"; over {SMEM_STATIC_LIMIT:,} B: raise cudaFuncAttributeMaxDynamicSharedMemorySize first"
                           if self.smem_bytes > SMEM_STATIC_LIMIT else "")
            launch += f"// dynamic shared memory: {self.smem_bytes} B{raise_limit}\n"
            self.emit("extern __shared__ __align__(16) unsigned char tsr_smem[];  // every alloc is carved out of it")
        head = f'extern "C" __global__ void {self.launch_bounds()}{attrs["sym_name"]}({", ".join(params)}) {{'
        self.block(self.func.regions[0].entry)
        return "\n".join([launch + self.arch_guard() + head] + self.lines + ["}"])

    def arch_guard(self) -> str:
        """For a kernel with tensor-core mma ops, a preprocessor check that it is compiled for
        the architecture its model describes (CUDA-TC-1); ``build`` refuses the mismatch first."""
        out = ""
        for model in sorted(self.tc_models):
            arch = tc_arch(model)
            out += (f"#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ != {arch[3:]}0\n#error \"accum='{model}' is "
                    f"{arch}'s tensor-core model: compile this kernel for {arch} (CUDA-TC-1)\"\n#endif\n")
        return out

    def launch_bounds(self) -> str:
        """``__launch_bounds__(lanes, blocks)`` for a kernel whose lowering sized its tile for a
        register budget (``launch.registers``, with known lanes): ``blocks`` per SM leave each
        thread at most that many registers. Nothing otherwise: ptxas then may use up to 255
        (with ``lanes`` alone it caps a 128-lane kernel at 128 and spills the attention kernel)."""
        regs = self.func.attributes.get("launch.registers")
        if not (self.lanes and regs):
            return ""
        return f"__launch_bounds__({self.lanes}, {max(1, _REGISTER_FILE // (self.lanes * regs))}) "

    def block(self, block) -> None:
        for op in block:
            if op.name in (RETURN, T.YIELD):
                continue  # the kernel's end; a region's yield is assigned by its for/if rule
            self.location = op.location
            rule = RULES.get(op.name)
            if rule is None:
                why = f": {NO_RULE[op.name]}" if op.name in NO_RULE else ""
                raise LoweringError(f"the CUDA emitter has no rule for '{op.name}'{why}", location=op.location,
                                    fix="extend RULES in tessera_ref/backends/cuda/render.py")
            rule(self, op)

    def value(self, op, expr: str) -> None:
        r = op.results[0]
        self.emit(f"{self.ctype(r.type)} {self.name(r)} = {expr};")

    def arg(self, v) -> str:
        n = self.names.get(v)
        return n if isinstance(n, str) else self.name(v)

    def canon(self, v, expr: str, into=None) -> str:
        """``expr`` (value ``v``, or an element of fragment ``v``) with a NaN made the canonical
        quiet NaN where ``v`` may hold the hardware's (:func:`_nan_classes`) — given ``into``
        (the values of a select, for or if that ``v`` flows into), only where one is kept."""
        merged = into is None or any(i in self.kept for i in into)
        return f"tsr_canon({expr})" if v in self.raw and merged else expr

    # -- scalar ops -----------------------------------------------------------------------
    def op_lane_id(self, op):
        self.value(op, "threadIdx.x")

    def op_linear_id(self, op):
        """TILE-MODEL-1: tiles row-major over the grid (the last axis fastest), then lanes; a
        kernel whose grid is known to be one-dimensional needs only blockIdx.x."""
        grid = self.func.attributes.get("launch.grid")
        tile = f"({self.idx})blockIdx.x"
        if grid is None or len(grid) > 1:
            tile = f"(({tile} * gridDim.y + blockIdx.y) * gridDim.z + blockIdx.z)"
        self.value(op, f"{tile} * blockDim.x + threadIdx.x")

    def op_tile_id(self, op):
        self.value(op, f"blockIdx.{'xyz'[op.attributes['axis']]}")

    def op_num_tiles(self, op):
        self.value(op, f"gridDim.{'xyz'[op.attributes['axis']]}")

    def op_num_lanes(self, op):
        self.value(op, "blockDim.x")

    def op_dim(self, op):
        view = self.names[op.operands[0]]
        self.value(op, str(view.shape[op.attributes["axis"]]))

    def op_constant(self, op):
        v = op.attributes["value"]
        if isinstance(v, float):
            fmt = _format(op.results[0].type)
            if math.isinf(v):  # bit patterns: NVRTC has no math.h
                text = ("-" if v < 0 else "") + ("TSR_INFF" if fmt == "f32" else "TSR_INF")
            else:
                text = f"{v!r}" + ("f" if fmt == "f32" else "")
            if fmt not in ("f32", "f64"):  # a narrow constant: the double rounded once (TILE-NUM-2)
                text = _convert(text, "f64", fmt, op.location)
        else:
            text = str(v)
        self.value(op, text)

    @staticmethod
    def _binary_expr(fn: str, a: str, b: str, floating: bool) -> str:
        if fn in ("min", "max"):
            return f"{'tsr_' if floating else ''}{fn}({a}, {b})"
        return f"{a} {_BIN[fn]} {b}"

    @staticmethod
    def _unary_expr(fn: str, x: str, fmt) -> str:
        absolute = f"__habs({x})" if fmt in ("f16", "bf16") else f"fabs({x})"  # cuda_fp16.h / cuda_bf16.h
        return {"neg": f"-{x}", "not": f"!{x}", "sqrt": f"sqrt({x})", "abs": absolute}.get(fn, f"tsr_{fn}({x})")

    def op_binary(self, op):
        fn = op.attributes["fn"]
        floating = not isinstance(op.results[0].type, IndexType)
        if self._is_frag(op.results[0].type):
            self._frag_map(op, lambda a, b: self._binary_expr(fn, a, b, floating))
            return
        a, b = (self.arg(v) for v in op.operands)
        self.value(op, self._binary_expr(fn, a, b, floating))

    def op_unary(self, op):
        fn, fmt = op.attributes["fn"], _format(op.results[0].type)
        if self._is_frag(op.results[0].type):
            self._frag_map(op, lambda x: self._unary_expr(fn, x, fmt))
            return
        self.value(op, self._unary_expr(fn, self.arg(op.operands[0]), fmt))

    def op_cast(self, op):
        src, dst = _format(op.operands[0].type), _format(op.results[0].type)
        x, t = self.arg(op.operands[0]), op.results[0].type
        if not (src and dst):
            self.value(op, f"({self.ctype(t)})({x})")
            return
        x = self.canon(op.operands[0], x)
        if t.policy.rounding == "stochastic":  # NUM-CVT-5 with NUM-RNG-4's bits of RNGKey(seed) at the index
            k0, k1 = (int(w) for w in RNGKey(op.attributes["seed"]).words)
            bits = f"tsr_random_bits((tsr_u64)({self.arg(op.operands[1])}), {k0:#010x}u, {k1:#010x}u)"
            self.value(op, f"tsr_cvt_sr<{self.ctype(t)}, {_OVERFLOW[t.policy.overflow]}>({x}, {bits})")
            return
        self.value(op, _convert(x, src, dst, op.location, (t.policy.rounding, t.policy.overflow)))

    def op_shfl_xor(self, op):
        self.value(op, f"tsr_shfl_xor({self.arg(op.operands[0])}, {op.attributes['offset']})")

    def op_uniform(self, op):
        """TILE-RNG-1: the device header's NUM-RNG-5 draw under the key words of
        ``RNGKey(seed, stream)`` (computed here, once)."""
        k0, k1 = (int(w) for w in RNGKey(op.attributes["seed"], op.attributes["stream"]).words)
        fmt = _format(op.results[0].type)
        self.value(op, f"tsr_uniform_{fmt}((tsr_u64)({self.arg(op.operands[0])}), {k0:#010x}u, {k1:#010x}u)")

    def op_select(self, op):
        m = self.arg(op.operands[0])
        a, b = (self.canon(v, self.arg(v), op.results) for v in op.operands[1:])
        self.value(op, f"{m} ? {a} : {b}")

    # -- memory -----------------------------------------------------------------------------
    def op_load(self, op):
        view = self.names[op.operands[0]]
        self.value(op, view.at([self.arg(v) for v in op.operands[1:]]))

    def op_store(self, op):
        view = self.names[op.operands[0]]
        index, value = op.operands[1:-1], op.operands[-1]
        src, dst = _format(value.type), _format(op.operands[0].type)
        stored = _stored(self.canon(value, self.arg(value)), src, dst, op.location)
        self.emit(f"{view.at([self.arg(v) for v in index])} = {stored};")

    def op_alloc(self, op):
        t, pad = op.results[0].type, op.attributes["pad"]
        name = self.name(op.results[0])
        ctype = self.ctype(t)
        self.emit(f"{ctype}* {name} = reinterpret_cast<{ctype}*>(tsr_smem + {self.smem_offsets[op]});"
                  f"  // {list(t.shape)}, rows padded by {pad}, swizzle {op.attributes['swizzle']}")
        self.names[op.results[0]] = _View(name, "0", t.shape, self.strides(t.shape, pad),
                                          op.attributes["swizzle"] == "xor", t.dtype.itemsize)

    def op_subview(self, op):
        base = self.names[op.operands[0]]
        offs = [self.arg(v) for v in op.operands[1:]]
        extra = " + ".join(f"({o}) * {s}" for o, s in zip(offs, base.strides) if o != "0")
        offset = base.offset if not extra else (extra if base.offset == "0" else f"{base.offset} + {extra}")
        shape = op.results[0].type.shape
        name = self.name(op.results[0])
        self.emit(f"const {self.idx} {name}_off = {offset};  // view {list(shape)} of {base.ptr}")
        terms = [self.divisor(v) * (int(st) if st.isdigit() else 1) for v, st in zip(op.operands[1:], base.strides)]
        self.names[op.results[0]] = _View(base.ptr, f"{name}_off", shape, base.strides[len(base.strides) - len(shape):],
                                          base.swizzle, base.itemsize, math.gcd(base.align, *terms))

    def _box_loop(self, view, body, lanes_expr="blockDim.x") -> None:
        """``body(index exprs)`` for every element of ``view``'s box, block-strided."""
        n = math.prod(view.shape)
        self.emit(f"for ({self.idx} j = threadIdx.x; j < {n}; j += {lanes_expr}) {{")
        self.indent += 1
        body(_unflatten("j", view.shape))
        self.indent -= 1
        self.emit("}")

    def _piece_bytes(self, op, dst, src) -> int | None:
        """The cp.async piece size: the op's ``bytes``, or the widest of 16, 8, 4 bytes that the
        views' strides and offsets make contiguous and aligned; None when even 4 does not fit
        (cp.async copies 4, 8 or 16 bytes)."""
        given = op.attributes.get("bytes")
        if given is not None:
            return given
        row = src.shape[-1]
        for nbytes in (16, 8, 4):
            n = nbytes // dst.itemsize
            if n >= 1 and nbytes % dst.itemsize == 0 and row % n == 0 and \
                    all(v.vector([1] * (len(v.shape) - 1) + [n], n) for v in (dst, src)):
                return nbytes
        return None

    def op_cp_async(self, op):
        dst, src = self.names[op.operands[0]], self.names[op.operands[1]]
        nbytes = self._piece_bytes(op, dst, src)
        flip = op.attributes.get("transpose", False)
        if nbytes is None:  # the wait and barrier that must follow make a plain copy visible as well
            self.emit("// a copy cp.async cannot make (pieces under 4 bytes): each lane copies its elements")
            self._box_loop(src, lambda idx: self.emit(f"{dst.at(idx[::-1] if flip else idx)} = {src.at(idx)};"))
            return
        per, n = max(1, nbytes // dst.itemsize), math.prod(src.shape)
        self.emit(f"// cp.async in {nbytes}-byte pieces{', transposing' if flip else ''}: piece j by lane j mod lanes")
        pieces = n // per
        if self.lanes:  # a constant trip count: the loop unrolls
            self.emit("#pragma unroll")
            self.emit(f"for (int i = 0; i < {-(-pieces // self.lanes)}; ++i) {{")
            self.emit(f"  const {self.idx} j = threadIdx.x + i * {self.lanes};")
            if pieces % self.lanes:
                self.emit(f"  if (j >= {pieces}) break;")
        else:
            self.emit(f"for ({self.idx} j = threadIdx.x; j < {pieces}; j += blockDim.x) {{")
        idx = _unflatten(f"j * {per}" if per > 1 else "j", src.shape)
        self.indent += 1
        self.emit(f"tsr_cp_async<{nbytes}>(&{dst.at(idx[::-1] if flip else idx)}, &{src.at(idx)});")
        self.indent -= 1
        self.emit("}")

    def op_cp_async_commit(self, op):
        self.emit("tsr_cp_async_commit();")

    def op_cp_async_wait(self, op):
        self.emit(f"tsr_cp_async_wait<{op.attributes['pending']}>();")

    def op_barrier(self, op):
        self.emit("__syncthreads();")

    # -- fragments -----------------------------------------------------------------------
    def _own(self, value):
        """The :class:`Owned` of fragment ``value`` (None: cyclic ownership)."""
        return self.layouts.get(value)

    def _set_layout(self, value, op) -> None:
        layout = layout_of(op.attributes)
        if layout is not None:
            self.layouts[value] = Owned(layout, value.type.shape)

    def _frag_len(self, t, value=None) -> str:
        own = self._own(value) if value is not None else None
        if own is not None:
            return str(own.values)
        lanes = self.lanes or 32
        return str(-(-math.prod(t.shape) // lanes))

    def _owned(self, t, body, own=None) -> None:
        """``body(slot, m, n)`` for every fragment element this lane owns: cyclically, or by
        ``own``'s layout in a fully unrolled slot loop (constant register indices)."""
        if len(t.shape) != 2:
            raise LoweringError(f"the CUDA emitter handles fragments of rank 2 (rows x columns), got {t}",
                                location=self.location, fix="use [rows, columns] fragments (a row vector is [1, n])")
        if own is not None:
            self.emit("#pragma unroll")
            self.emit(f"for (int s = 0; s < {own.values}; ++s) {{")
            self.indent += 1
            self.emit(f"const {self.idx} e = {own.lane_offset} + {own.value_offset('s')};")
            body("s", f"e / {t.shape[1]}", f"e % {t.shape[1]}")
            self.indent -= 1
            self.emit("}")
            return
        lanes = self.lanes or "blockDim.x"
        n = math.prod(t.shape)
        self.emit(f"for (int s = 0; s < {self._frag_len(t)}; ++s) {{")
        self.indent += 1
        self.emit(f"const {self.idx} e = threadIdx.x + ({self.idx})s * {lanes};")
        self.emit(f"if (e < {n}) {{")
        self.indent += 1
        body("s", f"e / {t.shape[1]}", f"e % {t.shape[1]}")
        self.indent -= 1
        self.emit("}")
        self.indent -= 1
        self.emit("}")

    def _new_frag(self, value) -> str:
        name = self.name(value)
        self.emit(f"{self.ctype(value.type)} {name}[{self._frag_len(value.type, value)}];")
        return name

    def op_fill(self, op):
        self._set_layout(op.results[0], op)
        name = self._new_frag(op.results[0])
        v = op.attributes["value"]
        value = _convert(f"{v!r}f", "f32", _format(op.results[0].type), op.location)
        self.emit("#pragma unroll")
        self.emit(f"for (int s = 0; s < {self._frag_len(op.results[0].type, op.results[0])}; ++s) {name}[s] = {value};")

    def _lane_origin(self, own) -> tuple:
        """Declare this lane's row and column origin in a separable micro-tile layout."""
        self.count += 1
        row, col = f"mr{self.count}", f"nc{self.count}"
        self.emit(f"const {self.idx} {row} = {own.lane_row}, {col} = {own.lane_col};  // this lane's micro-tile origin")
        return row, col

    def _move_blocked(self, view, frag, own, src_fmt, dst_fmt, store: bool) -> None:
        """Load (``store`` False) or store a separable micro-tile fragment element by element
        in straight-line code, consecutive columns of one row as one vector access where the
        format is unchanged and the view makes it aligned; ``frag(s)`` is the C text of slot
        ``s``."""
        row, col = self._lane_origin(own)
        ctype = _CTYPE.get(dst_fmt if store else src_fmt)
        s = 0
        while s < own.values:
            r, c = own.value_rows[s], own.value_cols[s]
            n = next((n for n in (4, 2) if src_fmt == dst_fmt and (ctype, n) in _VECTOR and s + n <= own.values
                      and all(own.value_rows[s + i] == r and own.value_cols[s + i] == c + i for i in range(n))
                      and view.vector([1, math.gcd(own.col_align, c)], n)), 1)
            at = view.at([f"{row} + {r}", f"{col} + {c}"])
            if n > 1:
                vec = _VECTOR[(ctype, n)]
                if store:
                    parts = ", ".join(frag(s + i) for i in range(n))
                    self.emit(f"*reinterpret_cast<{vec}*>(&{at}) = make_{vec}({parts});")
                else:
                    self.emit(f"{{ const {vec} t = *reinterpret_cast<const {vec}*>(&{at}); "
                              + " ".join(f"{frag(s + i)} = t.{'xyzw'[i]};" for i in range(n)) + " }")
            elif store:
                self.emit(f"{at} = {_stored(frag(s), src_fmt, dst_fmt, self.location)};")
            else:
                self.emit(f"{frag(s)} = {_convert(at, src_fmt, dst_fmt, self.location)};")
            s += n

    def op_frag_load(self, op):
        frag, src = op.results[0], self.names[op.operands[0]]
        self._set_layout(frag, op)
        self.loaded[frag] = (op, src)
        users = frag.users
        if users and all(u.results and self._is_frag(u.results[0].type) and u.results[0].type.shape != frag.type.shape
                         for u in users):
            self.emit(f"// {list(frag.type.shape)} fragment used broadcast only: read from its view where used")
            return
        name = self._new_frag(frag)
        own = self._own(frag)
        if own is not None and own.separable:
            fmt = _format(frag.type)
            self._move_blocked(src, lambda s: f"{name}[{s}]", own, fmt, fmt, store=False)
            return
        self._owned(frag.type, lambda s, m, n: self.emit(f"{name}[{s}] = {src.at([m, n])};"), own)

    def op_frag_store(self, op):
        value = op.operands[1]
        dst, frag = self.names[op.operands[0]], self.arg(value)
        src_fmt, dst_fmt = _format(value.type), _format(op.operands[0].type)
        own = self._own(value)
        element = lambda s: self.canon(value, f"{frag}[{s}]")  # noqa: E731
        if own is not None and own.separable:
            self._move_blocked(dst, element, own, src_fmt, dst_fmt, store=True)
            return
        self._owned(value.type, lambda s, m, n: self.emit(
            f"{dst.at([m, n])} = {_stored(element(s), src_fmt, dst_fmt, op.location)};"), own)

    @staticmethod
    def _is_frag(t) -> bool:
        return isinstance(t, TensorType) and t.rank > 0

    def _element(self, op, v, shape, s: str, m: str, n: str) -> str:
        """Operand ``v`` of fragment op ``op`` at the element (``m``, ``n``) of the result
        ``shape`` owned in slot ``s``: a lane value as it is, a same-shape fragment's slot, or
        a broadcast fragment re-read from the view it was loaded from."""
        if not self._is_frag(v.type):
            return self.arg(v)
        if tuple(v.type.shape) == tuple(shape):
            return f"{self.arg(v)}[{s}]"
        load, view = self.loaded.get(v, (None, None))
        between, at = set(), None
        if load is not None and load.parent is op.parent:
            at = load._next
            while at is not None and at is not op:
                between.add(at.name)
                at = at._next
        if at is None or between & _WRITES:
            raise LoweringError(f"the CUDA emitter broadcasts the fragment {v.type} to {list(shape)} by re-reading "
                                f"the view it was loaded from, so it must be frag_load-ed in the same block with "
                                f"no store, copy, wait, barrier or loop before this use", location=op.location,
                                fix="frag_load the broadcast operand right before the fragment operation")
        return view.at([i if d != 1 else "0" for i, d in zip((m, n), v.type.shape)])

    def _frag_map(self, op, expr) -> None:
        """A fragment ``binary``/``unary``: ``expr`` of the operands on every owned element."""
        t = op.results[0].type
        if t.rank != 2:
            raise LoweringError(f"the CUDA emitter handles fragment arithmetic on 2-D fragments, got {t}",
                                location=op.location, fix="reshape the fragments to 2-D")
        own = next((self._own(v) for v in op.operands if self._own(v) is not None
                    and tuple(v.type.shape) == tuple(t.shape)), None)
        if own is not None:
            self.layouts[op.results[0]] = own
        name = self._new_frag(op.results[0])
        self._owned(t, lambda s, m, n: self.emit(
            f"{name}[{s}] = {expr(*(self._element(op, v, t.shape, s, m, n) for v in op.operands))};"), own)

    def op_mma(self, op):
        a, b, acc = op.operands
        A, B, C = self.names.get(a), self.names.get(b), self.arg(acc)
        if not isinstance(A, _View) or not isinstance(B, _View):
            raise LoweringError("the CUDA emitter handles mma of buffer views", location=op.location)
        self._set_layout(op.results[0], op)
        own = self._own(op.results[0])
        k_major = op.attributes.get("transpose_a", False)
        name = self._new_frag(op.results[0])
        K = a.type.shape[0] if k_major else a.type.shape[1]
        accum = op.attributes["accum"]
        if accum.startswith(TC_PREFIX):
            self._mma_sync(op, own, A, B, C, name, K, k_major)
            return
        fma = "fma" if accum == "f64" else "fmaf"
        ctype = _c(accum, "the mma accumulator", op.location)
        if own is not None and own.row_major_slots():
            self._mma_blocked(op, own, A, B, C, name, K, k_major, ctype, fma)
            return

        def body(s, m, n):
            ea = _convert(A.at(["k", m] if k_major else [m, "k"]), _format(a.type), accum, op.location)
            eb = _convert(B.at(["k", n]), _format(b.type), accum, op.location)
            self.emit(f"{ctype} acc = {C}[{s}];")
            self.emit(f"for (int k = 0; k < {K}; ++k) acc = {fma}({ea}, {eb}, acc);  // NUM-RED-1: k ascending")
            self.emit(f"{name}[{s}] = acc;")
        self._owned(op.results[0].type, body, own)

    def _mma_blocked(self, op, own, A, B, C, name, K, k_major, ctype, fma) -> None:
        """``mma`` on a register micro-tile: per ``k`` (ascending, unrolled), the lane loads
        its rows of ``a`` and columns of ``b`` once into registers (vector loads where
        contiguous and aligned) and updates every owned element with one fma."""
        a, b = op.operands[:2]
        accum = op.attributes["accum"]
        TM, TN = len(own.rows), len(own.cols)
        self.emit("#pragma unroll")
        self.emit(f"for (int s = 0; s < {own.values}; ++s) {name}[s] = {C}[s];")
        row, col = self._lane_origin(own)
        A, a_at = self._based(A, [0, row] if k_major else [row, 0], [0, own.row_align] if k_major else
                              [own.row_align, 0], _format(a.type))
        B, b_at = self._based(B, [0, col], [0, own.col_align], _format(b.type))
        self.emit("#pragma unroll")
        self.emit(f"for (int k = 0; k < {K}; ++k) {{  // NUM-RED-1: k ascending, one fma per element and k")
        self.indent += 1
        self.emit(f"{ctype} ra[{TM}], rb[{TN}];")
        a_index = (lambda r: ["k", _plus(a_at[1], r)]) if k_major else (lambda r: [_plus(a_at[0], r), "k"])
        self._load_lines(A, _format(a.type), accum, "ra", own.rows, a_index, k_major, 0 if a_at[1] == "0" else
                         own.row_align)
        self._load_lines(B, _format(b.type), accum, "rb", own.cols, lambda c: ["k", _plus(b_at[1], c)], True,
                         0 if b_at[1] == "0" else own.col_align)
        self.emit("#pragma unroll")
        self.emit(f"for (int i = 0; i < {TM}; ++i) {{")
        self.emit("#pragma unroll")
        self.emit(f"  for (int j = 0; j < {TN}; ++j) {name}[i * {TN} + j] = {fma}(ra[i], rb[j], {name}[i * {TN} + j]);")
        self.emit("}")
        self.indent -= 1
        self.emit("}")

    def _mma_sync(self, op, own, A, B, C, name, K, k_major) -> None:
        """A tensor-core ``mma`` (``accum = "tc:…"``, NUM-TC-5) as ``mma.sync`` with f32
        accumulation — ``m16n8k16`` for bf16/f16, ``m16n8k32`` for fp8 (:data:`_MMA_SHAPES`):
        the fragment must have :func:`~tessera_ref.ir.fragment.mma_sync`'s layout; per
        instruction K (k ascending), each warp loads its A registers (32-bit loads of ``per``
        consecutive k) and B registers (``per`` 16- or 8-bit loads packed, the lowest k in the
        lowest bits) in the PTX fragment layouts (hardware.md; the PTX ISA's m16n8k32 figures
        for 8-bit types) and issues one instruction per
        16 × 8 tile, the accumulator carried from one instruction to the next — the model's
        blocks, k ascending."""
        a, b = op.operands[:2]
        fmt = _format(a.type)
        M, N = op.results[0].type.shape
        lanes = own.layout.lanes if own is not None else None
        shape, ab, kstep = _MMA_SHAPES.get(fmt, ("m16n8k16", None, 16))
        per = 4 // a.type.dtype.itemsize  # elements per 32-bit register
        if own is None or own.layout != mma_sync(M, N, lanes) or k_major or ab is None \
                or _format(b.type) != fmt or K % kstep or not A.vector([1, per], per):
            raise LoweringError(f"the CUDA emitter renders a tensor-core mma ({op.attributes['accum']}) as "
                                f"mma.sync.m16n8k16 (bf16, f16) or m16n8k32 (fp8_e4m3, fp8_e5m2): it needs two "
                                f"operands of one of these formats, a [M, K] a with K a multiple of the "
                                f"instruction's k (16, fp8: 32), unswizzled shared rows of a whole number of 4-byte "
                                f"words, and the fragment layout of ir.fragment.mma_sync({M}, {N}, lanes); got "
                                f"{a.type}, {b.type}", location=op.location,
                                fix="lower the matmul with a tensor-core policy, a tile of whole 16 x 8 tiles for "
                                    "its warps (e.g. tile (128, 128, 32), 256 lanes), no swizzle and a padding of "
                                    "whole 4-byte words")
        _, _, WN, _ = own.layout.lane_shape
        RN, RM = own.layout.value_shape[2], own.layout.value_shape[3]
        self.emit("#pragma unroll")
        self.emit(f"for (int s = 0; s < {own.values}; ++s) {name}[s] = {C}[s];")
        self.count += 1
        g, t, r0, c0 = (f"{x}{self.count}" for x in ("g", "t", "mr", "nc"))
        self.emit(f"const int {g} = (threadIdx.x / 4) % 8, {t} = threadIdx.x % 4;  // mma.sync: g = lane >> 2, t = lane & 3")
        self.emit(f"const int {r0} = (threadIdx.x / {32 * WN}) * {16 * RM} + {g}, "
                  f"{c0} = ((threadIdx.x / 32) % {WN}) * {8 * RN} + {g};  // this warp's A row and B column")
        ptx = f"mma.sync.aligned.{shape}.row.col.f32.{ab}.{ab}.f32"
        self.tc_models.setdefault(op.attributes["accum"], op.location)
        raw, bits, half = "unsigned short" if per == 2 else "unsigned char", 32 // per, kstep // 2
        self.emit("#pragma unroll")
        self.emit(f"for (int kk = 0; kk < {K}; kk += {kstep}) {{  // NUM-TC-5: instructions over k ascending")
        self.indent += 1
        self.emit(f"unsigned fa[{RM}][4], fb[{RN}][2];")
        for rm in range(RM):  # a_i: row g (+8 for odd i), k = per·t (+ half for i ≥ 2)
            for i, (dr, dk) in enumerate(((0, 0), (8, 0), (0, half), (8, half))):
                at = A.at([f"{r0} + {16 * rm + dr}", f"kk + {per} * {t} + {dk}"])
                self.emit(f"fa[{rm}][{i}] = *reinterpret_cast<const unsigned*>(&{at});")
        for rn in range(RN):  # b_i: column g, k = per·t + j (+ half for i = 1)
            col = f"{c0} + {8 * rn}"
            for i, dk in enumerate((0, half)):
                loads = [f"(unsigned)*reinterpret_cast<const {raw}*>(&{B.at([f'kk + {per} * {t} + {dk + j}', col])})"
                         for j in range(per)]
                packed = [loads[0]] + [f"({x} << {bits * j})" for j, x in enumerate(loads) if j]
                self.emit(f"fb[{rn}][{i}] = " + " | ".join(packed) + ";")
        for rm in range(RM):
            for rn in range(RN):
                v = 4 * (rn + RN * rm)
                self.emit(f"tsr_mma_{shape}_{ab}(&{name}[{v}], fa[{rm}], fb[{rn}], &{name}[{v}]);  // {ptx}")
        self.indent -= 1
        self.emit("}")

    def _based(self, view, origin, divisors, fmt) -> tuple:
        """``(view, origin)`` rebased: a pointer to ``view``'s element ``origin`` (this
        lane's origin, declared once), so the unrolled loads index it with constants — or,
        for a swizzled view, ``view`` and ``origin`` unchanged. ``divisors``: what the
        origin's entries are multiples of."""
        if view.swizzle or not all(st.isdigit() for st in view.strides):
            return view, origin
        self.count += 1
        name = f"p{self.count}"
        self.emit(f"const {_c(fmt, 'an mma operand', self.location)}* {name} = &{view.at(origin)};")
        align = math.gcd(view.align, *(d * int(st) for d, st in zip(divisors, view.strides)))
        return _View(name, "0", view.shape, view.strides, False, view.itemsize, align), ["0"] * len(origin)

    def _load_lines(self, view, src_fmt, dst_fmt, reg, lines, index, contiguous: bool, align: int) -> None:
        """``reg[i] = view[index(lines[i])]`` converted to ``dst_fmt``; runs of consecutive
        lines along the view's last axis as one vector load where ``contiguous`` and aligned
        (``align``: the lane part of the index is a multiple of it): ``float4``/``float2``/
        ``double2`` for f32/f64, the raw bits (``uint4``/``uint2``/``unsigned``) of 2- and
        1-byte elements, each then widened exactly."""
        ctype = _CTYPE.get(src_fmt)
        size = view.itemsize
        i = 0
        while i < len(lines):
            n = next((n for n in (16 // size, 8 // size, 4 // size) if n > 1 and contiguous and i + n <= len(lines)
                      and ((ctype, n) in _VECTOR and src_fmt == dst_fmt or size < 4 and n * size in _RAW)
                      and lines[i + n - 1] == lines[i] + n - 1
                      and view.vector([1, math.gcd(align, lines[i])], n)), 1)
            at = view.at(index(lines[i]))
            if n > 1 and size >= 4:
                vec = _VECTOR[(ctype, n)]
                self.emit(f"{{ const {vec} t = *reinterpret_cast<const {vec}*>(&{at}); "
                          + " ".join(f"{reg}[{i + j}] = t.{'xyzw'[j]};" for j in range(n)) + " }")
            elif n > 1:
                raw = _RAW[n * size]
                parts = " ".join(f"{reg}[{i + j}] = {_convert(f'h[{j}]', src_fmt, dst_fmt, self.location)};"
                                 for j in range(n))
                self.emit(f"{{ const {raw} t = *reinterpret_cast<const {raw}*>(&{at}); "
                          f"const {ctype}* h = reinterpret_cast<const {ctype}*>(&t); {parts} }}")
            else:
                self.emit(f"{reg}[{i}] = {_convert(at, src_fmt, dst_fmt, self.location)};")
            i += n

    # -- control flow --------------------------------------------------------------------
    def _declare(self, results, like=()) -> list:
        """Variables for ``results``; a result whose initial value (``like``) is a buffer view
        becomes a pointer variable (a rotating shared buffer: ``s0, s1 = s1, s0``)."""
        names = []
        like = list(like) + [None] * (len(results) - len(like))
        for r, init in zip(results, like):
            view = self.names.get(init) if init is not None else None
            if isinstance(view, _View):
                name = self.name(r)
                self.emit(f"{self.ctype(r.type)}* {name};  // a buffer that changes from iteration to iteration")
                self.names[r] = _View(name, "0", view.shape, view.strides, view.swizzle, view.itemsize, view.align)
                names.append(name)
            elif isinstance(r.type, TensorType) and r.type.rank > 0:
                if init is not None and self._own(init) is not None:
                    self.layouts[r] = self._own(init)
                names.append(self._new_frag(r))
            else:
                names.append(self.name(r))
                self.emit(f"{self.ctype(r.type)} {names[-1]};")
        return names

    def _assign(self, targets, values, into) -> None:
        """``targets = values`` as a parallel assignment (``s0, s1 = s1, s0`` swaps); ``into``:
        per target, the for/if result and carried value it is (a raw NaN made canonical where
        one of them is kept)."""
        staged = []
        for tgt, v, r in zip(targets, values, into):
            t = r[0].type
            view = self.names.get(v)
            if isinstance(view, _View):
                src = f"&{view.ptr}[{view.offset}]"
                decl = f"{self.ctype(t)}*"
            elif isinstance(t, TensorType) and t.rank > 0:
                self.emit("#pragma unroll")
                self.emit(f"for (int s = 0; s < {self._frag_len(t, v)}; ++s) "
                          f"{tgt}[s] = {self.canon(v, f'{self.arg(v)}[s]', r)};")
                continue
            else:
                src, decl = self.canon(v, self.arg(v), r), self.ctype(t)
            if tgt != src:
                staged.append((tgt, src, decl))
        if len(staged) == 1:
            self.emit(f"{staged[0][0]} = {staged[0][1]};")
            return
        self.count += 1
        for i, (_, src, decl) in enumerate(staged):
            self.emit(f"{decl} next{self.count}_{i} = {src};")
        for i, (tgt, _, _) in enumerate(staged):
            self.emit(f"{tgt} = next{self.count}_{i};")

    def op_for(self, op):
        lb, ub, step, *init = op.operands
        body = op.regions[0].entry
        iv, *carried = body.args
        results = self._declare(op.results, init)
        for arg, res in zip(carried, op.results):
            self.names[arg] = self.names[res]
            if res in self.layouts:
                self.layouts[arg] = self.layouts[res]
        self._assign(results, init, list(zip(op.results, carried)))
        ivn = self.name(iv)
        self.emit(f"for ({self.idx} {ivn} = {self.arg(lb)}; {ivn} < {self.arg(ub)}; {ivn} += {self.arg(step)}) {{")
        self.indent += 1
        self.block(body)
        self._assign(results, body.last_op.operands, list(zip(op.results, carried)))
        self.indent -= 1
        self.emit("}")

    def op_if(self, op):
        results = self._declare(op.results)
        self.emit(f"if ({self.arg(op.operands[0])}) {{")
        for i, region in enumerate(op.regions):
            block = region.entry
            if i == 1:
                if not block.ops or len(block.ops) == 1 and not op.results:
                    break
                self.emit("} else {")
            self.indent += 1
            self.block(block)
            self._assign(results, block.last_op.operands, [(r,) for r in op.results])
            self.indent -= 1
        self.emit("}")


#: The rule of each Tile IR op: ``rule(emitter, op)`` emits its C text.
RULES = {T._name(short): rule for short, rule in {
    "lane_id": _Emitter.op_lane_id, "linear_id": _Emitter.op_linear_id, "num_lanes": _Emitter.op_num_lanes,
    "tile_id": _Emitter.op_tile_id, "num_tiles": _Emitter.op_num_tiles, "dim": _Emitter.op_dim,
    "constant": _Emitter.op_constant, "binary": _Emitter.op_binary, "unary": _Emitter.op_unary,
    "cast": _Emitter.op_cast, "select": _Emitter.op_select, "shfl_xor": _Emitter.op_shfl_xor,
    "uniform": _Emitter.op_uniform,
    "load": _Emitter.op_load, "store": _Emitter.op_store,
    "alloc": _Emitter.op_alloc, "subview": _Emitter.op_subview, "cp_async": _Emitter.op_cp_async,
    "cp_async_commit": _Emitter.op_cp_async_commit, "cp_async_wait": _Emitter.op_cp_async_wait,
    "barrier": _Emitter.op_barrier, "fill": _Emitter.op_fill, "frag_load": _Emitter.op_frag_load,
    "frag_store": _Emitter.op_frag_store, "mma": _Emitter.op_mma, "for": _Emitter.op_for,
    "if": _Emitter.op_if}.items()}

#: The Tile IR ops without a rule, and why.
NO_RULE = {
    T.YIELD: "the terminator of for/if regions, whose rules assign its operands",
    T._name("reduce"): "a fragment reduction across lanes needs a combine in the NUM-RED-2 order that the "
                           "emitter does not write yet (the lowering's row kernels spell it out as butterflies)",
}


def emit_cuda(module: Module, arch="sm_90") -> str:
    """The CUDA C text of every tile kernel in ``module`` (see the module docstring). ``arch``
    (``"sm_80"``, ``"sm_90"`` or a list of them) sets the shared-memory budget: a kernel
    needing more than :data:`SMEM_LIMIT` of any of them is a LoweringError."""
    kernels = [op for op in module.body if T.is_kernel(op)]
    if not kernels:
        raise LoweringError("the module holds no tile kernels", fix="lower a Graph IR program first")
    for name in [arch] if isinstance(arch, str) else list(arch):
        if name not in SMEM_LIMIT:
            raise LoweringError(f"the CUDA emitter knows the shared-memory budget of {sorted(SMEM_LIMIT)}, not "
                                f"{name!r}", fix="pass arch='sm_80' or 'sm_90'")
        for k in kernels:
            need = T.shared_layout(k)[1]
            if need > SMEM_LIMIT[name]:
                raise LoweringError(f"kernel @{k.attributes['sym_name']} needs {need:,} B of shared memory per block, "
                                    f"over the {SMEM_LIMIT[name]:,} B ({SMEM_LIMIT[name] // 1024} KB) a block may use "
                                    f"on {name}", location=k.location,
                                    fix="use fewer pipeline stages or smaller tiles (the autotuner rejects such "
                                        "schedules against the preset's limit)")
    return HEADER + "\n" + "\n\n".join(_Emitter(k).kernel() for k in kernels) + "\n"
