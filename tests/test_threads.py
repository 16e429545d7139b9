"""Threads never see each other's ambient state (DESIGN §4, ``tessera_ref.context``).

Each scenario runs several threads at once (a barrier makes them overlap), many iterations
each, counts every leak — a value, machine, directive or message of another thread — and
asserts there are none and that every result has the bits of a single-threaded run.
"""
import sys
import threading

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import dist, op, schedule, sim
from tessera_ref.errors import CollectiveError
from tessera_ref.ir import verify
from tessera_ref.ops.values import Tracer

THREADS = 4
ITERATIONS = 100

X = np.linspace(-2.0, 2.0, 48, dtype=np.float32).reshape(6, 8)
W = np.linspace(0.5, 1.5, 64, dtype=np.float32).reshape(8, 8)


def _bits(x) -> bytes:
    return np.ascontiguousarray(np.asarray(x)).tobytes()


def run_threads(*workers) -> list:
    """Run each ``worker(barrier)`` in its own thread at once; returns their results. An
    exception in a worker is re-raised here. Threads switch every 10 µs, so they interleave
    finely."""
    barrier = threading.Barrier(len(workers))
    results, errors = [None] * len(workers), []

    def run(i, worker):
        try:
            results[i] = worker(barrier)
        except BaseException as e:  # noqa: BLE001 - re-raised in the test's thread
            barrier.abort()
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, w)) for i, w in enumerate(workers)]
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)
    try:
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(interval)
    if errors:
        raise errors[0]
    return results


# -- 1. tracing in one thread, eager ops in another -------------------------------------------

def _model(x, w):
    y = op.matmul(x, w)
    for k in range(8):
        y = op.tanh(y) * (0.5 + k)
    return op.sum(y, axis=1)


def _eager(x, w):
    return op.exp(op.matmul(x, w) * 0.25) - 1.0


def test_tracing_never_captures_another_threads_eager_ops():
    ref_value = _bits(tr.jit(_model)(X, W))
    ref_graph = tr.jit(_model)
    ref_graph(X, W)
    ref_text = ref_graph.inspect_ir("graph", optimized=False)
    ref_eager = _bits(_eager(X, W))

    def tracer(barrier):
        leaks = 0
        barrier.wait()
        for _ in range(ITERATIONS):
            f = tr.jit(_model)  # a new function: traced afresh every iteration
            try:
                value = f(X, W)
                module = f.trace(X, W)
                verify(module)
                leaks += f.inspect_ir("graph", optimized=False) != ref_text or _bits(value) != ref_value
            except Exception:  # noqa: BLE001 - a foreign op in the trace: counted as a leak
                leaks += 1
        return leaks

    def eager(barrier):
        leaks = 0
        barrier.wait()
        for _ in range(ITERATIONS * 4):
            try:
                y = _eager(X, W)
                leaks += isinstance(y, Tracer) or _bits(y) != ref_eager
            except Exception:  # noqa: BLE001 - an op recorded into another thread's trace
                leaks += 1
        return leaks

    leaks = run_threads(tracer, eager, tracer, eager)
    assert leaks == [0, 0, 0, 0]


# -- 2. a simulated machine per thread ----------------------------------------------------------

def _mesh():
    return dist.Mesh(("tp",), range(2), (2,))


def _reduce(mesh):
    shards = [X, W[:6] * 2.0]
    x = dist.from_shards(shards, dist.ShardSpec(None, ("tp",), reduce="sum"), mesh)
    return dist.all_reduce(x, axis="tp")


def _all_reduce_events(machine) -> int:
    return sum(1 for e in machine.timeline.events if e.args.get("kind") == "all_reduce")


def test_each_thread_records_on_its_own_machine():
    mesh = _mesh()
    single = sim.machine("H100", devices=2)
    with sim.use(single):
        ref = _bits(_reduce(mesh).numpy())
    per_call = _all_reduce_events(single)
    assert per_call > 0

    def worker(barrier):
        machine = sim.machine("H100", devices=2)
        leaks = 0
        barrier.wait()
        with sim.use(machine):
            for _ in range(ITERATIONS):
                leaks += sim.current() is not machine
                leaks += _bits(_reduce(mesh).numpy()) != ref
        leaks += sim.current() is not None
        return leaks, machine

    results = run_threads(*[worker] * THREADS)
    assert [leaks for leaks, _ in results] == [0] * THREADS
    assert [_all_reduce_events(m) for _, m in results] == [per_call * ITERATIONS] * THREADS
    assert sim.current() is None


def test_a_new_thread_starts_without_a_machine():
    with sim.use(sim.machine("H100", devices=2)):
        (seen,) = run_threads(lambda barrier: (sim.current(), sim.last_used()))
    assert seen == (None, None)


# -- 3. schedule directives per thread ----------------------------------------------------------

def _mm(a, b):
    return op.matmul(a, b)


A = np.ones((64, 64), np.float32)


def test_pipeline_restores_the_defaults():
    with schedule.pipeline(stages=3):
        assert schedule.defaults() == {"shared": True, "async_copy": True, "stages": 3}
    assert schedule.defaults() == {}


