"""SCHED-FE: the schedule directives, seed 001's pipeline form, `@op.kernel` and the lower IR
levels of `@jit` functions."""
import threading

import numpy as np
import pytest

import tessera_ref as t
from tessera_ref import backends, op, schedule, tile
from tessera_ref.errors import BackendError, KernelError, LoweringError, OpError, TraceError
from tessera_ref.ir import parse_module
from tessera_ref.ir import schedule as S
from tessera_conformance import ORACLE, assert_bits, clause, run, unsupported

from ..tiles.support import fma_chain, line_of
from .support import findings, sixteenths

RNG = np.random.default_rng(5)


@pytest.fixture(autouse=True)
def _no_top_level_directives():
    schedule.reset()
    yield
    schedule.reset()


def call(backend, f, *args, **kw):
    """``f(*args)`` on ``backend``; a refused program is unsupported there."""
    try:
        with backends.use(backend):
            return f(*args, **kw)
    except BackendError as exc:
        unsupported(backend, exc)


def scheduled(text) -> dict:
    """``{op: schedule}`` of the kernels of a Schedule IR text."""
    ks = [o for o in parse_module(text).walk() if o.name == S.KERNEL]
    return {k.attributes["op"]: {a: (list(v) if isinstance(v, (list, tuple)) else v) for a, v in k.attributes.items()}
            for k in ks}


def _arrays(*shapes):
    return [sixteenths(RNG, s) for s in shapes]


@clause("SCHED-FE-1")
def test_directives_in_a_body_apply_to_every_op_each_family_its_own(backend):
    @op.kernel
    def f(A, B):
        schedule.tile((16, 16, 16))
        schedule.lanes(64)
        schedule.vectorize(2)
        schedule.pipeline_stages(3)
        return A @ B + 1.0

    a, b = _arrays((32, 48), (48, 32))
    got = call(backend, f, a, b)
    s = scheduled(f.inspect_ir("schedule"))
    assert {k: s["matmul"][k] for k in ("tile", "lanes", "stages", "vectorize")} == \
        dict(tile=[16, 16, 16], lanes=64, stages=3, vectorize=1)
    assert {k: s["add"][k] for k in ("lanes", "vectorize", "stages")} == dict(lanes=64, vectorize=2, stages=1)
    assert_bits(np.asarray(got.data), (fma_chain(a, b) + 1).astype(np.float32))
    assert schedule.defaults() == {}  # a body's directives stay in the kernel


@clause("SCHED-FE-1")
def test_top_level_directives_are_defaults_until_reset(backend):
    schedule.tile((16, 16, 8))
    schedule.use_shared_memory(True, padding=2)
    assert schedule.defaults() == {"tile": [16, 16, 8], "shared": True, "padding": 2}

    @op.kernel
    def mm(A, B):
        schedule.pipeline_stages(3)  # the body adds to the defaults
        return A @ B
    a, b = _arrays((32, 32), (32, 32))
    call(backend, mm, a, b)
    assert {k: scheduled(mm.inspect_ir("schedule"))["matmul"][k] for k in ("tile", "padding", "stages")} == \
        dict(tile=[16, 16, 8], padding=2, stages=3)
    schedule.reset()
    assert schedule.defaults() == {}

    @op.kernel
    def mm2(A, B):
        return A @ B
    call(backend, mm2, a, b)
    assert scheduled(mm2.inspect_ir("schedule"))["matmul"]["tile"] == [32, 32, 32]


@clause("SCHED-FE-1")
def test_the_defaults_belong_to_the_thread_that_sets_them():
    schedule.vectorize(4)
    seen = {}

    def other():
        seen["start"] = schedule.defaults()
        schedule.tile((8,))
        seen["set"] = schedule.defaults()
    th = threading.Thread(target=other)
    th.start()
    th.join()
    assert seen == {"start": {}, "set": {"tile": [8]}}
    assert schedule.defaults() == {"vectorize": 4}


@clause("SCHED-FE-1")
@pytest.mark.parametrize("directive", [
    lambda: schedule.tile((16, 0, 16)), lambda: schedule.vectorize(0), lambda: schedule.lanes(-32),
    lambda: schedule.pipeline_stages(0), lambda: schedule.use_shared_memory(True, padding=-1),
    lambda: schedule.tile((16, 1.5))])
