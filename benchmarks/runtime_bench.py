"""What compiling once and replaying buys (issue 26): the interpreter's replay overhead per op,
and the demo's forward block on ``cuda-cpu`` replayed against the per-op path it replaces.

    python benchmarks/runtime_bench.py [--repeat 5]

1. A 200-op elementwise chain (``x + x``) on 64-element f32 arrays: ``jit`` on ``interp`` per
   op, the primitive's ``impl`` called directly per op (the arithmetic alone), and NumPy's
   ``a + a``; the replay overhead is jit minus impl.
2. The demo's forward block (seed 004 §2.8 on one device: 18 heads of 4, sequence 32) on
   ``cuda-cpu`` with one schedule and cp.async mode (lockstep, deferred) and host steps
   allowed: a replayed call of its program against the same ops run one at a time, each as
   its one-op program (what every call did before the runtime: lowering, rendering and copying
   per op; here the one-op programs come from their cache, so this is the lower bound of the
   old path's cost). Both give the interpreter's bits (checked).

Rows are timed interleaved, the best of ``--repeat``; the script runs with one thread, then
with the default thread counts.
"""
from __future__ import annotations

import argparse

import numpy as np

from timing import best_times, run_in_thread_settings
import tessera_ref as tr
from tessera_ref import backends, op
from tessera_ref.backends.cuda.cpu import CudaCpuBackend
from tessera_ref.demo import HEADS, attention_block
from tessera_ref.ops import PRIMITIVES, Call
from tessera_ref.ops.execute import call_of

OPS = 200


def chain(x):
    for _ in range(OPS):
        x = op.add(x, x)
    return x


def replay_overhead(repeat: int) -> None:
    a = np.ones(64, np.float32) * np.float32(1e-30)
    f = tr.jit(chain)
    f(a)
    t = tr.asarray(a).type
    call = Call(PRIMITIVES["add"], PRIMITIVES["add"].check_attrs({}), (t, t), (t,))

    def impl():
        x = a
        for _ in range(OPS):
            (x,) = call.primitive.run(call, x, x)
        return x
    rows = {"numpy a + a": lambda: [np.add(a, a) for _ in range(OPS)], "impl alone": impl, "jit replay": lambda: f(a)}
    times = dict(zip(rows, (x / OPS for x in best_times(*rows.values(), repeat=repeat))))
    for name, x in times.items():
        print(f"  {name:<26} {x * 1e6:8.2f} us/op")
    print(f"  replay overhead (jit - impl): {(times['jit replay'] - times['impl alone']) * 1e6:.2f} us/op")
    assert np.array_equal(np.asarray(f(a)), impl())


def forward_block(repeat: int) -> None:
    rng = np.random.default_rng(0)
    E = HEADS * 4
    inputs = [rng.standard_normal(s).astype(np.float32) / d for s, d in (((1, 32, E), 1), ((E, 3 * E), 8),
                                                                          ((E, E), 8))]
    f = tr.jit(attention_block)
    want = np.asarray(f(*inputs))
    backend = CudaCpuBackend("lockstep", "deferred", allow_host=True)
    func = f.trace(*inputs).body.first_op

    def replayed():
        with backends.use(backend):
            return np.asarray(f(*inputs))

    def per_op():  # each op its own one-op program: copies in and out at every op
        env = dict(zip(func.regions[0].entry.args, inputs))
        with backends.use(backend):
            for o in func.regions[0].entry:
                if o.name == "tessera.return":
                    return env[o.operands[0]]
                env.update(zip(o.results, backend.run_op(call_of(o), *[env[v] for v in o.operands])))
    for fn in (replayed, per_op):
        assert np.array_equal(np.asarray(fn()).view(np.uint32), want.view(np.uint32))
    rows = {"replay of the program": replayed, "op by op (one-op programs)": per_op}
    times = dict(zip(rows, best_times(*rows.values(), repeat=repeat)))
    base = times["op by op (one-op programs)"]
    for name, x in times.items():
        print(f"  {name:<28} {x * 1e3:8.1f} ms   {base / x:5.1f}x faster than op by op")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    print(f"1. interp replay of a {OPS}-op chain, per op:")
    replay_overhead(args.repeat)
    print("2. the demo's forward block on cuda-cpu (lockstep, deferred):")
    forward_block(args.repeat)


if __name__ == "__main__":
    run_in_thread_settings(main)