def test_one_threads_pipeline_never_changes_another_threads_ir():
    f = tr.jit(_mm)
    f(A, A)
    plain = f.inspect_ir("tile")
    with schedule.pipeline(stages=3):
        piped = f.inspect_ir("tile")
    assert plain != piped and schedule.defaults() == {}

    def pipelined(barrier):
        leaks = 0
        barrier.wait()
        for _ in range(ITERATIONS):
            with schedule.pipeline(stages=3):
                leaks += f.inspect_ir("tile") != piped
            leaks += schedule.defaults() != {}
        return leaks

    def unscheduled(barrier):
        leaks = 0
        barrier.wait()
        for _ in range(ITERATIONS):
            leaks += f.inspect_ir("tile") != plain or schedule.defaults() != {}
        return leaks

    assert run_threads(pipelined, unscheduled, pipelined, unscheduled) == [0] * 4
    assert schedule.defaults() == {}


def test_top_level_directives_hold_in_their_own_thread_only():
    def sets(barrier):
        schedule.tile((16, 16, 16))
        barrier.wait()
        barrier.wait()
        return schedule.defaults()

    def reads(barrier):
        barrier.wait()
        seen = schedule.defaults()
        barrier.wait()
        return seen

    assert run_threads(sets, reads) == [{"tile": [16, 16, 16]}, {}]
    assert schedule.defaults() == {}


# -- 4. send / recv ---------------------------------------------------------------------------

def _stages():
    mesh = dist.Mesh(("tp", "pp"), range(4), (2, 2))
    return mesh.sub(pp=0), mesh.sub(pp=1)


def _tensor(stage, value: float):
    return dist.tensor((2, 4), None, stage, data=np.full((2, 4), value, np.float32))


def test_threads_sending_on_one_pair_receive_their_own_tensors():
    s0, s1 = _stages()

    def worker(k):
        def run(barrier):
            leaks = 0
            barrier.wait()
            for i in range(ITERATIONS):
                mine = float(1000 * k + i)
                dist.send(_tensor(s0, mine), s1)
                dist.send(_tensor(s0, mine + 0.5), s1, tag=1)
                barrier.wait()  # every thread has sent before any receives
                got = dist.recv(s0, s1).numpy()
                got1 = dist.recv(s0, s1, tag=1).numpy()
                leaks += not (np.all(got == mine) and np.all(got1 == mine + 0.5))
            dist.check_pending()
            return leaks
        return run

    assert run_threads(*[worker(k) for k in range(THREADS)]) == [0] * THREADS


def test_an_unmatched_send_is_reported_at_the_end_of_its_scope_and_never_delivered():
    s0, s1 = _stages()

    def worker(barrier):
        reported = delivered = 0
        barrier.wait()
        for i in range(ITERATIONS):
            try:
                with dist.mailbox_scope():
                    dist.send(_tensor(s0, float(i)), s1)
            except CollectiveError as e:
                reported += "unmatched" in str(e) and "tag 0" in str(e)
            with dist.mailbox_scope():
                try:
                    dist.recv(s0, s1)
                    delivered += 1
                except CollectiveError:
                    pass
        return reported, delivered

    assert run_threads(*[worker] * THREADS) == [(ITERATIONS, 0)] * THREADS


def test_a_threads_top_level_mailbox_is_its_own():
    s0, s1 = _stages()

    def sends(barrier):
        dist.send(_tensor(s0, 1.0), s1)
        barrier.wait()
        barrier.wait()
        with pytest.raises(CollectiveError, match="unmatched"):
            dist.check_pending()

    def receives(barrier):
        barrier.wait()
        with pytest.raises(CollectiveError, match="no matching send"):
            dist.recv(s0, s1)
        barrier.wait()

    run_threads(sends, receives)
    dist.check_pending()  # the main thread's mailbox is empty


def test_dists_own_steps_never_touch_the_process_warning_filters():
    """A redistribution whose steps would warn (an all_reduce of a replicated operand inside a
    reduce_scatter) silences them for its own thread only, never through warnings.filters."""
    import warnings
    mesh = dist.Mesh(("dp", "tp"), range(4), (2, 2))
    x = dist.tensor((4, 4), dist.ShardSpec(("row",), ("dp", "tp"), reduce="sum"), mesh,
                    data=np.ones((4, 4), np.float32))
    stop, seen = threading.Event(), []

    def redistribute_forever():
        while not stop.is_set():
            dist.redistribute(x, dist.ShardSpec(("row", "col"), ("dp", "tp")))

    worker = threading.Thread(target=redistribute_forever)
    worker.start()
    try:
        for _ in range(20000):
            if any(f[2] is not None and issubclass(f[2], tr.errors.CollectiveWarning) for f in warnings.filters):
                seen.append(list(warnings.filters))
                break
    finally:
        stop.set()
        worker.join()
    assert not seen
    with pytest.warns(tr.errors.CollectiveWarning):
        dist.all_reduce(dist.tensor((4,), None, mesh, data=np.ones(4, np.float32)), axis="tp")