def test_a_non_positive_size_or_negative_padding_is_a_kernel_error(directive):
    with pytest.raises(KernelError):
        directive()
    assert schedule.defaults() == {}


@clause("SCHED-FE-2")
def test_seed_001_pipeline_in_a_kernel_body_is_kernel_wide(backend):
    @op.kernel
    def gemm(A, B, D):
        with schedule.pipeline(double_buffer=True):
            A_tile = schedule.prefetch(A, scope="shared")
            B_tile = schedule.prefetch(B, scope="shared")
            C_tile = tile.mma_sync(A_tile, B_tile)
        return schedule.mma_sync(C_tile, D)  # after the block: staged too

    a, b, d = _arrays((32, 16), (16, 32), (32, 16))
    got = call(backend, gemm, a, b, d)
    text = gemm.inspect_ir("schedule")
    assert text.count('"tessera.schedule.prefetch"') == 4 and "double_buffer = true" in text
    for s in [o.attributes for o in parse_module(text).walk() if o.name == S.KERNEL]:
        assert (s["shared"], s["async_copy"], s["stages"]) == (True, True, 2)
    ab = fma_chain(a, b).astype(np.float32)
    assert_bits(np.asarray(got.data), fma_chain(ab, d).astype(np.float32))
    assert all(findings(backend, r) == [] for r in gemm.reports)


@clause("SCHED-FE-2")
@pytest.mark.parametrize("kw, stages", [(dict(double_buffer=True), 2), (dict(double_buffer=False), 1),
                                        (dict(stages=3), 3)])
def test_a_top_level_pipeline_sets_the_defaults_for_its_block(backend, kw, stages):
    a, b = _arrays((32, 16), (16, 32))

    @op.kernel
    def inside(A, B):
        return A @ B

    @t.jit
    def inspected(A, B):
        return op.matmul(A, B)
    inspected(a, b)
    with schedule.pipeline(**kw):
        assert schedule.defaults() == {"shared": True, "async_copy": True, "stages": stages}
        C_tile = tile.mma_sync(schedule.prefetch(a, scope="shared"), b)  # seed 001 at top level: op.matmul
        call(backend, inside, a, b)
        jit_text = inspected.inspect_ir("schedule")
    assert schedule.defaults() == {}
    assert_bits(np.asarray(C_tile.data), fma_chain(a, b).astype(np.float32))
    for text in (inside.inspect_ir("schedule"), jit_text):
        assert scheduled(text)["matmul"]["stages"] == stages and scheduled(text)["matmul"]["async_copy"]
    assert scheduled(inspected.inspect_ir("schedule"))["matmul"]["stages"] == 2  # the family's default again


@clause("SCHED-FE-2")
def test_prefetch_returns_its_operand_and_checks_its_scope():
    x = np.ones(3, np.float32)
    assert schedule.prefetch(x, scope="shared") is x and schedule.prefetch(x, scope="register") is x
    with pytest.raises(KernelError, match="scope"):
        schedule.prefetch(x, scope="global")


@clause("SCHED-FE-2", "TILE-FE-1")
def test_mma_sync_is_op_matmul_outside_a_kernel(backend):
    a = (RNG.standard_normal((16, 64)) * 10.0 ** RNG.integers(-3, 4, (16, 64))).astype(np.float32)
    b = RNG.standard_normal((64, 8)).astype(np.float32)
    want = run(ORACLE, lambda a, b: op.matmul(a, b), a, b)
    assert_bits(run(backend, lambda a, b: tile.mma_sync(a, b), a, b), want)
    assert_bits(run(backend, lambda a, b: schedule.mma_sync(a, b), a, b), want)


