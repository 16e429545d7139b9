"""SCHED-*: the Schedule IR dialect, Graph -> Schedule lowering and the ``schedule`` front end."""
import numpy as np
import pytest
from lowering_helpers import bits
from schedule_helpers import SEED_001_PREFETCH

import tessera_ref as t
from tessera_ref import op, schedule
from tessera_ref.errors import KernelError, LoweringError, TraceError
from tessera_ref.ir import VerifyError, parse_module, verify
from tessera_ref.lowering import fit_schedule, graph_to_schedule, lower, run_schedule, schedule_to_tile

RNG = np.random.default_rng(3)


def _graph(fn, *args):
    g = t.jit(fn)
    g(*args)
    return g.trace(*args)


def test_schedule_and_tile_text_round_trip():
    a = RNG.standard_normal((64, 64)).astype(np.float32)
    program = lower(_graph(lambda a, b: op.softmax(op.matmul(a, b)), a, a), dict(tile=(32, 32, 16), stages=3))
    for module in (program.schedule, program.tile):
        text = str(module)
        again = parse_module(text)
        verify(again)
        assert str(again) == text
    assert str(schedule_to_tile(parse_module(str(program.schedule))).tile) == str(program.tile)


def test_schedule_ir_runs_with_graph_semantics():
    a = RNG.standard_normal((32, 48)).astype(np.float32)
    g = t.jit(lambda a, b: op.mean(op.matmul(a, b) + 1.0, axis=0))
    want = np.asarray(g(a, a.T.copy()).data)
    got = run_schedule(graph_to_schedule(g.trace(a, a.T.copy()), dict(tile=(16, 16, 16))), a, a.T.copy())
    assert np.array_equal(bits(got[0]), bits(want))


@pytest.mark.parametrize("mutate,message", [
    (lambda s: s.replace("stages = 2", "stages = 0"), "stages"),
    (lambda s: s.replace("swizzle = \"none\", ", ""), "swizzle"),
    (lambda s: s.replace('scope="shared"', 'scope="global"', 1), "scope"),
])
def test_verifier_rejects_malformed_schedules(mutate, message):
    with pytest.raises(VerifyError, match=message):
        verify(parse_module(mutate(SEED_001_PREFETCH)))


def test_the_dialect_is_closed():
    for name in ("stage", "loop"):
        module = parse_module(SEED_001_PREFETCH.replace('"tessera.schedule.prefetch"(%a)',
                                                         f'"tessera.schedule.{name}"(%a)'))
        with pytest.raises(VerifyError, match=f"unknown op: tessera.schedule has no op '{name}'.*"
                                              "has the ops kernel, prefetch, yield"):
            verify(module)
        with pytest.raises(VerifyError, match="unknown op"):
            schedule_to_tile(module)


def test_fit_shrinks_tiles_to_divisors_and_drops_unused_directives():
    a = np.ones((96, 80), np.float32)
    graph = _graph(lambda a, b: op.matmul(a, b), a, a.T.copy())
    mm = graph.body.first_op.regions[0].entry.first_op
    s = fit_schedule(mm, dict(tile=(128, 128, 32), vectorize=4, shared=False))
    assert s["tile"] == [96, 96, 20] and s["vectorize"] == 1 and s["stages"] == 1 and not s["async_copy"]


# -- the front end (the seeds' own forms are in test_seed_schedules.py) --------------------

def test_top_level_directives_are_defaults_until_reset():
    try:
        schedule.tile((16, 16, 16))
        schedule.pipeline_stages(3)
        assert schedule.defaults() == {"tile": [16, 16, 16], "stages": 3}

        @op.kernel
        def mm(A, B):
            return A @ B
        A = np.ones((32, 32), np.float32)
        mm(A, A)
        assert 'stages = 3' in mm.inspect_ir("schedule") and 'tile = [16, 16, 16]' in mm.inspect_ir("schedule")
    finally:
        schedule.reset()
    assert schedule.defaults() == {}


def test_a_top_level_pipeline_block_sets_the_defaults_for_the_block_only():
    def mm(A, B):
        return A @ B
    A = np.ones((32, 32), np.float32)
    inside, after = op.kernel(mm), op.kernel(mm)
    with schedule.pipeline(stages=3):
        schedule.vectorize(2)  # a top-level directive in the block ends with it too
        assert schedule.defaults() == {"shared": True, "async_copy": True, "stages": 3, "vectorize": 2}
        inside(A, A)
    assert schedule.defaults() == {}
    after(A, A)
    assert 'stages = 3' in inside.inspect_ir("schedule") and 'stages = 3' not in after.inspect_ir("schedule")


def test_front_end_errors():
    with pytest.raises(KernelError, match="vectorize"):
        schedule.vectorize(0)
    with pytest.raises(KernelError, match="padding"):
        schedule.use_shared_memory(True, padding=-1)

    @op.kernel
    def nothing(A):
        schedule.tile((4,))
    with pytest.raises(TraceError, match="neither returns"):
        nothing(np.ones(4, np.float32))

    @op.kernel
    def partial(A, B):
        B[1:] = A
    with pytest.raises(KernelError, match="assigned whole"):
        partial(np.ones(4, np.float32), np.ones(4, np.float32))


# -- @jit functions show the levels below Graph IR ----------------------------------------

@t.jit
def matmul_softmax(a, b):
    return op.softmax(op.matmul(a, b), axis=-1)


def test_jit_inspect_ir_lowers_the_last_trace():
    a = RNG.standard_normal((64, 32)).astype(np.float32)
    b = RNG.standard_normal((32, 64)).astype(np.float32)
    matmul_softmax(a, b)
    sched = matmul_softmax.inspect_ir("schedule")
    kernels = [ln for ln in sched.splitlines() if '"tessera.schedule.kernel"' in ln]
    assert len(kernels) == 2 and '"tessera.graph.matmul"' in sched and '"tessera.graph.softmax"' in sched
    assert 'op = "matmul"' in sched and 'op = "softmax"' in sched
    tile = matmul_softmax.inspect_ir("tile")
    again = parse_module(tile)
    verify(again)
    assert str(again) == tile and tile.count('"tessera.func"') == 2
    target = matmul_softmax.inspect_ir("target")
    assert "Compiled by NVRTC" in target and target.count("__global__ void") == 2
    # the same text as lowering the optimized trace directly
    assert tile == str(lower(matmul_softmax.trace(a, b)).tile)


def test_jit_inspect_ir_errors():
    @t.jit
    def transpose_then_sum(x):
        return op.sum(op.transpose(x), axis=0)
    with pytest.raises(TraceError, match="has not been traced"):
        transpose_then_sum.inspect_ir("tile")
    transpose_then_sum(np.ones((4, 8), np.float32))
    line = transpose_then_sum.fn.__code__.co_firstlineno + 2  # the decorator, the def, then the op
    for level in ("tile", "target"):
        with pytest.raises(LoweringError, match=rf"'tessera.graph.transpose' has no tile lowering.*test_schedule.py:{line}\]"):
            transpose_then_sum.inspect_ir(level)
    sched = transpose_then_sum.inspect_ir("schedule")  # the transpose stays a Graph IR op; the sum is scheduled
    assert '"tessera.graph.transpose"' in sched and 'op = "sum"' in sched
    with pytest.raises(t.TesseraError, match="IR level 'llvm'"):
        transpose_then_sum.inspect_ir("llvm")
