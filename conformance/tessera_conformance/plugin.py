"""The pytest plugin of the conformance suite (registered as ``pytest11`` entry point).

Options: ``--backend NAME`` (repeatable; default the oracle), ``--profile`` (``kernel``,
``single-device``, ``mesh`` or ``all``), ``--mesh-shapes 1,2x2x2,4x9x2`` and
``--conformance-report FILE.md|.html|.json``; the markers ``clause``, ``oracle_only`` and
``slow``. Only items under :data:`CASES` are touched: each must carry a ``clause`` mark;
``backend`` and ``mesh_shape`` fixtures are parametrized from the options; every report is
tagged with its clauses and backend (JUnit properties) and gathered, on the controlling process
under xdist too, into the clause × backend matrix with each failure's message and each
n/a or unsupported entry's reason.

An honest matrix (docs/conformance.md, "What pass means"): a case that passes on a backend
other than the oracle without any method of that backend running (:class:`Watch`) is n/a
there, not a pass; a case that fails after the backend refused a mesh (its ``communicator``
raised a BackendError: it runs single-device programs, BACKEND-COMM-1) is unsupported; a
case that stops on a Python error of its own (an unpacking, an index, a type) fails with an
assertion naming its clauses, the backend and the error.
"""
from __future__ import annotations

import functools
import inspect
import traceback
from pathlib import Path

import pytest

from tessera_ref import backends
from tessera_ref.backends import Backend
from tessera_ref.errors import BackendError, TesseraError

from .harness import NOT_APPLICABLE, ORACLE, UNSUPPORTED, begin_case
from .report import Matrix

CASES = Path(__file__).resolve().parent / "cases"

#: The profile of each chapter's folder (the T0–T2 idea: kernels alone, one device, a mesh).
PROFILES = {"numerics": "single-device", "graph_ir": "single-device", "autodiff": "single-device",
            "fuzz": "single-device",
            "tiles": "kernel", "lowering": "kernel", "mesh": "mesh", "sim": "mesh", "backends": "mesh",
            "runtime": "single-device", "checkpoint": "mesh"}
_MATRIX = pytest.StashKey[Matrix]()
_WATCHES: dict = {}  # backend name -> Watch, in this process

#: Why a case that never ran anything on the backend is n/a there.
UNTOUCHED = ("the case ran nothing on {backend} (no method of the backend was called): what it checks happens "
             "before or outside any backend (tracing, type inference, the library's own functions)")

BACKENDLESS = "the case takes no backend: it checks the library's own functions, once, on the oracle"


class Watch:
    """Which of one backend's own methods ran during the current case, and the meshes it
    refused. Its methods — ``run_op``, ``launch``, ``communicator`` and every public method its
    class defines or overrides (not the ones it inherits unchanged from ``Backend``) — are
    wrapped on the shared instance ``backends.get(name)`` returns."""

    ABSTRACT = ("run_op", "launch", "communicator")

    def __init__(self, backend):
        self.touched, self.refusals = False, []
        cls = type(backend)
        for name in dir(cls):
            attr = inspect.getattr_static(cls, name)
            if name.startswith("_") or isinstance(attr, property) or not callable(getattr(backend, name, None)):
                continue
            if name in self.ABSTRACT or attr is not inspect.getattr_static(Backend, name, None):
                setattr(backend, name, self._wrap(name, getattr(backend, name)))

    def _wrap(self, name, method):
        @functools.wraps(method)
        def watched(*args, **kwargs):
            self.touched = True
            try:
                return method(*args, **kwargs)
            except BackendError as exc:
                if name == "communicator":
                    self.refusals.append(exc.what)
                raise
        return watched

    def reset(self) -> None:
        self.touched, self.refusals = False, []


def _watch(name):
    """The :class:`Watch` of the backend ``name`` (None for the oracle or one that fails to load)."""
    if name == ORACLE:
        return None
    if name not in _WATCHES:
        try:
            _WATCHES[name] = Watch(backends.get(name))
        except BackendError:
            _WATCHES[name] = None
    return _WATCHES[name]


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
                    help="write the clause x backend matrix (.md, .html or .json)")


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
    config.addinivalue_line("markers", "oracle_only(reason): a conformance case about the library itself, n/a "
                                       "on every backend but the oracle")
    config.addinivalue_line("markers", "slow: exhaustive or long-running cases (tessera-ref conformance --slow)")
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
        item.user_properties += [("clauses", " ".join(clauses)), ("backend", str(_backend_of(item)))]
        if not hasattr(item, "callspec") or "backend" not in item.callspec.params:
            item.user_properties.append(("backendless", "1"))
        keep.append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def _backend_of(item) -> str:
    return item.callspec.params.get("backend", ORACLE) if hasattr(item, "callspec") else ORACLE


