"""Roofline time of one op on one device (SIM-ROOF-1 … SIM-ROOF-3).

An op that does ``flops`` floating-point operations and moves ``bytes`` bytes of HBM takes
``max(flops / peak(dtype), bytes / HBM bandwidth)`` seconds plus an optional fixed launch
overhead; it is compute-bound when the first term is the larger. A preset that states
achievable fractions for the op's class (SIM-HW-5) scales the peak and the bandwidth by them.
"""
from __future__ import annotations

import math
import numbers
from typing import NamedTuple

from ..errors import SimError
from ..numerics import get_format
from .presets import get_preset

__all__ = ["Roofline", "roofline", "peak_key", "op_class", "OP_CLASSES"]

#: The op classes a preset may give achievable fractions for (SIM-ROOF-3): the ops that run on
#: tensor cores, and every other op.
OP_CLASSES = {"tensor_core": frozenset({"matmul", "gemm", "conv2d", "flash_attention", "flash_attention_lse",
                                      "flash_attention_bwd"}), "other": None}


def op_class(name: str | None) -> str:
    """The class of the op ``name`` (SIM-ROOF-3): ``"tensor_core"`` or ``"other"``."""
    return "tensor_core" if name in OP_CLASSES["tensor_core"] else "other"

# The rate key of each format (SIM-ROOF-2): the operands' storage format picks the rate.
_KEY_OF_FORMAT = {"f64": "f64", "f32": "f32", "f16": "f16", "bf16": "bf16", "fp8_e4m3": "fp8",
                  "fp8_e5m2": "fp8", "fp6_e2m3": "fp6", "fp6_e3m2": "fp6", "fp4_e2m1": "fp4",
                  "int8": "int8", "int4": "int4"}
# A part without a rate for a key runs it at the next wider one (e.g. fp4 on H100 as fp8).
_WIDER = {"fp4": "fp6", "fp6": "fp8", "fp8": "bf16", "int4": "int8", "int8": "bf16",
          "bf16": "f32", "f16": "f32", "tf32": "f32"}


class Roofline(NamedTuple):
    """The roofline time of an op: ``time = max(compute_time, memory_time) + launch_overhead``;
    ``bound`` is ``"compute"`` or ``"memory"``; ``peak_flops`` is the rate of ``peak_key``
    (times the op class's achievable fraction, SIM-ROOF-3)."""

    time: float
    compute_time: float
    memory_time: float
    bound: str
    peak_flops: float
    peak_key: str


def peak_key(preset, dtype) -> str:
    """The key of the peak rate an op on operands of ``dtype`` runs at on ``preset``
    (SIM-ROOF-2): the format's own key (``fp8_e5m2`` -> ``fp8``; ``"tf32"`` names the f32
    tensor-core rate) if the part has that rate, else the next wider one it has."""
    preset = get_preset(preset)
    if isinstance(dtype, str) and dtype.strip().lower() == "tf32":
        key = "tf32"
    else:
        fmt = get_format(dtype)
        if fmt.name not in _KEY_OF_FORMAT:
            raise SimError(f"{fmt.name} is a scale format; no op computes in it",
                           fix="give the format of the op's operands (e.g. fp8_e4m3 for MX-scaled fp8)")
        key = _KEY_OF_FORMAT[fmt.name]
    peaks = preset.peaks
    while key not in peaks:
        key = _WIDER[key]
    return key


def roofline(cost, dtype, preset, launch_overhead: float = 0.0, op: str | None = None) -> Roofline:
    """The roofline time of an op of ``cost = (flops, bytes)`` (an ``ops.Cost``) on operands of
    ``dtype`` on one GPU of ``preset`` (SIM-ROOF-1). ``launch_overhead`` (seconds, default 0)
    is added once per op. ``op`` names the op: its class's achievable fractions on ``preset``
    scale the peak and the bandwidth (SIM-ROOF-3); ``None`` is pure roofline."""
    preset = get_preset(preset)
    try:
        flops, nbytes = cost
    except (TypeError, ValueError):
        raise SimError(f"an op's cost is (flops, bytes), got {cost!r}", fix="pass an ops.Cost") from None
    for what, value in (("flops", flops), ("bytes", nbytes), ("launch_overhead", launch_overhead)):
        if not isinstance(value, numbers.Real) or isinstance(value, bool) or not math.isfinite(value) or value < 0:
            raise SimError(f"an op's {what} must be a finite non-negative number, got {value!r}",
                           fix="pass Cost(flops, bytes) with counts >= 0")
    key = peak_key(preset, dtype)
    fc, fm = (1.0, 1.0) if op is None else preset.fractions(op_class(op))
    peak = preset.peaks[key] * fc
    compute, memory = flops / peak, nbytes / (preset.hbm_bandwidth * fm)
    bound = "compute" if compute > memory else "memory"
    return Roofline(max(compute, memory) + launch_overhead, compute, memory, bound, peak, key)
