"""Every tutorial in docs/tutorials, and the README, runs as written and prints what the page
shows (issue 31: a test that only checked the exit status let docs/tutorials/cuda_report.md
show other register counts than its code printed).

How a page marks code, output and other blocks, and what is normalized before comparing —
only what must vary: the directory the page runs in (removed from paths), hexadecimal
addresses of 8 digits or more, spaces at line ends — is in tests/tutorial_pages.py, which also
rewrites a page's output blocks from a real run: ``python tests/tutorial_pages.py PAGE.md``.
All of it takes about 70 s of CPU with empty kernel caches, the `tessera-ref demo` run that
where_does_my_step_time_go.md quotes included (``--times`` prints each block's CPU seconds).
"""
import difflib
import pathlib

import pytest

from tutorial_pages import ROOT, normalize, read_page, run_command, run_page

PAGES = sorted((ROOT / "docs" / "tutorials").glob("*.md")) + [ROOT / "README.md"]


def test_there_are_tutorials_and_each_marks_its_blocks():
    assert len(PAGES) > 1, "docs/tutorials has no tutorials"
    for path in PAGES:
        blocks = read_page(path.read_text())  # a ValueError names an unmarked ```text block
        assert any(b.role == "code" for b in blocks), f"{path.name} has no python blocks"


def test_a_page_marks_what_each_text_block_is():
    page = ("```python\nprint(1)\n```\n\nprints\n\n```text\n1\n```\n\n<!-- output of: tessera-ref demo -->\n"
            "```text\nSHA\n```\n\n```bash\nls\n```\n\n<!--not checked: random-->\n```text\n?\n```\n")
    roles = [(b.role, b.code, b.command, b.body) for b in read_page(page)]
    assert roles == [("code", 0, None, "print(1)\n"), ("output", 0, None, "1\n"),
                     ("command", None, "tessera-ref demo", "SHA\n"), ("other", None, None, "ls\n"),
                     ("unchecked", None, "random", "?\n")]
    with pytest.raises(ValueError, match="line 9: a ```text block that follows no python block needs"):
        read_page("```python\nx = 1\n```\n\n```text\n1\n```\n\n```text\n2\n```\n")
    assert normalize("at /tmp/run/block.py:3, 0x61600000007c or 0x1f  \nnext \n\n", "/tmp/run") == \
        "at block.py:3, 0x… or 0x1f\nnext"


def _diff(want: str, got: str) -> str:
    return "\n".join(difflib.unified_diff(want.splitlines(), got.splitlines(), "page", "printed", lineterm=""))


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.stem)
def test_tutorial_prints_what_the_page_shows(path, tmp_path):
    blocks = read_page(path.read_text())
    outputs, stderr, status = run_page(path, tmp_path)
    code = [b for b in blocks if b.role == "code"]
    if status:
        failed = code[len(outputs)] if len(outputs) < len(code) else code[-1]
        pytest.fail(f"{path.name}: the block at line {failed.line} failed:\n{stderr[-3000:]}")
    assert len(outputs) == len(code)
    stale, printed_by = [], {}
    for block in blocks:
        if block.role == "output":
            got, want = normalize(outputs[block.code][0], str(tmp_path)), normalize(block.body)
            if got != want:
                stale.append(f"the output block at line {block.line}:\n{_diff(want, got)}")
        elif block.role == "command":
            if block.command not in printed_by:
                printed_by[block.command] = normalize(run_command(block.command)).splitlines()
            printed = printed_by[block.command]
            want = normalize(block.body).splitlines()
            start = max(range(max(len(printed) - len(want) + 1, 1)),
                        key=lambda i: sum(a == b for a, b in zip(printed[i:i + len(want)], want)))
            closest = "\n".join(printed[start:start + len(want)])
            if closest != "\n".join(want):
                stale.append(f"the block at line {block.line} is not in what `{block.command}` prints (the "
                             f"closest lines there):\n{_diff(chr(10).join(want), closest)}")
    assert not stale, (f"{path.name} shows other output than its code prints (`python tests/tutorial_pages.py "
                       f"{pathlib.Path(path).relative_to(ROOT)}` rewrites its output blocks; a command's excerpt "
                       "is copied from what the command prints):\n\n" + "\n\n".join(stale))
