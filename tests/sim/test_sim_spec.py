"""Every SIM clause cited in tessera_ref/sim is defined once in docs/spec/sim.md, and every
defined clause is cited (the tests/test_docs.py check, for the SIM prefix)."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[2]


def test_sim_clauses_are_defined_once_and_cited():
    spec = (ROOT / "docs" / "spec" / "sim.md").read_text()
    defined = re.findall(r"\*\*(SIM-[A-Z]+-\d+)\b", spec)
    assert len(defined) == len(set(defined)), "a clause ID is defined twice"
    cited = set()
    for path in (ROOT / "tessera_ref").rglob("*.py"):
        cited |= set(re.findall(r"\bSIM-[A-Z]+-\d+\b", path.read_text()))
    assert sorted(cited - set(defined)) == [], "cited in the code but not defined in docs/spec/sim.md"
    assert sorted(set(defined) - cited) == [], "defined in docs/spec/sim.md but cited nowhere in the code"
