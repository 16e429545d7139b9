"""The conformance suite's own checks: its clause list is the spec's, every clause is accounted
for, its command works, and it bites (the non-conforming example backend fails)."""
import ast
import re
import subprocess
import sys
import tomllib

import pytest

from conformance_runs import DOC, ROOT, assert_documented, conformance, matrix
from tessera_conformance.clauses import load, load_not_testable, scan
from tessera_conformance.coverage import collected_clauses, report
from tessera_conformance.plugin import CASES
from tessera_conformance.report import SPEC
from tessera_conformance.summary import coverage_of


@pytest.fixture(scope="module")
def cased():
    return collected_clauses()


def test_the_shipped_clause_list_is_the_specs():
    assert load() == scan(ROOT / "docs" / "spec"), \
        "docs/spec changed: run python -m tessera_conformance.clauses docs/spec"


def test_every_clause_has_a_title():
    """The matrix shows each clause's title: ``**ID (title).**`` in the spec."""
    assert not [c["id"] for c in load() if not c["title"]]


def test_the_spec_ships_with_the_suite():
    """The matrix links every clause to its chapter in ``tessera_conformance/spec`` (docs/spec in a
    clone, a copy in an installed package): each chapter is there and the wheel carries them."""
    assert all((SPEC / c["spec"]).is_file() for c in load())
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "spec/*.md" in data["tessera_conformance"]


def _oracle_only_names(tree) -> set:
    """Module-level names bound to ``oracle_only(...)`` (a mark reused by several cases)."""
    return {t.id for n in tree.body if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
            and getattr(n.value.func, "id", "") == "oracle_only" for t in n.targets if isinstance(t, ast.Name)}


def test_a_case_that_never_uses_its_backend_is_oracle_only():
    """A case that takes ``backend`` and never uses it cannot pass for a backend: it carries an
    ``oracle_only`` mark (itself, or its module's ``pytestmark``), whose reason the matrix shows."""
    bare = []
    for path in sorted(CASES.rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        marks = _oracle_only_names(tree) | {"oracle_only"}
        module_marked = any(isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "pytestmark" for t in n.targets)
                            and "oracle_only" in ast.dump(n.value) for n in tree.body)
        for node in tree.body:
            if not (isinstance(node, ast.FunctionDef) and node.name.startswith("test")):
                continue
            if "backend" not in [a.arg for a in node.args.args] or module_marked:
                continue
            if any(isinstance(x, ast.Name) and x.id == "backend" for x in ast.walk(node)):
                continue
            named = {getattr(getattr(d, "func", d), "id", "") for d in node.decorator_list}
            if not named & marks:
                bare.append(f"{path.relative_to(CASES)}::{node.name}")
    assert not bare, f"cases that never use their backend without an oracle_only mark: {bare}"


def test_each_not_testable_clause_names_existing_tests_that_check_it():
    """A clause no case can check (the CUDA backends' header, compiler and harness; several
    processes; …) is checked by the repository's own tests: its reason names them."""
    import re
    for cid, reason in load_not_testable().items():
        named = re.findall(r"\btests/[\w/]+\.py", reason)
        assert named, f"{cid}: the not-testable reason names no test that checks it"
        assert all((ROOT / p).is_file() for p in named), f"{cid} names a test file that does not exist: {named}"


def test_cuda_clauses_are_clauses():
    """docs/spec/cuda.md and cuda_cpu.md define CUDA-* clauses; the clause list has every one."""
    import re
    spec = (ROOT / "docs" / "spec" / "cuda.md").read_text() + (ROOT / "docs" / "spec" / "cuda_cpu.md").read_text()
    defined = re.findall(r"^\*\*(CUDA-[A-Z]+(?:-[A-Z]+)?-\d+)", spec, re.M)
    listed = [c["id"] for c in load() if c["id"].startswith("CUDA-")]
    assert defined and listed == defined


def test_cases_and_not_testable_entries_name_real_clauses(cased):
    ids = {c["id"] for c in load()}
    unknown = sorted(set(cased) - ids)
    assert not unknown, f"cases cite clauses the spec does not define: {unknown}"
    entries = load_not_testable()
    assert not sorted(set(entries) - ids), "not_testable lists unknown clauses"
    assert all(isinstance(r, str) and len(r) > 15 for r in entries.values()), "each entry needs a reason"
    assert not sorted(set(entries) & set(cased)), "a clause is both tested and 'not testable'"


