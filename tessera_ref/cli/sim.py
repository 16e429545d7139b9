"""``tessera-ref sim``: the presets table, or a Python file run on a simulated machine (SIM-CLI-1)."""
from __future__ import annotations

import argparse
import os
import sys

from ..errors import SimError
from ..runner import run_path
from ..sim import Machine, last_used, plot, preset_card, presets_table, use
from .jsonout import add_json_option, emit, prints_to_stderr
from .script import add_traceback_option, output_problem, report_error, script_problem

__all__ = ["add_parser", "run"]

DEFAULT_PRESET = "GB200-NVL72"


def add_parser(sub) -> argparse.ArgumentParser:
    """Add ``sim`` to the ``tessera-ref`` subparsers ``sub``; returns its parser."""
    p = sub.add_parser("sim", help="run a Python file on a simulated GPU machine and print its report; "
                                   "--presets prints the hardware presets",
                       description="Run FILE (where `import tessera` means tessera_ref) with a simulated machine "
                                   "current, then print the machine's report: memory, compute and communication "
                                   "per device, step time, top ops. The script may make its own machine with "
                                   "`with sim.use(...)`; then that one is reported.")
    p.add_argument("file", nargs="?", help="the Python file to run")
    p.add_argument("--presets", action="store_true", help="print the hardware presets (with --preset: one in full)")
    p.add_argument("--preset", help=f"the hardware preset (default {DEFAULT_PRESET}); see --presets")
    p.add_argument("--devices", type=int, help="number of devices (default: one NVLink domain of the preset)")
    p.add_argument("--trace", metavar="OUT.json", help="write the timeline as a Chrome trace (open in ui.perfetto.dev)")
    p.add_argument("--plot", metavar="DIR", help="write memory.png, roofline.png and timeline.png of the last machine "
                                                 "reported into DIR (needs matplotlib: the plot extra)")
    add_json_option(p, "the machines' numbers (Machine.summary())")
    add_traceback_option(p)
    return p


def _recorded(m: Machine) -> bool:
    return bool(m.timeline.events) or any(m.memory.peak(d) for d in range(m.n_devices))


def _plot_problem(directory: str) -> str | None:
    """Why figures cannot be written into ``directory``, or None (checked before the run)."""
    try:
        import matplotlib  # noqa: F401 - only its presence is checked here
    except ImportError:
        return 'plots need matplotlib: pip install "tessera_ref[plot]" (or pip install matplotlib)'
    if not os.path.isdir(directory):
        return f"cannot write figures into {directory}: not a directory (create it first)"
    return None


def run(args: argparse.Namespace) -> int:
    """Carry out ``tessera-ref sim`` for the parsed ``args``; returns the exit status."""
    try:
        if args.presets:
            print(preset_card(args.preset) if args.preset else presets_table())
            return 0
        if not args.file:
            print("tessera-ref sim: give a FILE to run, or --presets", file=sys.stderr)
            return 2
        machine = Machine(args.preset or DEFAULT_PRESET, args.devices)
    except SimError as e:
        print(f"tessera-ref sim: {e.what}. Fix: {e.fix}", file=sys.stderr)
        return 2
    problem = (script_problem(args.file) or (args.trace and output_problem(args.trace))
               or (args.plot and _plot_problem(args.plot)))
    if problem:
        print(f"tessera-ref sim: {problem}", file=sys.stderr)
        return 2
    status, error, namespace = 0, None, None
    with use(machine), prints_to_stderr(args.json):
        try:
            namespace = run_path(args.file)  # kept until the report: "HBM live" = what the script holds at its end
        except Exception as e:  # noqa: BLE001 - the report still prints; the error follows it
            status, error = 1, e
    machines = [m for m in dict.fromkeys([machine, last_used()]) if m is not None and _recorded(m)] or [machine]
    if not args.json:
        for m in machines:
            print(m.report())
    if args.trace:
        machines[-1].save_trace(args.trace)
        print(f"\ntrace of {machines[-1]!r} written to {args.trace} (open it in https://ui.perfetto.dev)",
              file=sys.stderr if args.json else sys.stdout)
    if args.plot:
        paths = plot(machines[-1], args.plot)
        print(f"figures of {machines[-1]!r} written: {', '.join(paths.values())}",
              file=sys.stderr if args.json else sys.stdout)
    if args.json:
        emit("sim", {"file": args.file, "machines": [m.summary().as_dict() for m in machines],
                     "trace": args.trace,
                     "error": None if error is None else {"type": type(error).__name__, "message": str(error)}})
    if error is not None:
        print(file=sys.stderr)
        report_error(error, args.traceback)
    del namespace
    return status
