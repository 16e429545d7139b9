"""SCHED-*: the Schedule IR dialect, Graph -> Schedule lowering and the ``schedule`` front end."""
import numpy as np
import pytest
from lowering_helpers import assert_same_bits, bits

import tessera_ref as t
from tessera_ref import op, schedule
from tessera_ref.errors import KernelError, TraceError
from tessera_ref.ir import VerifyError, parse_module, verify
from tessera_ref.lowering import fit_schedule, graph_to_schedule, lower, run_schedule, schedule_to_tile

RNG = np.random.default_rng(3)

SEED_001_PREFETCH = '''"tessera.module"() ({
  "tessera.func"() ({
  ^bb0(%A: tensor<128x64xf32>, %B: tensor<64x128xf32>):
    %C = "tessera.schedule.kernel"(%A, %B) ({
    ^bb0(%a: tensor<128x64xf32>, %b: tensor<64x128xf32>):
      %smemA = "tessera.schedule.prefetch"(%a) {scope="shared", double_buffer=true} : (tensor<128x64xf32>) -> tensor<128x64xf32>
      %smemB = "tessera.schedule.prefetch"(%b) {scope="shared", double_buffer=true} : (tensor<64x128xf32>) -> tensor<64x128xf32>
      %c = "tessera.graph.matmul"(%smemA, %smemB) {transpose_a = false, transpose_b = false} : (tensor<128x64xf32>, tensor<64x128xf32>) -> tensor<128x128xf32>
      "tessera.schedule.yield"(%c) : (tensor<128x128xf32>) -> ()
    }) {async_copy = true, lanes = 128, op = "matmul", padding = 1, shared = true, stages = 2, swizzle = "none", tile = [64, 64, 32], vectorize = 1} : (tensor<128x64xf32>, tensor<64x128xf32>) -> tensor<128x128xf32>
    "tessera.return"(%C) : (tensor<128x128xf32>) -> ()
  }) {function_type = (tensor<128x64xf32>, tensor<64x128xf32>) -> tensor<128x128xf32>, sym_name = "gemm"} : () -> ()
}) : () -> ()'''


def _graph(fn, *args):
    g = t.jit(fn)
    g(*args)
    return g.trace(*args)


def test_seed_001_prefetch_text_parses_verifies_and_lowers():
    module = parse_module(SEED_001_PREFETCH)
    verify(module)
    text = str(module)
    assert 'double_buffer = true, scope = "shared"' in text
    assert str(parse_module(text)) == text  # printed form round-trips byte for byte
    a, b = RNG.standard_normal((128, 64)).astype(np.float32), RNG.standard_normal((64, 128)).astype(np.float32)
    (got,), reports = schedule_to_tile(module).run(a, b, checks=True)
    assert_same_bits([got], [np.asarray(op.matmul(a, b).data)])
    assert reports[0].counters.smem_wavefronts == reports[0].counters.smem_ideal_wavefronts  # padding=1


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


def test_fit_shrinks_tiles_to_divisors_and_drops_unused_directives():
    a = np.ones((96, 80), np.float32)
    graph = _graph(lambda a, b: op.matmul(a, b), a, a.T.copy())
    mm = graph.body.first_op.regions[0].entry.first_op
    s = fit_schedule(mm, dict(tile=(128, 128, 32), vectorize=4, shared=False))
    assert s["tile"] == [96, 96, 20] and s["vectorize"] == 1 and s["stages"] == 1 and not s["async_copy"]


# -- the front end (seed 003 and seed 001 forms) ----------------------------------------

@op.kernel
def vec_add(A, B, C):
    schedule.vectorize(4)   # load 4 elements per thread
    C[:] = A + B


@op.kernel
def matmul_plus(A, B, C):
    schedule.tile((128, 128, 32))
    schedule.use_shared_memory(True, padding=1)
    schedule.async_copy(True)
    return A @ B + C


@op.kernel
def pipelined(A, B):
    with schedule.pipeline(double_buffer=True):
        A_tile = schedule.prefetch(A, scope="shared")
        B_tile = schedule.prefetch(B, scope="shared")
        C_tile = schedule.mma_sync(A_tile, B_tile)
    return C_tile


def test_seed_003_vec_add_writes_its_output_parameter():
    A, B = RNG.standard_normal(1000).astype(np.float32), RNG.standard_normal(1000).astype(np.float32)
    C = np.zeros(1000, np.float32)
    out = vec_add(A, B, C)
    assert np.array_equal(C, A + B) and np.array_equal(np.asarray(out.data), C)
    assert 'vectorize = 4' in vec_add.inspect_ir("schedule")
    assert vec_add.reports[0].grid == (2,)  # 1000 elements / (128 lanes x 4)


def test_seed_003_matmul_with_smem_staging():
    A, B, C = (RNG.standard_normal((128, 128)).astype(np.float32) for _ in range(3))
    out = matmul_plus(A, B, C)
    assert_same_bits([np.asarray(out.data)], matmul_plus.reference(A, B, C))
    sched = matmul_plus.inspect_ir("schedule")
    assert 'padding = 1' in sched and 'tile = [128, 128, 32]' in sched and 'async_copy = true' in sched
    assert matmul_plus.reports[0].counters.smem_conflict_wavefronts == 0
    assert "NOT YET COMPILED" in matmul_plus.inspect_ir("target")


def test_seed_001_pipeline_prefetch_mma_sync():
    A, B = RNG.standard_normal((64, 32)).astype(np.float32), RNG.standard_normal((32, 64)).astype(np.float32)
    out = pipelined(A, B)
    assert_same_bits([np.asarray(out.data)], pipelined.reference(A, B))
    sched = pipelined.inspect_ir("schedule")
    assert sched.count('"tessera.schedule.prefetch"') == 2 and 'double_buffer = true, scope = "shared"' in sched
    assert "tessera.tile.cp_async_wait" in pipelined.inspect_ir("tile")


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
