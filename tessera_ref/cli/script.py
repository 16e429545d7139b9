"""What ``run`` and ``sim`` share: a script path checked before anything runs, a clean error
line (the full traceback with ``--traceback``), and an output path checked up front."""
from __future__ import annotations

import os
import sys
import traceback

__all__ = ["script_problem", "output_problem", "add_traceback_option", "report_error"]


def script_problem(path: str) -> str | None:
    """Why ``path`` cannot be run as a Python script, or None."""
    if not os.path.exists(path):
        return f"no such file: {path}"
    if os.path.isdir(path):
        return f"{path} is a directory; give the Python file to run"
    if not os.access(path, os.R_OK):
        return f"cannot read {path} (permission denied)"
    return None


def output_problem(path: str) -> str | None:
    """Why a file cannot be written at ``path``, or None (checked before a long run)."""
    folder = os.path.dirname(os.path.abspath(path))
    if os.path.isdir(path):
        return f"{path} is a directory; give a file name"
    if not os.path.isdir(folder):
        return f"cannot write {path}: the directory {folder} does not exist"
    if not os.access(folder, os.W_OK):
        return f"cannot write {path}: the directory {folder} is not writable"
    return None


def add_traceback_option(parser) -> None:
    parser.add_argument("--traceback", action="store_true",
                        help="on a Tessera error, print the full Python traceback too (default: one line)")


def report_error(error: BaseException, with_traceback: bool) -> int:
    """Print ``error`` of a script to stderr: one line for a Tessera error (its traceback with
    ``with_traceback``), the traceback for any other exception; returns the exit status 1."""
    from ..errors import TesseraError

    if with_traceback or not isinstance(error, TesseraError):
        traceback.print_exception(error, file=sys.stderr)
    if isinstance(error, TesseraError):
        print(f"error: {type(error).__name__}: {error}", file=sys.stderr)
    return 1
