"""How the simulated machine's cost grows with the number of devices (issue 30, DESIGN §18).

    python benchmarks/sim_scale_bench.py [--devices 8,72,576,4608] [--repeat 3] [--pipeline 64,576]
                                         [--profile N] [--no-threads]

The program is the user's own: one GPT-style transformer layer written with the public API —
abstract bf16 ``dist.tensor``\\ s, ``op.*``, ``value_and_grad`` under ``sim.use`` — tensor
parallel over ``tp = 8`` (Megatron's layout: ``Wqkv`` and ``W1`` split by columns, ``Wo`` and
``W2`` by rows, an ``all_reduce`` over tp after each), the batch split over ``dp = n / 8``
(one sequence per replica), then the gradients' ``all_reduce`` over dp. The pipeline case is
the same layer as each stage of ``dist.pipeline`` over ``pp = 4`` (mesh ``dp × pp × tp``,
8 micro-batches of one sequence per dp replica, 1F1B, the loss ``mean(y²)``).

Not ``value_and_grad`` of a mean for the layer case: the derivative of ``mean`` broadcasts
the (concrete) seed 1.0 to the output's global shape *replicated* — a host array of the whole
global batch, and a per-device charge that grows with dp (noted in issue 30's memory item;
the pipeline's last stage still has it, so its device counts stay small).

For each case and device count a fresh interpreter runs the step ``--repeat`` times on a fresh
machine each time and prints the best wall time of the step (and its best CPU time, steadier on
a shared machine) and of ``machine.report()``, the
timeline's event count, the peak resident set size of that interpreter (``getrusage``) and
the step's time per device. The simulated step time and peak memory are printed too: a
performance change must leave them identical. ``--profile N`` runs the layer on N devices
under cProfile and prints the top functions by own time instead.

Like the other benchmarks it runs with one thread, then with the default thread counts.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from timing import run_in_thread_settings  # noqa: E402

#: the layer: a 22B-class GPT layer (Megatron's table: h = 6144, 48 heads), sequence 2048
WIDTH, HEADS, SEQ, TP = 6144, 48, 2048, 8
PP, MICROBATCHES = 4, 8
#: the timeline's bound (SIM-TL-9): the layer on 4,608 devices records ~1.9 M events and memory samples
MAX_EVENTS = 20_000_000


def _layer(x, Wqkv, Wo, W1, W2):
    """One pre-norm GPT layer, tensor parallel over tp (the partial sums all-reduced over tp)."""
    from tessera_ref import dist, op
    h = op.layernorm_safe(x)
    q, k, v = op.split_qkv(op.gemm(h, Wqkv), heads=HEADS, groups=TP)
    y = op.flash_attention(q, k, v, causal=True)
    y = op.reshape(op.permute(y, (0, 2, 1, 3)), (x.shape[0], x.shape[1], -1))
    x = x + dist.all_reduce(op.gemm(y, Wo), axis="tp")
    m = op.gelu(op.gemm(op.layernorm_safe(x), W1))
    return x + dist.all_reduce(op.gemm(m, W2), axis="tp")


def _weights(mesh, name=""):
    from tessera_ref import dist
    S = dist.ShardSpec
    col, row = S(("col",), ("tp",)), S(("row",), ("tp",))
    shapes = {"Wqkv": ((WIDTH, 3 * WIDTH), col), "Wo": ((WIDTH, WIDTH), row),
              "W1": ((WIDTH, 4 * WIDTH), col), "W2": ((4 * WIDTH, WIDTH), row)}
    return tuple(dist.tensor(shape, spec, mesh, dtype="bf16", name=w + name) for w, (shape, spec) in shapes.items())


def layer_step(n: int):
    """Forward and backward of one layer on ``n`` devices (tp = 8, dp = n / 8), as a middle
    stage of a model runs it: ``vjp`` with an abstract cotangent of the output's layout (the
    pullback runs one program that recomputes the forward, and sums the weights' gradients
    over dp); returns the machine."""
    from tessera_ref import dist, sim
    from tessera_ref.autodiff import vjp
    machine = sim.machine("H100", devices=n, max_events=MAX_EVENTS)
    with sim.use(machine):
        mesh = dist.Mesh(axes=["dp", "tp"], devices=range(n), shape=(n // TP, TP))
        batch = dist.ShardSpec(("batch",), ("dp",))
        x = dist.tensor((n // TP, SEQ, WIDTH), batch, mesh, dtype="bf16", name="x")
        dy = dist.tensor((n // TP, SEQ, WIDTH), batch, mesh, dtype="bf16", name="dy")
        y, pullback = vjp(_layer, x, *_weights(mesh))
        pullback(dy)
    return machine


def pipeline_step(n: int):
    """The layer as each of PP = 4 stages of a 1F1B pipeline with 8 micro-batches on ``n``
    devices (dp × pp × tp, tp = 8); returns the machine."""
    from tessera_ref import dist, op, sim
    machine = sim.machine("H100", devices=n, max_events=MAX_EVENTS)
    with sim.use(machine):
        dp = n // (PP * TP)
        mesh = dist.Mesh(axes=["dp", "pp", "tp"], devices=range(n), shape=(dp, PP, TP))
        x = dist.tensor((dp * MICROBATCHES, SEQ, WIDTH), dist.ShardSpec(("batch",), ("dp",)),
                        mesh.sub(pp=0), dtype="bf16", name="x")
        weights = [_weights(mesh.sub(pp=k), str(k)) for k in range(PP)]
        pipe = dist.pipeline(_layer, mesh, mesh_axis="pp", microbatches=MICROBATCHES, schedule="1f1b",
                             loss=lambda y: op.mean(y ** 2.0))
        pipe.step(x, weights)
    return machine


CASES = {"layer": layer_step, "pipeline": pipeline_step}


def measure(case: str, n: int, repeat: int) -> dict:
    """Best wall times of ``repeat`` runs of the case on ``n`` devices (in this interpreter)."""
    from tessera_ref import sim
    best_step = best_report = best_cpu = float("inf")
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        machine = CASES[case](n)
        t1, c1 = time.perf_counter(), time.process_time()
        report = machine.report()
        t2 = time.perf_counter()
        best_step, best_report, best_cpu = min(best_step, t1 - t0), min(best_report, t2 - t1), min(best_cpu, c1 - c0)
        peak = max(machine.memory.peak(d) for d in range(n))
        out = {"events": len(machine.timeline.events), "samples": len(machine.timeline.memory_samples),
               "sim_step_s": machine.step_time, "sim_overlapped_s": machine.overlapped_step_time,
               "peak_bytes": peak, "report_lines": len(report.splitlines())}
        del machine, report
        sim.active.LAST_MACHINE.set(None)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux
    return dict(out, case=case, devices=n, step_s=best_step, cpu_s=best_cpu, report_s=best_report, rss=rss)


def _child(case: str, n: int, repeat: int) -> dict:
    done = subprocess.run([sys.executable, __file__, "--one", f"{case}:{n}", "--repeat", str(repeat)],
                          capture_output=True, text=True, env=os.environ)
    if done.returncode:
        raise SystemExit(f"{case} on {n} devices failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def profile(n: int, top: int = 25) -> None:
    import cProfile
    import pstats
    prof = cProfile.Profile()
    prof.enable()
    machine = layer_step(n)
    machine.report()
    prof.disable()
    pstats.Stats(prof).sort_stats("tottime").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--devices", default="8,72,576,4608", help="device counts of the layer case")
    parser.add_argument("--pipeline", default="64,256", help="device counts of the pipeline case ('' for none)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", type=int, help="profile the layer on this many devices instead")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # CASE:N, in a child: print one JSON line
    parser.add_argument("--no-threads", action="store_true", help="run once, as inherited (no two thread settings)")
    args = parser.parse_args()
    if args.one:
        case, n = args.one.split(":")
        print(json.dumps(measure(case, int(n), args.repeat)))
        return
    if args.profile:
        profile(args.profile)
        return
    runs = [("layer", int(n)) for n in args.devices.split(",") if n] + \
           [("pipeline", int(n)) for n in args.pipeline.split(",") if n]
    print(f"{'case':9} {'devices':>7} {'step':>9} {'step CPU':>9} {'report':>9} {'per device':>11} {'events':>9} "
          f"{'samples':>9} {'peak RSS':>9}  simulated step / peak HBM per device")
    for case, n in runs:
        r = _child(case, n, args.repeat)
        print(f"{case:9} {n:7,} {r['step_s']:8.3f}s {r['cpu_s']:8.3f}s {r['report_s']:8.3f}s "
              f"{1e3 * r['step_s'] / n:8.3f} ms "
              f"{r['events']:9,} {r['samples']:9,} {r['rss'] / 2**20:6.0f} MiB  {r['sim_step_s'] * 1e3:.6f} ms / "
              f"{r['peak_bytes']:,} B", flush=True)


if __name__ == "__main__":
    if "--one" in sys.argv or "--profile" in sys.argv or "--no-threads" in sys.argv:
        main()
    else:
        run_in_thread_settings(main)
