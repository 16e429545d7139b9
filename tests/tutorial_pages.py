"""The tutorials' code and output blocks (tests/test_tutorials.py checks them).

A page's ```python blocks are its code: they run in order, as one script, in an empty
directory. A ```text block that follows a python block with only prose between them is that
block's *output*: what the block prints, all of it. Any other ```text block says what it is
on the line just above its fence:

- ``<!-- output of: COMMAND -->``: lines printed by a shell command (``tessera-ref …`` or
  ``python …``, run from the repository root), shown as an excerpt — its lines appear, in a
  run, together and in that order;
- ``<!-- not checked: REASON -->``: output the tests cannot reproduce (REASON says why).

Before comparing, both sides are normalized in only what must vary between runs and
machines: the directory the page runs in is removed from paths (``/tmp/…/block.py`` reads
``block.py``), hexadecimal addresses of 8 digits or more read ``0x…``, and spaces at the
ends of lines and blank lines at the end are dropped. No page prints a wall-clock time.

``python tests/tutorial_pages.py PAGE.md …`` runs pages and rewrites their output blocks with
what the code printed (normalized); ``--times`` prints each block's CPU seconds instead.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import re
import shlex
import subprocess
import sys
import tempfile
import traceback
import types
from dataclasses import dataclass

ROOT = pathlib.Path(__file__).resolve().parents[1]
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.S | re.M)
_MARK = re.compile(r"<!--\s*(output of|not checked):\s*(.*?)\s*-->[ \t]*\n\Z")
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{8,}")
#: Printed by the runner between two blocks' output.
SEPARATOR = "\x1e-- tutorial block --\x1e"


@dataclass
class Block:
    """A fenced block of a page: ``lang`` (``python``, ``text``, …), its ``body`` and where
    that body starts and ends in the page; ``line`` is the fence's line. ``role`` is ``code``,
    ``output`` (of code block number ``code``), ``command`` (the output of ``command``),
    ``unchecked`` or ``other``."""

    lang: str
    body: str
    start: int
    end: int
    line: int
    role: str = "other"
    code: int | None = None
    command: str | None = None


def read_page(text: str) -> list[Block]:
    """The fenced blocks of ``text`` with their roles; a ```text block that is neither output
    nor marked is a ValueError naming its line."""
    blocks, previous_end, after_code = [], 0, None
    for match in _FENCE.finditer(text):
        lang = match.group(1).strip()
        block = Block(lang, match.group(2), match.start(2), match.end(2), text.count("\n", 0, match.start()) + 1)
        mark = _MARK.search(text, previous_end, match.start())
        if lang == "python":
            block.role, block.code = "code", sum(b.role == "code" for b in blocks)
        elif lang == "text" and mark is not None:
            block.role = "command" if mark.group(1) == "output of" else "unchecked"
            block.command = mark.group(2)
        elif lang == "text" and after_code is not None:
            block.role, block.code = "output", after_code
        elif lang == "text":
            raise ValueError(f"line {block.line}: a ```text block that follows no python block needs "
                             "<!-- output of: COMMAND --> or <!-- not checked: REASON --> on the line above it")
        after_code = block.code if block.role == "code" else None
        previous_end = match.end()
        blocks.append(block)
    return blocks


def normalize(text: str, workdir: str | None = None) -> str:
    """``text`` with what varies between runs made equal (see the module docstring)."""
    if workdir:
        text = text.replace(workdir.rstrip("/") + "/", "")
    text = _ADDRESS.sub("0x…", text)
    return "\n".join(line.rstrip() for line in text.rstrip().splitlines())


def run_page(path: pathlib.Path, workdir: pathlib.Path, timeout: float = 900) -> tuple[list, str, int]:
    """Run ``path``'s code in ``workdir``, written there as one script (its blocks joined by a
    newline), block by block: ``(outputs, stderr, status)``, ``outputs`` holding ``(what the
    block printed, its CPU seconds)`` for each code block that ran."""
    code = [b.body for b in read_page(path.read_text()) if b.role == "code"]
    script = workdir / f"{path.stem}.py"
    script.write_text("\n".join(code))
    sizes = ",".join(str(body.count("\n") + 1) for body in code)
    done = subprocess.run([sys.executable, __file__, "--run", str(script), "--lines", sizes], cwd=workdir,
                          capture_output=True, text=True, timeout=timeout)
    *outputs, times = done.stdout.split(SEPARATOR + "\n")
    return [(out, float(t)) for out, t in zip(outputs, json.loads(times or "[]"))], done.stderr, done.returncode


def run_command(command: str, timeout: float = 900) -> str:
    """What ``command`` (``tessera-ref …`` or ``python …``) prints, stdout and stderr in one
    stream, run from the repository root."""
    words = shlex.split(command)
    head = {"tessera-ref": [sys.executable, "-m", "tessera_ref"], "python": [sys.executable]}[words[0]]
    done = subprocess.run(head + words[1:], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    return done.stdout


def _cpu_seconds() -> float:
    """CPU seconds of this process and the children it waited for (a busy machine's wall
    clock says little)."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def _run_blocks(script: pathlib.Path, sizes: list[int]) -> int:
    """Execute ``script`` as ``__main__``, block by block (``sizes``: each block's lines, the
    joining newline included), each compiled at its own lines so that tracebacks and source
    locations are the script's; SEPARATOR is printed after each block, their CPU seconds at the end."""
    lines = script.read_text().split("\n")
    module = types.ModuleType("__main__")
    module.__file__ = str(script)
    module.__builtins__ = __builtins__
    sys.modules["__main__"] = module
    sys.argv = [str(script)]
    sys.path[0] = str(script.parent)
    times, line = [], 0
    for size in sizes:
        code = compile("\n" * line + "\n".join(lines[line:line + size]), str(script), "exec")
        start = _cpu_seconds()
        try:
            exec(code, module.__dict__)
        except BaseException:  # noqa: BLE001 - the page's own error, reported with its traceback
            traceback.print_exc()
            sys.stdout.flush()
            return 1
        finally:
            sys.stdout.flush()
        times.append(_cpu_seconds() - start)
        print(SEPARATOR, flush=True)
        line += size
    print(json.dumps(times), end="", flush=True)
    return 0


def _rewrite(path: pathlib.Path) -> None:
    """Rewrite the output blocks of ``path`` with what its code prints."""
    text = path.read_text()
    blocks = read_page(text)
    with tempfile.TemporaryDirectory() as tmp:
        outputs, stderr, status = run_page(path, pathlib.Path(tmp))
        if status:
            sys.exit(f"{path}: the code failed\n{stderr}")
        for block in sorted((b for b in blocks if b.role == "output"), key=lambda b: -b.start):
            text = text[:block.start] + normalize(outputs[block.code][0], tmp) + "\n" + text[block.end:]
    path.write_text(text)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("pages", nargs="+", type=pathlib.Path)
    parser.add_argument("--times", action="store_true", help="print each code block's CPU seconds; change nothing")
    parser.add_argument("--run", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--lines", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.run:
        return _run_blocks(args.pages[0], [int(n) for n in args.lines.split(",")])
    for path in args.pages:
        if args.times:
            with tempfile.TemporaryDirectory() as tmp:
                outputs, stderr, status = run_page(path, pathlib.Path(tmp))
            lines = [b.line for b in read_page(path.read_text()) if b.role == "code"]
            print(f"{path}: CPU seconds of the block at " +
                  ", ".join(f"line {n}: {t:.1f}" for n, (_, t) in zip(lines, outputs)))
        else:
            _rewrite(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
