"""TILE-FRAG-1 and TILE-COUNT-5: fragment layouts — a bijection checked by the verifier, the
same bits whoever owns an element, and counters that follow each lane's own accesses."""
from __future__ import annotations

import numpy as np
import pytest

from tessera_ref.errors import TesseraError
from tessera_ref.ir import tile as T
from tessera_ref.ir.fragment import TVLayout
from tessera_conformance import assert_bits, clause

from .support import counters, launch_module

ROWS = TVLayout((32,), (4,), (4,), (1,))  # lane l owns elements 4l .. 4l+3 of a [1, 128] fragment


def _copy(layout, cols=128):
    """Global X -> shared (lane stores) -> fragment under ``layout`` -> global Y."""
    kb = T.KernelBuilder("k", [("X", T.buffer((1, cols), "f32")), ("Y", T.buffer((1, cols), "f32"), True)])
    X, Y = kb.params
    s = kb.alloc((1, cols), "f32")

    def fill(i):
        e = kb.binary("add", kb.binary("mul", i, 32), kb.lane_id())
        kb.store(s, [0, e], kb.load(X, [0, e]))
        return []
    kb.for_(0, cols // 32, 1, body=fill)
    kb.barrier()
    kb.frag_store(Y, kb.frag_load(s, layout=layout), layout=layout)
    return kb.finish()


@clause("TILE-FRAG-1")
def test_a_layout_changes_no_value(backend):
    x = np.arange(128, dtype=np.float32)[None]
    for layout in (None, ROWS, TVLayout((32,), (1,), (4,), (32,))):
        y = np.zeros_like(x)
        launch_module(backend, _copy(layout), [x, y])
        assert_bits(y, x)


@clause("TILE-FRAG-1")
@pytest.mark.parametrize("layout", [TVLayout((32,), (4,), (4,), (2,)), TVLayout((32,), (4,), (2,), (1,))])
def test_a_layout_that_is_not_a_bijection_is_rejected(layout):
    with pytest.raises(TesseraError):
        _copy(layout)


@clause("TILE-COUNT-5")
def test_16_byte_pieces_per_lane_are_served_in_quarter_warp_phases(backend):
    """ROWS: one request of 16-byte accesses, 4 phases of 8 lanes, each 32 distinct banks;
    cyclic ownership as a layout: 4 requests of one word per lane, 1 wavefront each."""
    x = np.ones((1, 128), np.float32)
    base = counters(backend, launch_module(backend, _copy(None), [x, np.zeros_like(x)]))
    got = []
    for layout in (ROWS, TVLayout((32,), (1,), (4,), (32,))):
        c = counters(backend, launch_module(backend, _copy(layout), [x, np.zeros_like(x)]))
        got.append((c.smem_requests - base.smem_requests, c.smem_wavefronts - base.smem_wavefronts))
    # the cyclic default reads row-major, element j by lane j mod 32: 4 requests of 1 wavefront
    assert got == [(1 - 4, 4 - 4), (4 - 4, 4 - 4)]
