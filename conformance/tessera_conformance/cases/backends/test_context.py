"""BACKEND-CTX-1: everything runs on the current backend — the innermost ``backends.use`` block's,
in that thread or task only; ``jit(backend=)`` and ``graph.module(backend=)`` fix one function's;
tracing does not depend on the backend."""
import asyncio
import re
import threading

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import backends, dist, graph, jit, lowering, op
from tessera_conformance import ORACLE, assert_bits, clause, eager

from ._reference import Spy, scale, wide

S = dist.ShardSpec
A = wide(np.random.default_rng(1), (4, 4), -6, 7)


def _entry_points():
    """Every kind of entry point the clause lists, as (name, callable returning NumPy values)."""
    mesh = dist.Mesh(("tp",), range(2), (2,))
    d = dist.tensor((4, 4), S(("row",), ("tp",)), mesh, data=A)

    @jit
    def f(x):
        return op.matmul(x, op.transpose(x, (1, 0))) + 1.0

    @graph.module("conf_ctx")
    def g(x):
        return op.exp(x) * 2.0

    @op.kernel
    def k(x):
        return x + x

    return {
        "eager op": lambda: op.add(A, A),
        "jit": lambda: f(A),
        "graph.module": lambda: g(A),
        "dist op and collective": lambda: dist.all_reduce(op.sum(d, axis=0), "tp"),
        "autodiff": lambda: tr.grad(lambda x: op.sum(x * x))(A),
        "@op.kernel": lambda: k(A),
        "lowered program": lambda: lowering.lower(f.trace(A)).run(A)[0],
        "schedule": lambda: lowering.run_schedule(lowering.graph_to_schedule(f.trace(A)), A),
    }


def _numpy(value):
    value = value if isinstance(value, (list, tuple)) else [value]
    return [np.asarray(getattr(v, "numpy", lambda v=v: v)()) for v in value]


@pytest.mark.parametrize("entry", list(_entry_points()))
@clause("BACKEND-CTX-1")
def test_every_entry_point_runs_on_the_current_backend(backend, entry):
    """Inside ``backends.use(spy)`` the entry point's ops, launches or transport calls reach the
    spy (which runs them on the backend under test), with the backend's own results."""
    spy = Spy(backend)
    run = _entry_points()[entry]
    want = eager(backend, lambda: _numpy(run()))
    before = spy.counts.copy()
    got = eager(spy, lambda: _numpy(run()))
    ran = spy.ran(before)
    assert ran["op"] + ran["launch"] + ran["reduce"] > 0, f"{entry} did not run on the current backend"
    assert_bits(got, want, entry)


@clause("BACKEND-CTX-1")
def test_kernel_launches_run_on_the_current_backend(backend):
    """A ``@kernel`` launch goes to the current backend."""
    spy = Spy(backend)
    x, y = np.arange(200, dtype=np.float32), np.zeros(200, np.float32)
    with backends.use(spy):
        scale(x, y, 2.0, grid=2, lanes=128)
    assert spy.counts["launch"] == 1 and np.array_equal(y, 2 * x)


@clause("BACKEND-CTX-1")
def test_blocks_nest_and_the_default_is_interp(backend):
    """Outside every block the current backend is ``"interp"``; the innermost block wins."""
    assert backends.current().name == ORACLE
    spy = Spy(backend, name="conf-spy")
    with backends.use(backend):
        assert backends.current() is backends.get(backend)
        with backends.use(spy):
            assert backends.current() is spy
        assert backends.current() is backends.get(backend)
    assert backends.current().name == ORACLE


@clause("BACKEND-CTX-1")
def test_the_choice_is_per_thread_and_per_task(backend):
    """A block holds in the thread (or asyncio task) that entered it and nowhere else."""
    spy = Spy(backend, name="conf-thread-spy")
    seen, barrier = {}, threading.Barrier(2)

    def worker(choice):
        with backends.use(choice):
            barrier.wait()
            names = {backends.current().name for _ in range(200)}
            seen[getattr(choice, "name", choice)] = names

    threads = [threading.Thread(target=worker, args=(c,)) for c in (ORACLE, spy)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {ORACLE: {ORACLE}, "conf-thread-spy": {"conf-thread-spy"}}

    async def task(choice, out):
        with backends.use(choice):
            await asyncio.sleep(0)
            out.append(backends.current().name)

    async def both():
        out_a, out_b = [], []
        await asyncio.gather(task(spy, out_a), task(ORACLE, out_b))
        return out_a, out_b

    assert asyncio.run(both()) == (["conf-thread-spy"], [ORACLE])
    assert backends.current().name == ORACLE


@clause("BACKEND-CTX-1")
def test_jit_and_graph_module_fix_their_backend(backend):
    """``jit(fn, backend=)`` and ``graph.module(name, backend=)`` run there whatever block they
    are called in."""
    spy, other = Spy(backend, name="conf-pinned"), Spy(ORACLE, name="conf-other")
    pinned = jit(lambda x: x * 3.0, backend=spy)

    @graph.module("conf_pinned", backend=spy)
    def pinned_module(x):
        return x - 1.0

    for call in (lambda: pinned(A), lambda: pinned_module(A)):
        before, before_other = spy.counts.copy(), other.counts.copy()
        with backends.use(other):
            call()
        assert spy.ran(before)["op"] >= 1 and other.ran(before_other)["op"] == 0
    on_oracle = jit(lambda x: x * 3.0, backend=ORACLE)
    before = spy.counts.copy()
    with backends.use(spy):
        assert_bits(np.asarray(on_oracle(A)), (A * np.float32(3)).astype(np.float32))
    assert spy.ran(before)["op"] == 0


@clause("BACKEND-CTX-1")
def test_tracing_does_not_depend_on_the_backend(backend):
    """The same Graph IR is recorded whichever backend later runs it; the spec's example prints
    ``interp [0.7357589 0.9790833]``."""
    def fn(x):
        return op.exp(x) * 2.0

    x = np.linspace(-1, 1, 8, dtype=np.float32)
    texts = []
    for name in (backend, ORACLE):
        f = jit(fn, backend=name)
        eager(name, f, x)
        texts.append(re.sub(r"loc\([^)]*\)", "", f.inspect_ir("graph")))
    assert texts[0] == texts[1]
    with backends.use(ORACLE):
        print_ = f"{backends.current().name} {jit(fn)(x).numpy()[:2]}"
    assert print_ == "interp [0.7357589 0.9790833]"
