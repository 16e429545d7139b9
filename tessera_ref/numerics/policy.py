"""Numerics policies: numerics as part of a tensor's type (spec clauses ``NUM-POL-*``).

A :class:`Policy` says how values of a tensor are stored and computed:

- ``storage``: the format values are kept in;
- ``accum``: the format in which products, sums and elementwise math are computed
  (default: f32 for any storage narrower than f32, else the storage format itself);
- ``rounding``: the rounding of every conversion into storage (``rne`` by default);
- ``overflow``: ``"saturate"`` or ``"native"`` (default: the format's own, ``"native"``);
- ``scaling``: ``"none"``, ``"per_tensor"`` (amax), ``"delayed"`` (amax history), ``"mx"``
  (32-element blocks with e8m0 scales) or ``"nvfp4"`` (16-element blocks with e4m3 scales
  and an f32 global scale);
- ``reduction``: ``"canonical"`` (the fixed orders ``NUM-RED-*``), ``"exact"`` (sums
  computed exactly and rounded once, independent of mesh and tiling) or ``"reassociate"``
  (the canonical orders, plus permission for rewrites that change rounding, such as fusing
  attention into flash attention);
- ``tc``: a tensor-core model (``"sm80"``, spelled ``accum="tc:sm80"``): matmuls add their
  products in that model's block FMAs (NUM-TC-1…6), accumulating in f32.

The programming guide's spelling ``fp6 @accum(fp32)`` builds ``Policy(fp6_e2m3, accum=f32)``;
``bf16 @accum("tc:sm80")`` builds ``Policy(bf16, accum=f32, tc="sm80")``.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace

from ..errors import FormatError, PolicyError
from .convert import OVERFLOW_MODES, ROUNDING_MODES
from .formats import Format, get_format
from . import tc as _tc

__all__ = ["Policy", "Accum", "accum", "as_policy", "SCALING_SCHEMES", "REDUCTION_MODES"]

SCALING_SCHEMES = ("none", "per_tensor", "delayed", "mx", "nvfp4")
REDUCTION_MODES = ("canonical", "exact", "reassociate")
_MX_ELEMENTS = ("fp8_e4m3", "fp8_e5m2", "fp6_e2m3", "fp6_e3m2", "fp4_e2m1")


def _format_arg(value, role: str) -> Format:
    try:
        return get_format(value)
    except FormatError as exc:
        raise PolicyError(f"{role} of a policy: {exc.what}", fix=exc.fix) from None


@dataclass(frozen=True)
class Policy:
    """Storage format plus the rules for computing with and converting into it."""

    storage: Format
    accum: Format | None = None
    rounding: str = "rne"
    overflow: str | None = None
    scaling: str = "none"
    reduction: str = "canonical"
    tc: str | None = None

    def __post_init__(self):
        storage = _format_arg(self.storage, "the storage format")
        object.__setattr__(self, "storage", storage)
        acc = self.accum
        if isinstance(acc, str) and acc.startswith(_tc.PREFIX):
            if self.tc is not None and _tc.PREFIX + self.tc != acc:
                raise PolicyError(f"a policy names two tensor-core models: accum={acc!r} and tc={self.tc!r}",
                                  fix="name one, e.g. accum='tc:sm80'")
            object.__setattr__(self, "tc", acc[len(_tc.PREFIX):])
            acc = "f32"
        if acc is None:
            acc = storage if storage.bits >= 32 and storage.is_float else get_format("f32")
        acc = _format_arg(acc, "the accumulation format")
        if not acc.is_float or acc.special != "ieee" or acc.bits < 16:
            raise PolicyError(
                f"accum({acc.name}) cannot accumulate: the accumulation format must be an IEEE "
                "float (f16, bf16, f32 or f64)",
                fix="use @accum(f32) (the default for narrow storage) or @accum(f64)",
            )
        object.__setattr__(self, "accum", acc)
        if self.rounding not in ROUNDING_MODES:
            raise PolicyError(f"unknown rounding {self.rounding!r} in a policy for {storage.name}",
                              fix=f"use one of {', '.join(ROUNDING_MODES)}")
        overflow = "native" if self.overflow is None else self.overflow
        if overflow not in OVERFLOW_MODES:
            raise PolicyError(f"unknown overflow {self.overflow!r} in a policy for {storage.name}",
                              fix="use 'saturate' or 'native'")
        object.__setattr__(self, "overflow", overflow)
        scaling = "none" if self.scaling is None else self.scaling
        if scaling not in SCALING_SCHEMES:
            raise PolicyError(f"unknown scaling {self.scaling!r} in a policy for {storage.name}",
                              fix=f"use one of {', '.join(SCALING_SCHEMES)}")
        if scaling == "mx" and storage.name not in _MX_ELEMENTS:
            raise PolicyError(f"MX scaling needs an MX element format, not {storage.name}",
                              fix=f"store as one of {', '.join(_MX_ELEMENTS)}")
        if scaling == "nvfp4" and storage.name != "fp4_e2m1":
            raise PolicyError(f"NVFP4 scaling stores fp4_e2m1 elements, not {storage.name}",
                              fix="use fp4 @accum(f32) with scaling='nvfp4'")
        object.__setattr__(self, "scaling", scaling)
        if self.reduction not in REDUCTION_MODES:
            raise PolicyError(f"unknown reduction mode {self.reduction!r}",
                              fix="use 'canonical' (fixed order), 'exact' (exact sum, rounded once) or "
                                  "'reassociate' (canonical order; rounding-changing rewrites allowed)")
        if self.tc is not None:
            self._check_tc(storage, acc)

    def _check_tc(self, storage: Format, acc: Format) -> None:
        """NUM-TC-6: a tensor-core policy accumulates in f32, in the canonical or reassociate
        mode, unscaled, with storage the model's instruction takes."""
        name = _tc.PREFIX + str(self.tc)
        model = _tc.model(name)
        object.__setattr__(self, "tc", model.name[len(_tc.PREFIX):])
        model.block(storage)  # a PolicyError for inputs the instruction does not take
        if acc.name != "f32":
            raise PolicyError(f"accum={name!r} accumulates in f32, not {acc.name}",
                              fix=f"write accum={name!r} alone")
        if self.reduction == "exact":
            raise PolicyError(f"reduction='exact' and accum={name!r} conflict: the tensor cores truncate "
                              "their block sums, an exact sum does not",
                              fix=f"choose one: accum={name!r} (tensor-core bits) or reduction='exact'")
        if self.scaling != "none":
            raise PolicyError(f"accum={name!r} with scaling={self.scaling!r} is not modeled",
                              fix="scale the operands explicitly (op.mul) and keep scaling='none'")

    def with_(self, **changes) -> "Policy":
        """A copy with some fields changed (validated again)."""
        return replace(self, **changes)

    def __matmul__(self, other):
        if isinstance(other, Accum):
            return replace(self, accum=other.format, **other.options)
        return NotImplemented

    def __str__(self) -> str:
        accum = self.accum.name if self.tc is None else _tc.PREFIX + self.tc
        text = f"{self.storage.name} @accum({accum})"
        defaults = {"rounding": "rne", "overflow": "native", "scaling": "none", "reduction": "canonical"}
        extras = [f"{k}={getattr(self, k)}" for k, v in defaults.items() if getattr(self, k) != v]
        return text + (f" [{', '.join(extras)}]" if extras else "")

    def __repr__(self) -> str:
        return f"Policy({self})"


