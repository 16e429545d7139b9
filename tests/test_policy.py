import pytest

import tessera_ref as tr
from tessera_ref.errors import PolicyError, TesseraError
from tessera_ref.numerics import Policy, Tensor, TensorAnnotation, accum, get_format


def test_seed_spelling_builds_a_policy():
    p = tr.fp6 @ accum(tr.fp32)
    assert isinstance(p, Policy)
    assert p.storage is get_format("fp6_e2m3") and p.accum is tr.f32
    assert (p.rounding, p.overflow, p.scaling, p.reduction) == ("rne", "native", "none", "canonical")
    assert str(p) == "fp6_e2m3 @accum(f32)"


def test_accum_defaults_follow_storage_width():
    assert Policy(tr.bf16).accum is tr.f32
    assert Policy(tr.fp8).accum is tr.f32
    assert Policy(tr.f64).accum is tr.f64
    assert Policy("int8").accum is tr.f32


def test_accum_options_and_policy_chaining():
    p = tr.fp8 @ accum(tr.f32, rounding="stochastic", overflow="saturate")
    assert (p.rounding, p.overflow) == ("stochastic", "saturate")
    q = p @ accum(tr.f64)
    assert q.accum is tr.f64 and q.rounding == "stochastic"
    assert "fp8_e4m3" @ accum("fp32") == Policy(tr.fp8, accum=tr.f32)


@pytest.mark.parametrize("kwargs, message", [
    (dict(storage=tr.fp8, accum=tr.fp8), "accumulation format must be an IEEE float"),
    (dict(storage=tr.f32, rounding="nearest"), "unknown rounding 'nearest'"),
    (dict(storage=tr.f32, overflow="wrap"), "unknown overflow 'wrap'"),
    (dict(storage=tr.bf16, scaling="mx"), "MX scaling needs an MX element format"),
    (dict(storage=tr.fp8, scaling="nvfp4"), "NVFP4 scaling stores fp4_e2m1"),
    (dict(storage="fp7"), "unknown number format 'fp7'"),
    (dict(storage=tr.f32, reduction="fast"), "unknown reduction mode"),
])
def test_bad_policies_raise_with_a_fix(kwargs, message):
    with pytest.raises(PolicyError, match=message) as info:
        Policy(**kwargs)
    assert "Fix:" in str(info.value)
    assert __file__.split("/")[-1] in str(info.value)  # names the user's source line


def test_accum_rejects_unknown_options():
    with pytest.raises(PolicyError, match="unknown policy options"):
        accum(tr.f32, rouding="rtz")


def test_tensor_annotation_as_the_seed_writes_it():
    ann = Tensor["B", "D", tr.fp6 @ accum(tr.fp32)]
    assert isinstance(ann, TensorAnnotation)
    assert ann.dims == ("B", "D") and ann.symbols == ("B", "D")
    assert ann.policy == Policy(tr.fp6_e2m3, accum=tr.f32)
    assert str(ann) == "Tensor['B', 'D', fp6_e2m3 @accum(f32)]"


def test_annotation_forms():
    assert Tensor["B", 128, "bf16"].policy.storage is tr.bf16
    assert Tensor["n"].policy is None and Tensor["n"].dims == ("n",)
    assert tr.f32["n"] == TensorAnnotation(("n",), Policy(tr.f32))
    assert tr.f16["m", "k"].dims == ("m", "k")


def test_bind_checks_symbols_consistently():
    ann = Tensor["B", "D", "B", tr.f32]
    assert ann.bind((2, 3, 2)) == {"B": 2, "D": 3}
    with pytest.raises(PolicyError, match=r"dimension 2 \('B'\) is 2 but the array has 5"):
        ann.bind((2, 3, 5))
    with pytest.raises(PolicyError, match="expects rank 3"):
        ann.bind((2, 3))
    assert Tensor["B", 4].bind((7, 4), {"B": 7}) == {"B": 7}


@pytest.mark.parametrize("dim", [1.5, -1, "2x", None])
def test_bad_dimensions(dim):
    with pytest.raises(TesseraError):
        Tensor["B", dim]
