"""The documentation builds without warnings and every cited spec clause exists."""
import pathlib
import re
import subprocess
import sys

from tessera_conformance.clauses import CLAUSE_ID as _ID

ROOT = pathlib.Path(__file__).resolve().parents[1]
CLAUSE = re.compile(rf"\b{_ID}\b")


def _spec_text() -> str:
    return "\n".join(p.read_text() for p in (ROOT / "docs" / "spec").glob("*.md"))


def test_sphinx_build_has_no_warnings(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
         str(ROOT / "docs"), str(tmp_path / "html")],
        capture_output=True, text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "html" / "spec" / "numerics.html").exists()
    assert (tmp_path / "html" / "spec" / "graph_ir.html").exists()


def test_clause_ids_are_unique_and_every_cited_clause_is_defined():
    spec = _spec_text()
    defined = re.findall(rf"\*\*({_ID})\b", spec)
    assert len(defined) == len(set(defined)), "a clause ID is defined twice"
    cited = set()
    for path in (ROOT / "tessera_ref").rglob("*.py"):
        cited |= set(CLAUSE.findall(path.read_text()))
    missing = sorted(cited - set(defined))
    assert not missing, f"cited in the code but not defined in docs/spec: {missing}"
