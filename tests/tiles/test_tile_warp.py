"""Warp shuffles (TILE-WARP-1): values, the divergence finding, verification, counters, the
front end and the CUDA text."""
import numpy as np
import pytest

from tessera_ref import kernel
from tessera_ref.backends.cuda.render import emit_cuda
from tessera_ref.errors import KernelError, TileBarrierError
from tessera_ref.interp.tile import run
from tessera_ref.ir import Operation, VerifyError, parse_module, verify
from tessera_ref.ir import tile as T
from tessera_ref.ir.types import TensorType
from tessera_ref.numerics import get_format


def _exchange(offset: int, fmt="f32", guard=None, location="w.py:7"):
    """y[lane] = shfl_xor(x[lane], offset), optionally under ``if lane < guard``."""
    kb = T.KernelBuilder("exchange", [("x", T.buffer(("n",), fmt)), ("y", T.buffer(("n",), fmt), True)],
                         location="w.py:1")
    x, y = kb.params
    lane = kb.lane_id()

    def body():
        kb.at(location)
        v = kb.shfl_xor(kb.load(x, [lane]), offset)
        kb.at("w.py:8")
        kb.store(y, [lane], v)
        return []
    if guard is None:
        body()
    else:
        kb.if_(kb.binary("lt", lane, guard), then=body)
    return kb.finish()


def _partner(lanes: int, offset: int) -> np.ndarray:
    """Lane l's partner, written out bit by bit (not with ^): bit b of the offset flips bit b of l."""
    out = []
    for lane in range(lanes):
        p = lane
        for b in range(5):
            if offset >> b & 1:
                p = p - (1 << b) if lane >> b & 1 else p + (1 << b)
        out.append(p)
    return np.array(out)


@pytest.mark.parametrize("offset", [1, 2, 4, 8, 16, 3, 31])
def test_each_lane_gets_the_value_of_its_xor_partner(offset):
    x = np.random.default_rng(offset).standard_normal(96).astype(np.float32)
    y = np.zeros(96, np.float32)
    report = run(_exchange(offset), [x, y], lanes=96)
    assert np.array_equal(y, x[_partner(96, offset)])
    assert report.findings == []
    c = report.counters
    assert c.shuffles == 3 and c.smem_requests == 0 and c.barriers == 0  # 3 warps, one SHFL each


def test_index_values_shuffle_too():
    kb = T.KernelBuilder("ids", [("y", T.buffer((64,), "f32"), True)])
    y, = kb.params
    lane = kb.lane_id()
    kb.store(y, [lane], kb.cast(kb.shfl_xor(lane, 5), "f32"))
    out = np.zeros(64, np.float32)
    run(kb.finish(), [out], lanes=64)
    assert out.tolist() == [float(p) for p in _partner(64, 5)]


def test_a_uniform_value_is_unchanged():
    kb = T.KernelBuilder("u", [("y", T.buffer((32,), "f32"), True)])
    y, = kb.params
    kb.store(y, [kb.lane_id()], kb.shfl_xor(kb.const(2.5, "f32"), 7))
    out = np.zeros(32, np.float32)
    run(kb.finish(), [out], lanes=32)
    assert (out == 2.5).all()


def test_a_shuffle_under_a_lane_varying_if_is_a_divergence_finding():
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    with pytest.raises(TileBarrierError, match=r"shfl_xor by 1.*not by lanes 16-31") as info:
        run(_exchange(1, guard=16), [x, y], lanes=64)
    assert info.value.location == "w.py:7"
    report = run(_exchange(1, guard=16), [x, y], lanes=64, on_error="collect")
    (finding,) = report.findings
    assert finding.kind == "barrier" and finding.lanes == tuple(range(16, 32)) and finding.location == "w.py:7"
    # the active lanes read partners that are active (l xor 1 < 16 for l < 16): values as usual
    assert np.array_equal(y[:16], x[_partner(16, 1)])


def test_a_whole_warp_masked_off_is_fine():
    """Lanes 0-31 take the if, warp 1 does not execute the shuffle at all: no finding."""
    x, y = np.arange(64, dtype=np.float32), np.zeros(64, np.float32)
    report = run(_exchange(16, guard=32), [x, y], lanes=64)
    assert report.findings == [] and report.counters.shuffles == 1
    assert np.array_equal(y[:32], x[_partner(32, 16)]) and (y[32:] == 0).all()


