"""Number formats, bit-exact conversions, policies, block scaling and the counter-based RNG.

The normative rules are in ``docs/spec/numerics.md``; each public function cites its
clauses (NUM-*).
"""
from .annotations import Tensor, TensorAnnotation
from .arith import ELEMENTWISE_OPS, accum_op, add, apply_elementwise, div, fma, mul, sqrt, sub
from .convert import OVERFLOW_MODES, ROUNDING_MODES, cast, decode, encode
from .exactsum import ExactAccumulator, exact_dot, exact_sum
from .formats import ALIASES, FORMATS, Format, all_formats, get_format
from .packing import pack, packed_nbytes, unpack
from .policy import Accum, Policy, accum, as_policy
from .reduce import (
    REDUCE_OPS,
    argmax_canonical,
    argmin_canonical,
    dot_canonical,
    dot_tiled,
    reduce_canonical,
)
from .rng import RNGKey, as_key, philox4x32_10, rand, randn, random_bits, randpoisson
from .scaling import (
    DelayedScaling,
    HybridScaling,
    ScaledTensor,
    amax_scale,
    quantize_mx,
    quantize_nvfp4,
    quantize_per_tensor,
)

# Module-level format names, as the Tessera guide writes them (NUM-FMT-2 for the bare names).
f64 = fp64 = FORMATS["f64"]
f32 = fp32 = FORMATS["f32"]
f16 = fp16 = FORMATS["f16"]
bf16 = FORMATS["bf16"]
fp8_e4m3 = fp8 = FORMATS["fp8_e4m3"]
fp8_e5m2 = FORMATS["fp8_e5m2"]
fp6_e2m3 = fp6 = FORMATS["fp6_e2m3"]
fp6_e3m2 = FORMATS["fp6_e3m2"]
fp4_e2m1 = fp4 = FORMATS["fp4_e2m1"]
e8m0 = FORMATS["e8m0"]
int8 = FORMATS["int8"]
int4 = FORMATS["int4"]

__all__ = [
    "Format", "FORMATS", "ALIASES", "get_format", "all_formats",
    "encode", "decode", "cast", "ROUNDING_MODES", "OVERFLOW_MODES",
    "pack", "unpack", "packed_nbytes",
    "Policy", "Accum", "accum", "as_policy", "Tensor", "TensorAnnotation",
    "ScaledTensor", "quantize_mx", "quantize_nvfp4", "quantize_per_tensor", "amax_scale",
    "DelayedScaling", "HybridScaling",
    "ELEMENTWISE_OPS", "apply_elementwise", "accum_op", "fma", "add", "sub", "mul", "div", "sqrt",
    "REDUCE_OPS", "dot_canonical", "dot_tiled", "reduce_canonical", "argmax_canonical",
    "argmin_canonical", "ExactAccumulator", "exact_sum", "exact_dot",
    "RNGKey", "as_key", "philox4x32_10", "random_bits", "rand", "randn", "randpoisson",
    "f64", "fp64", "f32", "fp32", "f16", "fp16", "bf16", "fp8_e4m3", "fp8", "fp8_e5m2",
    "fp6_e2m3", "fp6", "fp6_e3m2", "fp4_e2m1", "fp4", "e8m0", "int8", "int4",
]
