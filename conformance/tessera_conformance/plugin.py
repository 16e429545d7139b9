"""The pytest plugin of the conformance suite (registered as ``pytest11`` entry point).

Options: ``--backend NAME`` (repeatable; default the oracle), ``--profile`` (``kernel``,
``single-device``, ``mesh`` or ``all``), ``--mesh-shapes 1,2x2x2,4x9x2`` and
``--conformance-report FILE.md|FILE.html``. Only items under :data:`CASES` are touched: each
must carry a ``clause`` mark; ``backend`` and ``mesh_shape`` fixtures are parametrized from
the options; every report is tagged with its clauses and backend (JUnit properties) and
gathered, on the controlling process under xdist too, into the clause × backend matrix.
"""
from __future__ import annotations

from pathlib import Path

import pytest

from .harness import NOT_APPLICABLE, ORACLE, UNSUPPORTED
from .report import Matrix

CASES = Path(__file__).resolve().parent / "cases"

#: The profile of each chapter's folder (the T0–T2 idea: kernels alone, one device, a mesh).
PROFILES = {"numerics": "single-device", "graph_ir": "single-device", "autodiff": "single-device",
            "fuzz": "single-device",
            "tiles": "kernel", "lowering": "kernel", "mesh": "mesh", "sim": "mesh", "backends": "mesh",
            "runtime": "single-device", "checkpoint": "mesh"}
_MATRIX = pytest.StashKey[Matrix]()


def pytest_addoption(parser):
    group = parser.getgroup("tessera conformance")
    group.addoption("--backend", action="append", default=None, metavar="NAME",
                    help=f"run the conformance cases on this backend (repeatable; default {ORACLE})")
    group.addoption("--profile", default="all", choices=("kernel", "single-device", "mesh", "all"),
                    help="which cases: tile kernels, single-device programs, mesh programs, or all")
    group.addoption("--mesh-shapes", default="1,2x2x2,4x9x2", metavar="SHAPES",
                    help="the simulated meshes mesh cases run on, e.g. 1,2x2,4x9x2")
    group.addoption("--fuzz-examples", type=int, default=25, metavar="N",
                    help="random programs per backend for the differential fuzzer (CI: 25)")
    group.addoption("--fuzz-dir", default="tessera-fuzz", metavar="DIR",
                    help="where the fuzzer writes the script of a disagreement it found")
    group.addoption("--conformance-report", default=None, metavar="FILE",
                    help="write the clause x backend matrix (.md or .html)")


def _is_case(path) -> bool:
    try:
        Path(path).resolve().relative_to(CASES)
        return True
    except ValueError:
        return False


def _backends(config) -> list:
    return config.getoption("backend") or [ORACLE]


def _shapes(config) -> list:
    out = []
    for text in config.getoption("mesh_shapes").split(","):
        try:
            out.append(tuple(int(n) for n in text.strip().lower().split("x")))
        except ValueError:
            raise pytest.UsageError(f"--mesh-shapes: {text!r} is not a shape like 2x2x2") from None
    return out


def pytest_configure(config):
    config.addinivalue_line("markers", "clause(*ids): the spec clauses a conformance case checks")
    config.stash[_MATRIX] = Matrix(_backends(config))


def pytest_generate_tests(metafunc):
    if not _is_case(metafunc.definition.path):
        return
    if "backend" in metafunc.fixturenames:
        metafunc.parametrize("backend", _backends(metafunc.config), scope="function")
    if "mesh_shape" in metafunc.fixturenames:
        shapes = _shapes(metafunc.config)
        metafunc.parametrize("mesh_shape", shapes, ids=["x".join(map(str, s)) for s in shapes])


@pytest.fixture
def fuzz_examples(request) -> int:
    """How many random programs the fuzzer tries (``--fuzz-examples``)."""
    return request.config.getoption("fuzz_examples")


@pytest.fixture
def fuzz_dir(request) -> Path:
    """Where the fuzzer writes reproducers (``--fuzz-dir``)."""
    return Path(request.config.getoption("fuzz_dir"))


def profile_of(path) -> str:
    """The profile of a case file: its chapter folder's."""
    return PROFILES.get(Path(path).resolve().relative_to(CASES).parts[0], "all")


def pytest_collection_modifyitems(config, items):
    profile = config.getoption("profile")
    keep, drop = [], []
    for item in items:
        if not _is_case(item.path):
            keep.append(item)
            continue
        marks = [m for m in item.iter_markers("clause")]
        if not marks:
            raise pytest.UsageError(f"conformance case {item.nodeid} has no @clause(...) mark")
        if profile != "all" and profile_of(item.path) != profile:
            drop.append(item)
            continue
        clauses = sorted({c for m in marks for c in m.args})
        backend = item.callspec.params.get("backend", ORACLE) if hasattr(item, "callspec") else ORACLE
        item.user_properties += [("clauses", " ".join(clauses)), ("backend", str(backend))]
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _outcome(report) -> str:
    if hasattr(report, "wasxfail"):
        return "xfail" if report.skipped else "fail"  # a known bug; a strict xfail that passed fails
    if report.passed:
        return "pass"
    if report.failed:
        return "fail"
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    if reason.startswith(UNSUPPORTED):
        return "unsupported"
    return "n/a" if reason.startswith(NOT_APPLICABLE) else "skip"


def pytest_runtest_logreport(report):
    props = dict(report.user_properties)
    if "clauses" not in props or (report.when != "call" and not (report.failed or report.skipped)):
        return
    matrix = _CONFIG[0].stash[_MATRIX] if _CONFIG else None
    if matrix is not None:
        matrix.add(props["clauses"].split(), props["backend"], _outcome(report), report.nodeid)


_CONFIG: list = []


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _CONFIG[:] = [session.config]


def pytest_sessionfinish(session):
    target = session.config.getoption("conformance_report")
    if target and not hasattr(session.config, "workerinput"):  # the controller writes it
        session.config.stash[_MATRIX].write(Path(target))