def _case(item) -> tuple | None:
    """``(clauses, backend)`` of a conformance case item, else None."""
    props = dict(getattr(item, "user_properties", ()))
    return (props["clauses"].split(), props["backend"]) if "clauses" in props else None


def pytest_runtest_setup(item):
    case = _case(item)
    if case is None:
        return
    clauses, backend = case
    begin_case(clauses)
    watch = _watch(backend)
    if watch is not None:
        watch.reset()
    mark = item.get_closest_marker("oracle_only")
    if mark is not None and backend != ORACLE:
        pytest.skip(f"{NOT_APPLICABLE} {mark.args[0]}")


def _raised_at(exc) -> str:
    """``file:line`` of the innermost frame of ``exc`` in a case file (else the innermost)."""
    frames = traceback.extract_tb(exc.__traceback__)
    inside = [f for f in frames if _is_case(f.filename)] or frames
    return f"{Path(inside[-1].filename).name}:{inside[-1].lineno}" if inside else "?"


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A case that stops on a Python error of its own fails with an assertion naming it."""
    try:
        return (yield)
    except (AssertionError, TesseraError):
        raise
    except Exception as exc:
        case = _case(item)
        if case is None:
            raise
        clauses, backend = case
        raise AssertionError(f"[{' '.join(clauses)}] on {backend}: the case stopped on {type(exc).__name__}: {exc} "
                             f"(at {_raised_at(exc)}): the backend's results do not have the structure the program's "
                             f"types give them, or the case has a bug") from exc


def _skipped(report, item, reason: str) -> None:
    report.outcome = "skipped"
    report.longrepr = (str(item.path), item.location[1] or 0, f"Skipped: {reason}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item, call):
    report = yield
    case = _case(item)
    if case is None or call.when != "call" or hasattr(report, "wasxfail"):
        return report
    watch = _watch(case[1])
    if watch is None:
        return report
    if report.failed and watch.refusals:
        _skipped(report, item, f"{UNSUPPORTED} {case[1]} refuses meshes: {watch.refusals[0]}")
    elif report.passed and not watch.touched:
        _skipped(report, item, f"{NOT_APPLICABLE} {UNTOUCHED.format(backend=case[1])}")
    return report


def _outcome(report) -> tuple:
    """``(outcome, detail)``: the matrix outcome of a report and its reason or failure message."""
    if hasattr(report, "wasxfail"):  # a known bug; a strict xfail that passed fails
        return ("xfail", report.wasxfail) if report.skipped else ("fail", "a known bug passed")
    if report.passed:
        return "pass", ""
    if report.failed:
        crash = getattr(report.longrepr, "reprcrash", None)
        text = crash.message if crash is not None else str(report.longrepr).strip().splitlines()[-1]
        return "fail", text
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = reason.removeprefix("Skipped: ")
    for prefix, outcome in ((UNSUPPORTED, "unsupported"), (NOT_APPLICABLE, "n/a")):
        if reason.startswith(prefix):
            return outcome, reason.removeprefix(prefix).strip()
    return "skip", reason


def pytest_runtest_logreport(report):
    props = dict(report.user_properties)
    if "clauses" not in props or (report.when != "call" and not (report.failed or report.skipped)):
        return
    matrix = _CONFIG[0].stash[_MATRIX] if _CONFIG else None
    if matrix is None:
        return
    clauses = props["clauses"].split()
    matrix.add(clauses, props["backend"], *_outcome(report), report.nodeid)
    if "backendless" in props:  # it ran once, on the oracle: n/a on every other backend
        for other in matrix.backends:
            if other != props["backend"]:
                matrix.add(clauses, other, "n/a", BACKENDLESS, report.nodeid)


_CONFIG: list = []


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session):
    _CONFIG[:] = [session.config]


def pytest_sessionfinish(session):
    target = session.config.getoption("conformance_report")
    if target and not hasattr(session.config, "workerinput"):  # the controller writes it
        session.config.stash[_MATRIX].write(Path(target))
