"""An honest matrix (issue 33): a backend that runs nothing passes nothing — the cases that never
reach it are n/a, with their reason; ``checks=False`` alone makes the checker cases n/a, and a
backend that ignores ``checks`` without saying so fails them (BACKEND-LAUNCH-1)."""
import re
from xml.etree import ElementTree

from conformance_runs import conformance, matrix
from outside_backends import install

#: Chapters where cases stop before any backend (errors of the front end, the library's own
#: models) next to ones that run programs, launch kernels and use communicators.
SAMPLE = "sim or test_layouts or test_meshes or test_rng or test_reductions or test_registry or test_execution"


def _nothing(tmp_path, *select) -> tuple:
    """``(clause entries, {case: skip reason})`` of a run on ``runs-nothing``: no clause passes,
    and every failure is an assertion or an error of the library, with its message."""
    out = conformance("--backend", "runs-nothing", *select, "--report", str(tmp_path / "m.json"), "--junit",
                      str(tmp_path / "j.xml"), cwd=tmp_path, pythonpath=install(tmp_path / "site"))
    report = matrix(tmp_path / "m.json")
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr[-3000:]
    entries = {c: e["runs-nothing"] for c, e in report["entries"].items()}
    assert "pass" not in entries.values(), sorted(c for c, e in entries.items() if e == "pass")
    for cid, _, case, message in report["failing"]:
        assert re.match(r"(AssertionError|\w+Error): ", message), (cid, case, message)
    cases = ElementTree.parse(tmp_path / "j.xml").iter("testcase")
    skipped = {f"{c.get('classname').rsplit('.', 1)[-1]}::{c.get('name').split('[')[0]}":
               c.find("skipped").get("message") for c in cases if c.find("skipped") is not None}
    return entries, skipped


def test_a_backend_that_runs_nothing_passes_nothing(tmp_path):
    entries, skipped = _nothing(tmp_path, "-k", SAMPLE)
    assert entries["SIM-HW-1"] == "n/a" and entries["GRAPH-SUM-1"] == entries["BACKEND-LAUNCH-1"] == "FAIL"
    # the key derivation is the numerics library's (marked); a shape error comes before any backend
    assert skipped["test_rng::test_key_derivation_known_answers"].startswith("n/a: RNGKey and fold are")
    assert skipped["test_reductions::test_reduction_errors"].startswith("n/a: the case ran nothing on runs-nothing")


def test_checks_false_alone_makes_the_checker_cases_not_applicable(tmp_path):
    out = conformance("--backend", "unchecked-says-so", "--backend", "unchecked-silently", "-k", "test_checkers",
                      "--report", str(tmp_path / "m.json"), cwd=tmp_path, pythonpath=install(tmp_path / "site"))
    entries = matrix(tmp_path / "m.json")["entries"]
    said = {e["unchecked-says-so"] for e in entries.values()}
    assert "FAIL" not in said and "n/a" in said, out.stdout[-3000:]
    ignored = [c for c, e in entries.items() if e["unchecked-silently"] == "FAIL"]
    assert len([c for c in ignored if c.startswith("TILE-CHECK-")]) >= 3, ignored  # races, uninitialized reads, ...
    assert {entries[c]["unchecked-says-so"] for c in ignored} == {"n/a"}
