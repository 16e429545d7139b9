"""Every tutorial in docs/tutorials, and the README, runs as written: its ```python blocks, in
order, as one script."""
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
TUTORIALS = sorted((ROOT / "docs" / "tutorials").glob("*.md"))


def test_there_are_tutorials():
    assert TUTORIALS, "docs/tutorials has no tutorials"


@pytest.mark.parametrize("path", TUTORIALS + [ROOT / "README.md"], ids=lambda p: p.stem)
def test_tutorial_runs_as_written(path, tmp_path):
    blocks = re.findall(r"^```python\n(.*?)^```", path.read_text(), re.S | re.M)
    assert blocks, f"{path.name} has no python blocks"
    script = tmp_path / f"{path.stem}.py"
    script.write_text("\n".join(blocks))
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