@clause("SCHED-FE-3")
def test_op_kernel_traces_once_per_signature_and_runs_the_tile_kernels(backend):
    traced = []

    @op.kernel
    def f(A, B):
        traced.append(A.type if hasattr(A, "type") else None)
        schedule.tile((16, 16, 16))
        return op.softmax(A @ B), A + 2.0

    a, b = _arrays((32, 48), (48, 32))
    y, z = call(backend, f, a, b)
    call(backend, f, a * 2, b)
    assert len(traced) == 1
    call(backend, f, a[:16], b)
    assert len(traced) == 2
    y, z = call(backend, f, a, b)
    ref = f.reference(a, b)
    assert_bits(np.asarray(y.data), ref[0])
    assert_bits(np.asarray(z.data), (a + np.float32(2)).astype(np.float32))
    assert_bits([np.asarray(y.data), np.asarray(z.data)], run(ORACLE, lambda a, b: (op.softmax(op.matmul(a, b)),
                                                                                   a + 2.0), a, b))
    assert len(f.reports) == 3 and all(findings(backend, r) == [] for r in f.reports)  # matmul, softmax, add
    for level, mark in (("graph", '"tessera.graph.softmax"'), ("schedule", '"tessera.schedule.kernel"'),
                        ("tile", '"tessera.tile.mma"'), ("target", "__global__")):
        assert mark in f.inspect_ir(level)


@clause("SCHED-FE-3")
def test_parameters_assigned_whole_are_results_and_written_back(backend):
    @op.kernel
    def vec_add(A, B, C):
        schedule.vectorize(4)
        C[:] = A + B

    @op.kernel
    def both(A, B, C):
        C[:] = A * B
        return A - B

    a, b = _arrays((8, 64), (8, 64))
    c = np.zeros((8, 64), np.float32)
    out = call(backend, vec_add, a, b, c)
    assert_bits(c, a + b)
    assert_bits(np.asarray(out.data), a + b)
    c = np.zeros((8, 64), np.float32)
    first, second = call(backend, both, a, b, c)
    assert_bits([np.asarray(first.data), np.asarray(second.data), c], [a - b, a * b, a * b])


@clause("SCHED-FE-3")
def test_op_kernel_errors(backend):
    @op.kernel
    def partial(A, B):
        B[1:] = A[1:]

    @op.kernel
    def nothing(A):
        schedule.tile((4,))

    x = np.ones((4, 8), np.float32)
    with pytest.raises(KernelError, match="whole"):
        call(backend, partial, x, x.copy())
    with pytest.raises(TraceError):
        call(backend, nothing, x)


def _jitted(backend, fn, *args):
    g = t.jit(fn, backend=backend)
    try:
        g(*args)
    except BackendError as exc:
        unsupported(backend, exc)
    return g


@clause("SCHED-FE-4")
def test_jit_inspect_ir_lowers_the_last_optimized_trace(backend):
    g = _jitted(backend, lambda a, b: op.softmax(op.matmul(a, b), axis=-1), *_arrays((16, 32), (32, 16)))
    g(*_arrays((32, 64), (64, 32)))
    schedule.tile((8, 8, 8))
    with backends.use(backend):
        sched, tile_text, target = (g.inspect_ir(level) for level in ("schedule", "tile", "target"))
    s = scheduled(sched)
    assert set(s) == {"matmul", "softmax"} and s["matmul"]["tile"] == [8, 8, 8]
    assert "tensor<32x64xf32>" in sched  # the latest trace
    assert tile_text.count('"tessera.func"') == 2 and str(parse_module(tile_text)) == tile_text
    assert target.count("__global__") == 2


def exp_then_sum(x):
    return op.sum(op.exp(x), axis=0)  # SCHED-FE-4 exp


@clause("SCHED-FE-4", "LOWER-FAMILY-1")
def test_ops_without_a_tile_lowering(backend):
    g = t.jit(exp_then_sum, backend=backend)
    with pytest.raises(TraceError):
        g.inspect_ir("tile")
    with pytest.raises(OpError, match="llvm"):
        g.inspect_ir("llvm")
    g = _jitted(backend, exp_then_sum, np.ones((4, 8), np.float32))
    with backends.use(backend):
        sched = g.inspect_ir("schedule")
        assert '"tessera.graph.exp"' in sched and 'op = "sum"' in sched
        for level in ("tile", "target"):
            with pytest.raises(LoweringError, match=r"tessera.graph.exp.*tensor<4x8xf32>.*" +
                               line_of(__file__, "# SCHED-FE-4 exp")):
                g.inspect_ir(level)
