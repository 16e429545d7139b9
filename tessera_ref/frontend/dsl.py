"""The Tessera DSL text of the programming guide (seed 004) -> Python source (TILE-FE-2).

The DSL is Python with three extensions, rewritten line by line (line numbers are kept, so
errors name the DSL line):

- ``y: mut f32[n]`` -> ``y: mut[f32[n]]``;
- ``cp_async.shared.global(...)`` -> ``cp_async.shared.global_(...)`` (``global`` is a
  Python keyword);
- Markdown code-fence lines (lines starting with three backquotes) become blank lines, so a
  guide's code block can be passed as it is.
"""
from __future__ import annotations

import re

__all__ = ["to_python"]

_MUT = re.compile(r"\bmut\s+([A-Za-z_][A-Za-z0-9_]*(?:\[[^\]]*\])?)")
_GLOBAL = re.compile(r"\.global\s*\(")


def to_python(text: str) -> str:
    """Python source for DSL ``text`` (same number of lines)."""
    lines = []
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            lines.append("")
            continue
        lines.append(_GLOBAL.sub(".global_(", _MUT.sub(r"mut[\1]", line)))
    return "\n".join(lines) + "\n"
