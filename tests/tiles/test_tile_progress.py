"""TILE-EXEC-2: a long launch reports its progress on stderr; a short one says nothing."""
import io
import re

import numpy as np

from tessera_ref import kernel
from tessera_ref.interp.tile import progress as P


class FakeClock:
    """A clock that advances ``step`` seconds at every reading."""

    def __init__(self, step):
        self.now, self.step = 0.0, step

    def __call__(self):
        self.now += self.step
        return self.now


def test_progress_lines_every_interval_with_an_estimate_of_the_time_left():
    out = io.StringIO()
    p = P.Progress("k", 10, every=5.0, stream=out, clock=FakeClock(2.0))  # start reads 2 s
    for done in range(1, 11):
        p.tick(done)  # the clock reads 4, 6, 8, ... 22 s
    # 6 s is 4 s after the start (quiet); 8 s is 6 s in: tile 3 of 10, 2 s per tile -> 14 s left;
    # the next line 5 s or more later, at 14 s (tile 6: 12 s elapsed, 8 s left); tile 10 ends it
    assert out.getvalue().splitlines() == [
        "tessera: kernel k: tile 3/10 (30%), 6 s elapsed, about 14 s left",
        "tessera: kernel k: tile 6/10 (60%), 12 s elapsed, about 8 s left",
        "tessera: kernel k: tile 9/10 (90%), 18 s elapsed, about 2 s left",
    ]


FILL = kernel.from_source('''
@kernel
def fill(Y: mut f32[n]):
    i = tile.linear_id()
    if i < n:
        Y[i] = 1.0
''')


def test_a_launch_reports_through_the_interpreter(monkeypatch, capsys):
    monkeypatch.setattr(P, "EVERY_SECONDS", 0.0)  # report after every tile
    y = np.zeros(96, np.float32)
    FILL(y, grid=3, lanes=32)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 2  # after tiles 1 and 2 (the end of tile 3 ends the launch)
    for line, (d, pct) in zip(err, ((1, 33), (2, 67))):
        assert re.fullmatch(rf"tessera: kernel fill: tile {d}/3 \({pct}%\), \d+ s elapsed, about \d+ s left", line)
    assert (y == 1.0).all()


def test_a_short_launch_is_quiet(capsys):
    y = np.zeros(64, np.float32)
    FILL(y, grid=2, lanes=32)
    assert capsys.readouterr().err == "" and (y == 1.0).all()