def test_the_command_writes_junit_and_the_matrix_and_fails_a_failing_backend(tmp_path):
    ok = conformance("--backend", "interp", "-k", "random_programs", "--fuzz-examples", "5",
                      "--junit", str(tmp_path / "j.xml"), "--report", str(tmp_path / "m.md"), cwd=tmp_path)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    junit = (tmp_path / "j.xml").read_text()
    assert 'name="clauses" value="BACKEND-COMM-1 BACKEND-OP-1 BACKEND-RUN-1"' in junit and 'name="backend" value="interp"' in junit
    text = (tmp_path / "m.md").read_text()
    link = re.search(r"^\| \[BACKEND-OP-1\]\(([^)]+)\) \| [^|]* \| pass \|$", text, re.M)
    assert link and (tmp_path / link.group(1)).resolve() == (SPEC / "backends.md").resolve()  # relative, works
    again = conformance("--backend", "interp", "-k", "random_programs", "--fuzz-examples", "5",
                        "--report", str(tmp_path / "m2.md"), cwd=tmp_path)
    assert again.returncode == 0 and (tmp_path / "m2.md").read_text() == text  # deterministic
    # 100 examples: Hypothesis seeds its draws with the numeric constants of the package's source,
    # so which of the first few programs catch numpy-naive changes whenever a constant does
    bad = conformance("--backend", "numpy-naive", "-k", "random_programs", "--fuzz-examples", "100",
                       "--report", str(tmp_path / "n.md"), cwd=tmp_path)
    assert bad.returncode == 1
    assert "| FAIL |" in (tmp_path / "n.md").read_text()
    # which program (one-device or mesh) disagrees first also moves with the source's constants
    script = sorted((tmp_path / "tessera-fuzz").glob("numpy-naive-*-disagreement.py"))[0]
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0 and "DIFFERENT bits" in run.stdout  # the shrunk reproducer reproduces


def test_the_docs_example_backend_runs_and_is_caught():
    import re

    import numpy as np

    from tessera_ref import backends, op
    from tessera_conformance import assert_bits, eager, run

    text = (ROOT / "docs" / "conformance.md").read_text()
    namespace: dict = {}
    exec(re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)[0], namespace)
    ftz = namespace["FlushToZero"]()
    tiny = np.array([1e-20, 3.0], np.float32)
    got, want = eager(ftz, lambda x: op.mul(x, x), tiny), run("interp", lambda x: op.mul(x, x), tiny)
    assert want[0] != 0 and got[0] == 0  # the oracle keeps the subnormal 1e-40; FTZ flushes it
    with pytest.raises(AssertionError, match="differ in their bits"):
        assert_bits(got, want)
    assert backends.get(ftz) is ftz


def test_the_docs_coverage_line_is_what_a_collection_prints(cased):
    """docs/conformance.md's coverage line is what python -m tessera_conformance.coverage prints."""
    assert coverage_of(DOC.read_text()) == report(cased), \
        "run python -m tessera_conformance.summary docs/conformance.md (its coverage line is stale)"


def test_every_clause_is_accounted_for(cased):
    """Every normative clause has a case or a reasoned 'not testable' entry; >= 85% have a case."""
    ids = [c["id"] for c in load()]
    cased, untestable = set(cased), set(load_not_testable())
    missing = [i for i in ids if i not in cased and i not in untestable]
    assert not missing, f"clauses with neither a case nor a not-testable reason: {missing}"
    with_case = sum(i in cased for i in ids)
    assert with_case >= 0.85 * len(ids), f"only {with_case} of {len(ids)} clauses have a case"


def test_interp_passes_and_interp_tiles_conforms(tmp_path):
    """The oracle passes every clause with a case; the lowered Tile IR path passes or refuses
    (unsupported), it never fails a clause; docs/conformance.md's rows are this run's."""
    out = conformance("--backend", "interp", "--backend", "interp-tiles", "--report", str(tmp_path / "m.json"),
                      cwd=tmp_path)
    report = matrix(tmp_path / "m.json")
    assert out.returncode == 0, out.stdout[-3000:]
    entries = report["entries"]
    assert set(report["counts"]["interp"]) <= {"pass", "not testable", "n/a"}, report["counts"]["interp"]
    # the oracle has no device: only the runtime's device clauses are n/a there
    assert all(c.startswith("RUNTIME-") for c, e in entries.items() if e["interp"] == "n/a")
    assert "no case" not in report["counts"]["interp-tiles"]  # a case with no backend is n/a there
    assert "FAIL" not in report["counts"]["interp-tiles"] and report["counts"]["interp-tiles"]["pass"] > 150
    for backend in ("interp", "interp-tiles"):
        assert_documented(report, backend)


def test_numpy_naive_fails_exactly_the_clauses_its_shortcuts_break(tmp_path):
    from tessera_conformance.naive import BREAKS

    out = conformance("--backend", "numpy-naive", "--report", str(tmp_path / "m.json"), cwd=tmp_path)
    report = matrix(tmp_path / "m.json")
    entries = {c: e["numpy-naive"] for c, e in report["entries"].items()}
    assert out.returncode == 1
    failed = {c for c, e in entries.items() if e == "FAIL"}
    assert failed == set().union(*BREAKS.values())
    assert {e for c, e in entries.items() if c not in failed} <= {"pass", "n/a", "not testable", "unsupported"}
    assert all(message for *_, message in report["failing"])  # each failure says why
    assert_documented(report, "numpy-naive")


def test_a_reproducer_script_with_special_input_values_runs(tmp_path):
    """The fuzzer draws inf and nan inputs; the script it writes must define the names repr()
    gives them (a reproducer once failed with NameError: inf)."""
    from tessera_conformance.fuzz import Program, Step
    program = Program({"storage": "f32"}, ((float("inf"), 1.0), (float("nan"), -float("inf"))), (Step("add", (0, 1)),))
    script = tmp_path / "repro.py"
    script.write_text(program.script("interp", "interp"))
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines()[0] == "same bits" and "got  [ nan -inf]" in run.stdout  # inf + nan, 1 + -inf