def test_a_partial_last_warp_is_a_finding_and_its_lanes_keep_their_values():
    x, y = np.arange(48, dtype=np.float32), np.zeros(48, np.float32)
    report = run(_exchange(16), [x, y], lanes=48, on_error="collect")
    (finding,) = report.findings
    assert finding.kind == "barrier" and finding.lanes == tuple(range(48, 64))
    assert np.array_equal(y[:32], x[_partner(32, 16)])
    assert np.array_equal(y[32:], x[32:])  # partners 48-63 do not exist


def _shfl_op(offset, operand_type):
    kb = T.KernelBuilder("v", [("x", T.buffer((4, 4), "f32"))])
    x, = kb.params
    value = x if isinstance(operand_type, TensorType) else kb.const(1.0, "f32")
    kb.op("shfl_xor", (value,), (value.type,), {} if offset is None else {"offset": offset})
    return kb.finish(check=False)


@pytest.mark.parametrize("offset,match", [(0, "offset must be 1 to 31"), (32, "offset must be 1 to 31"),
                                          (None, "needs attribute 'offset'")])
def test_the_verifier_checks_the_offset(offset, match):
    with pytest.raises(VerifyError, match=match):
        verify(_shfl_op(offset, None))


def test_the_verifier_refuses_buffers_and_fragments():
    with pytest.raises(VerifyError, match="exchanges a lane value"):
        verify(_shfl_op(1, T.buffer((4, 4), "f32")))


def test_the_verifier_checks_the_result_type():
    kb = T.KernelBuilder("r", [])
    v = kb.const(1.0, "f32")
    kb.block.append(Operation(T._name("shfl_xor"), (v,), (T.INDEX_T,), {"offset": 1}, ()))
    with pytest.raises(VerifyError, match="gives one value of the exchanged type f32"):
        kb.finish()


def test_the_text_round_trips_and_renders_as_the_header_shuffle():
    module = _exchange(8)
    text = str(module)
    assert '"tessera.tile.shfl_xor"' in text and str(parse_module(text)) == text
    assert "tsr_shfl_xor(" in emit_cuda(module) and ", 8);" in emit_cuda(module)


WARP_SUM = '''
@kernel
def warp_sum(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    p = x[i]
    p = p + tile.shfl_xor(p, 16)
    p = p + tile.shfl_xor(p, 8)
    p = p + tile.shfl_xor(p, 4)
    p = p + tile.shfl_xor(p, 2)
    p = p + tile.shfl_xor(p, 1)
    y[i] = p
'''


def test_a_kernel_writes_a_warp_butterfly_with_tile_shfl_xor():
    """Every lane gets the NUM-RED-2 butterfly sum of its warp, built here pairwise by hand."""
    k = kernel.from_source(WARP_SUM)
    x = np.random.default_rng(3).standard_normal(64).astype(np.float32) * 1e3
    y = np.zeros(64, np.float32)
    k(x, y, grid=1, lanes=64)
    for w in range(2):
        p = [np.float32(v) for v in x[32 * w:32 * w + 32]]
        for off in (16, 8, 4, 2, 1):
            p = [np.float32(p[lane] + p[lane ^ off]) for lane in range(32)]
        assert np.array_equal(y[32 * w:32 * w + 32], np.array(p, np.float32))


@pytest.mark.parametrize("call,match", [("tile.shfl_xor(p, 32)", "offset is a constant int from 1 to 31"),
                                        ("tile.shfl_xor(p, i)", "must be a compile-time constant"),
                                        ("tile.shfl_xor(p)", "takes 2 positional argument")])
def test_front_end_errors_name_the_line(call, match):
    src = f'''
@kernel
def bad(x: f32[n], y: mut[f32[n]]):
    i = tile.linear_id()
    p = x[i]
    y[i] = {call}
'''
    with pytest.raises(KernelError, match=match) as info:
        kernel.from_source(src).inspect_ir()
    assert info.value.location.endswith(":6")


def test_formats_other_than_f32_shuffle_bits_unchanged():
    x = np.arange(32, dtype=get_format("f16").dtype) - 7
    y = np.zeros(32, x.dtype)
    run(_exchange(2, fmt="f16"), [x, y], lanes=32)
    assert np.array_equal(y.view(np.uint16), x[_partner(32, 2)].view(np.uint16))
