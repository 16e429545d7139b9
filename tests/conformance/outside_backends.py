"""Outside backends that probe the suite's honesty (tests/conformance/test_honesty.py), as a third
party would write them, installed through the entry point ``tessera_ref.backends``:

- ``runs-nothing``: every method raises — a case that passes on it never ran anything there;
- ``unchecked-says-so``: the interpreter, launching without its checkers, whose reports add
  ``checks=False`` to what the interpreter reports (BACKEND-LAUNCH-1's honest answer);
- ``unchecked-silently``: the same without saying so.
"""
from __future__ import annotations

import dataclasses

from tessera_ref.backends import Backend, get


class RunsNothing(Backend):
    """Runs nothing: every op, launch and communicator raises."""

    name = "runs-nothing"
    description = "runs nothing (a probe of the conformance suite)"

    def _refuse(self, *args, **kwargs):
        raise RuntimeError("runs-nothing ran nothing")

    run_op = launch = communicator = _refuse


class Unchecked(Backend):
    """The interpreter, launching every kernel with its checkers off."""

    says_so = False

    def __init__(self):
        self.interp = get("interp")

    def run_op(self, call, *operands):
        return self.interp.run_op(call, *operands)

    def launch(self, launch):
        report = self.interp.launch(dataclasses.replace(launch, checks=False))
        if self.says_so:
            report.checks = False
        return report

    def communicator(self, mesh):
        return self.interp.communicator(mesh)


class UncheckedSaysSo(Unchecked):
    name, says_so = "unchecked-says-so", True
    description = "the interpreter without its checkers, saying so (checks=False)"


class UncheckedSilently(Unchecked):
    name = "unchecked-silently"
    description = "the interpreter without its checkers, not saying so"


def install(root) -> str:
    """A directory that, on ``sys.path``/``PYTHONPATH``, is an installed distribution declaring
    the three backends under their names; returns it."""
    import pathlib
    import shutil
    root = pathlib.Path(root)
    info = root / "outside_backends-0.1.dist-info"
    info.mkdir(parents=True, exist_ok=True)
    shutil.copy(__file__, root / "outside_backends.py")
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: outside_backends\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[tessera_ref.backends]\nruns-nothing = outside_backends:RunsNothing\n"
        "unchecked-says-so = outside_backends:UncheckedSaysSo\n"
        "unchecked-silently = outside_backends:UncheckedSilently\n")
    return str(root)
