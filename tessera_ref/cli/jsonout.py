"""``--json``: one JSON document on stdout, its schema named first (SIM-CLI-2).

Every document is an object whose ``"schema"`` is ``"tessera-ref/<command>/<version>"``; the
version changes only when a key changes meaning or goes away (new keys may appear). While a
command that runs user code writes JSON, what that code prints goes to stderr, so stdout holds
the document alone.
"""
from __future__ import annotations

import contextlib
import json
import sys

__all__ = ["add_json_option", "emit", "schema", "prints_to_stderr"]


def schema(command: str, version: int = 1) -> str:
    """The schema name of ``command``'s JSON document."""
    return f"tessera-ref/{command}/{version}"


def add_json_option(parser, what: str) -> None:
    parser.add_argument("--json", action="store_true",
                        help=f"print {what} as one JSON document (schema in its \"schema\" key; "
                             "docs/spec/sim.md SIM-CLI-2); the program's own output goes to stderr")


def emit(command: str, payload: dict) -> None:
    """Print ``payload`` as the JSON document of ``command`` (schema first)."""
    print(json.dumps({"schema": schema(command), **payload}, indent=1))


def prints_to_stderr(active: bool):
    """While ``active``: what is printed goes to stderr (the JSON document owns stdout)."""
    return contextlib.redirect_stdout(sys.stderr) if active else contextlib.nullcontext()
