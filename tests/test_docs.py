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


def test_the_gpu_results_page_shows_the_newest_committed_report():
    """docs/gpu_results.md includes the newest `tessera-ref gpu-check` summary under
    benchmarks/results/ (CUDA-CHECK-7), or says plainly that none has been committed."""
    results = ROOT / "benchmarks" / "results"
    page = (ROOT / "docs" / "gpu_results.md").read_text()
    reports = sorted(results.glob("gpu-*.json"), key=lambda p: (p.name.rsplit("-", 3)[-3:], p.name))
    if not reports:
        assert "No `tessera-ref gpu-check` report has been committed yet" in page
    else:
        newest = reports[-1].with_suffix(".md").name
        assert f"{{include}} ../benchmarks/results/{newest}" in page, f"docs/gpu_results.md must show {newest}"
    for included in re.findall(r"\{include\} \.\./(benchmarks/results/\S+)", page):
        assert (ROOT / included).is_file(), included