@dataclass(frozen=True)
class Accum:
    """The right-hand side of ``fmt @accum(f32)``: an accumulation format and extra options."""

    format: Format
    options: dict = field(default_factory=dict)

    def __rmatmul__(self, other):
        if isinstance(other, str):
            return Policy(storage=other, accum=self.format, **self.options)
        return NotImplemented


def accum(fmt, **options) -> Accum:
    """``accum(f32)``: used as ``fp6 @accum(fp32)``; keyword options set other policy fields,
    e.g. ``fp8 @accum(f32, rounding="stochastic", overflow="saturate")``;
    ``accum("tc:sm80")`` names a tensor-core model (NUM-TC-6)."""
    unknown = set(options) - {"rounding", "overflow", "scaling", "reduction"}
    if unknown:
        raise PolicyError(f"accum() got unknown policy options {sorted(unknown)}",
                          fix="use rounding=, overflow=, scaling= or reduction=")
    if isinstance(fmt, str) and fmt.startswith(_tc.PREFIX):
        return Accum(get_format("f32"), {**options, "tc": _tc.model(fmt).name[len(_tc.PREFIX):]})
    return Accum(_format_arg(fmt, "the accumulation format"), dict(options))


def as_policy(spec) -> Policy:
    """A :class:`Policy` from a policy, a format or a format name (default rules)."""
    if isinstance(spec, Policy):
        return spec
    return Policy(storage=_format_arg(spec, "the storage format"))
