"""The primitive registry: every op has its rules, a spec clause and a user function, and the
missing-rule report is right."""
import pathlib
import re
import subprocess
import sys

from tessera_ref import op
from tessera_ref.ops import NOT_DIFFERENTIABLE, PRIMITIVES, RULES, missing_rules

ROOT = pathlib.Path(__file__).resolve().parents[2]
SPEC = "\n".join(p.read_text() for p in (ROOT / "docs" / "spec").glob("*.md"))
DEFINED = set(re.findall(r"\*\*((?:GRAPH|MESH)-[A-Z0-9]+-\d+)\b", SPEC))


def test_every_primitive_has_infer_impl_cost_and_a_defined_clause():
    assert len(PRIMITIVES) >= 60
    for name, prim in PRIMITIVES.items():
        for rule in ("infer", "impl", "cost"):
            assert callable(getattr(prim, rule)), f"{name} has no {rule} rule"
        assert prim.spec in DEFINED, f"{name} cites {prim.spec}, which docs/spec does not define"
        assert prim.ir_name == f"tessera.graph.{name}"


def test_every_primitive_but_constant_has_a_user_function():
    exported = {getattr(op, n) for n in op.__all__}
    assert all(callable(f) for f in exported)
    documented = "\n".join((getattr(op, n).__doc__ or "") for n in op.__all__)
    for name in PRIMITIVES:
        if name == "constant":
            continue
        clause = PRIMITIVES[name].spec
        assert clause in documented, f"no op.* docstring cites {clause} ({name})"


def test_missing_rule_report_lists_exactly_the_empty_slots():
    expected = {name: [r for r in RULES if getattr(p, r) is None] for name, p in PRIMITIVES.items()}
    expected = {k: v for k, v in expected.items() if v}
    assert missing_rules() == dict(sorted(expected.items()))
    # the comparisons say explicitly that they have no derivative
    assert PRIMITIVES["less"].vjp is NOT_DIFFERENTIABLE and "vjp" not in missing_rules().get("less", [])


def test_cli_ops_reports_every_op_and_its_gaps():
    out = subprocess.run([sys.executable, "-m", "tessera_ref.cli", "ops"], capture_output=True, text=True,
                         check=True).stdout
    rows = {line.split()[0]: line.split()[1:] for line in out.splitlines()[1:] if line.strip()
            and line.split()[0] in PRIMITIVES}
    assert set(rows) == set(PRIMITIVES)
    for name, cells in rows.items():
        assert cells[0] == PRIMITIVES[name].spec
        for rule, cell in zip(RULES, cells[1:]):
            value = getattr(PRIMITIVES[name], rule)
            expected = "yes" if rule != "kernel_family" or value is None else value.name
            assert cell == ("-" if value is None else "n/a" if value is NOT_DIFFERENTIABLE else expected)
    missing = subprocess.run([sys.executable, "-m", "tessera_ref.cli", "ops", "--missing"], capture_output=True,
                             text=True, check=True).stdout
    listed = {line.split()[0] for line in missing.splitlines()[1:] if line.strip() and line.split()[0] in PRIMITIVES}
    assert listed == set(missing_rules())


def test_kernel_family_slots_hold_the_registered_family_objects():
    """``kernel_family`` holds a family object the lowering registered (never a name), and each
    family lists exactly the primitives whose slot holds it."""
    from tessera_ref.lowering.family import FAMILIES, KernelFamily

    lowered = {name: p.kernel_family for name, p in PRIMITIVES.items() if p.kernel_family is not None}
    assert set(lowered) == {"matmul", "flash_attention", "softmax", "layernorm_safe", "rmsnorm_safe", "sum", "mean",
                            "max", "min", "add", "sub", "mul", "div", "neg", "abs", "maximum", "minimum", "cast",
                            "rand", "dropout", "fma", "where", "pow",
                            # LOWER-EW-3: every NUM-MATH function
                            "exp", "expm1", "log", "sqrt", "rsqrt", "tanh", "erf", "erfc", "sigmoid", "silu", "gelu",
                            "sin", "cos",
                            # LOWER-EW-4: comparisons and mask logic
                            "equal", "not_equal", "less", "less_equal", "greater", "greater_equal", "logical_and",
                            "logical_or", "logical_not"}
    for name, family in lowered.items():
        assert isinstance(family, KernelFamily) and FAMILIES[family.name] is family and name in family.ops()
    assert sorted(n for f in FAMILIES.values() for n in f.ops()) == sorted(lowered)
    assert "kernel_family" in missing_rules()["transpose"]
