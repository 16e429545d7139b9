"""``tessera-ref cuda build``: compile every kernel of a program with NVRTC and report it
(CUDA-REPORT-5; docs/tutorials/cuda_report.md).

The program runs on :class:`CollectingBackend`, the interpreter with one addition: every op
with a kernel family is also lowered to its one-op program (:func:`~tessera_ref.runtime.program.op_function`),
rendered and compiled for each architecture, and every ``@kernel`` launch's module too; the
values are the interpreter's, so the program runs as it always does. A kernel seen twice
(the same CUDA C) is compiled once. On a mesh, an op the mesh interpreter runs once on
stacked shards (leading axes of the mesh's shape, each 1 or the mesh's size) is compiled for
one device's shard.
"""
from __future__ import annotations

import argparse
import contextvars
import hashlib
import json
import threading

import numpy as np

from ..backends import use
from ..backends.cuda import compile as cuda_compile
from ..backends.cuda.render import dynamic_smem
from ..backends.cuda.report import budget_violations, occupancy
from ..backends.cuda.source import render
from ..backends.cuda.toolchain import toolchain
from ..errors import BackendError, LoweringError
from ..ir import tile as T
from ..interp.backend import InterpBackend
from ..ir import TensorType
from ..lowering import lower
from ..runtime.program import op_function
from ..runner import run_path

__all__ = ["add_parser", "run", "CollectingBackend", "collect_demo", "JSON_VERSION"]

#: Bumped when a key of the JSON output changes meaning or disappears (keys may be added).
JSON_VERSION = 1
#: The shape of the mesh of the function being run (None off a mesh), per thread/context.
_MESH_SHAPE = contextvars.ContextVar("tessera_cuda_collect_mesh", default=None)


class CollectingBackend(InterpBackend):
    """The interpreter, compiling every kernel it meets for ``archs`` (module docstring)."""

    name = "cuda-collect"
    description = "the interpreter, compiling every kernel it meets with NVRTC (tessera-ref cuda build)"

    def __init__(self, archs):
        self.archs = tuple(archs)
        self.kernels = {}  # sha256 of the CUDA C -> entry
        self._lock = threading.Lock()

    def run_function(self, func, args):
        mesh = next((a.mesh for a in args if hasattr(a, "mesh")), None)
        token = _MESH_SHAPE.set(tuple(mesh.shape) if mesh is not None else None)
        try:
            return super().run_function(func, args)
        finally:
            _MESH_SHAPE.reset(token)

    @staticmethod
    def _per_device(operands):
        """One device's shard of stacked operands (see the module docstring)."""
        m = _MESH_SHAPE.get()
        if m and all(np.ndim(x) > len(m) and all(s in (1, d) for s, d in zip(np.shape(x)[:len(m)], m))
                     for x in operands):
            return [np.asarray(x)[(0,) * len(m)] for x in operands]
        return list(operands)

    def run_op(self, call, *operands):
        if call.primitive.kernel_family is not None:
            local = self._per_device(operands)
            try:
                program = lower(op_function(call, tuple(TensorType(np.shape(x), t.policy)
                                                        for x, t in zip(local, call.in_types))))
            except LoweringError as exc:
                self._record(None, call.primitive.name, call.location, None, error=exc.what)
            else:
                for _, plan in program.steps:
                    if plan is not None:
                        self._record(program.tile, call.primitive.name, call.location, plan)
        return super().run_op(call, *operands)

    def launch(self, launch):
        self._record(launch.module, "@kernel", None, launch)
        return super().launch(launch)

    def _record(self, module, op_name, location, plan, error=None):
        if module is None:
            key = hashlib.sha256(f"{op_name}{location}{error}".encode()).hexdigest()
            with self._lock:
                self.kernels.setdefault(key, _entry(op_name, location, None, None, None, error))
            return
        source = render(module)
        key = hashlib.sha256(source.text.encode()).hexdigest()
        with self._lock:
            if key in self.kernels:
                return
            name = plan.func.attributes["sym_name"] if hasattr(plan, "func") else _kernel_name(module, plan.kernel)
            grid = [int(g) for g in np.atleast_1d(plan.grid)]
            entry = self.kernels[key] = _entry(op_name, location or _location_of(module, name), name, grid,
                                               plan.lanes, None)
        entry["source_sha256"] = key
        for arch in self.archs:
            try:
                b = cuda_compile.build(source, arch)
            except BackendError as exc:
                entry["arch"][arch] = {"error": exc.what.splitlines()[0], "budget_ok": False,
                                       "violations": ["does not compile"]}
                continue
            k = b.kernels.get(name)
            if k is None:
                entry["arch"][arch] = {"error": f"ptxas reported no kernel {name}", "budget_ok": False,
                                       "violations": ["no report"]}
                continue
            dynamic = dynamic_smem(module).get(name, 0)  # LOWER-TARGET-2: shared memory is dynamic
            occ = occupancy(k, plan.lanes, dynamic)
            violations = budget_violations(k, dynamic, library=op_name != "@kernel")
            entry["arch"][arch] = {**{f: v for f, v in k.as_dict().items() if f not in ("name", "arch")},
                                   "dynamic_shared_bytes": dynamic,
                                   "occupancy": {"blocks": occ.blocks, "warps": occ.warps,
                                                 "fraction": round(occ.fraction, 4), "limiter": occ.limiter},
                                   "main_loop_size": sum(k.main_loop.values()),
                                   "budget_ok": not violations, "violations": violations}


def _entry(op_name, location, kernel, grid, threads, error):
    return {"op": op_name, "location": location, "kernel": kernel, "grid": grid, "threads": threads,
            "error": error, "arch": {}}


def _kernel_name(module, name):
    """``name``, or the module's only kernel's when None (a ``Launch`` of a one-kernel module)."""
    return name if name is not None else next(op.attributes["sym_name"] for op in module.body if T.is_kernel(op))


def _location_of(module, name):
    for op in module.body:
        if op.attributes.get("sym_name") == name:
            return str(op.location) if op.location else None
    return None


def collect_demo(backend: CollectingBackend) -> None:
    """Run the demo's forward block (``tessera_ref.demo.tp_block`` on its 72-device mesh) on ``backend``."""
    from .. import demo, dist, sim
    machine = sim.machine("GB200-NVL72", devices=72)
    with sim.use(machine):
        mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(72)], axes=("dp", "tp", "pp"), shape=(4, 9, 2))
        x, Wqkv, Wo = demo._weights(mesh, "f32", 4, 288, demo.HEADS * 64)
        with use(backend):
            demo.tp_block(x, Wqkv, Wo)


def add_parser(sub) -> argparse.ArgumentParser:
    """Add ``cuda`` (with its subcommand ``build``) to the ``tessera-ref`` subparsers ``sub``."""
    p = sub.add_parser("cuda", help="the CUDA backend: compile a program's kernels and report them (no GPU needed)")
    csub = p.add_subparsers(dest="cuda_command", metavar="SUBCOMMAND", required=True)
    b = csub.add_parser("build", help="compile every kernel of a program with NVRTC; report registers, spills, "
                                      "stack, shared memory, occupancy, the main loop's SASS mix and the budgets")
    what = b.add_mutually_exclusive_group(required=True)
    what.add_argument("file", nargs="?", help="a Python file (run as `tessera-ref run` runs it)")
    what.add_argument("--demo", action="store_true", help="the kernels of the demo's transformer block (per device)")
    b.add_argument("--arch", default="sm_80,sm_90", help="comma-separated architectures (default sm_80,sm_90)")
    b.add_argument("--json", action="store_true", help="print the report as JSON (docs/spec/cuda.md)")
    return p


def _mix(main_loop: dict, top: int = 6) -> str:
    total = sum(main_loop.values())
    return ", ".join(f"{op} {n / total:.0%}" for op, n in sorted(main_loop.items(), key=lambda kv: -kv[1])[:top])


def _text(entries, archs) -> str:
    lines = []
    for e in entries:
        head = f"{e['kernel'] or '(no kernel)'}  {e['op']} at {e['location']}"
        if e["grid"] is not None:
            head += f"  grid {tuple(e['grid'])} x {e['threads']} threads"
        lines.append(head)
        if e["error"]:
            lines.append(f"  not lowered: {e['error']}")
        for arch in archs:
            r = e["arch"].get(arch)
            if r is None:
                continue
            if "error" in r:
                lines.append(f"  {arch}: DOES NOT COMPILE: {r['error']}")
                continue
            o = r["occupancy"]
            lines.append(f"  {arch}: {r['registers']} registers, spills {r['spill_stores']}/{r['spill_loads']} B, "
                         f"stack {r['stack_bytes']} B, smem {r['shared_bytes'] + r['dynamic_shared_bytes']} B, "
                         f"{r['barriers']} barriers; "
                         f"occupancy {o['blocks']} blocks/SM ({o['fraction']:.0%} of warps, by {o['limiter']})")
            lines.append(f"         main loop {r['main_loop_size']} instructions: {_mix(r['main_loop'])}")
            lines.append("         budget: " + ("OK" if r["budget_ok"] else "OVER: " + "; ".join(r["violations"])))
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Run the program on a :class:`CollectingBackend`; print the report; 0 when every kernel
    compiles within the budgets, 1 otherwise."""
    archs = [a.strip() for a in args.arch.split(",") if a.strip()]
    for arch in archs:
        cuda_compile.options_for(arch)  # a BackendError for an unknown architecture, before running anything
    backend = CollectingBackend(archs)
    if args.demo:
        collect_demo(backend)
    else:
        with use(backend):
            run_path(args.file, [])
    entries = list(backend.kernels.values())
    ok = all(not e["error"] and all(r["budget_ok"] for r in e["arch"].values()) for e in entries)
    if args.json:
        print(json.dumps({"version": JSON_VERSION, "toolchain": dict(toolchain().versions), "archs": archs,
                          "options": list(cuda_compile.OPTIONS), "kernels": entries, "all_within_budget": ok},
                         indent=2))
    else:
        print(_text(entries, archs))
        n = sum(1 for e in entries for r in e["arch"].values() if r["budget_ok"])
        print(f"\n{len(entries)} kernels x {len(archs)} architectures: {n} within budget"
              f"{'' if ok else ' (the others are marked OVER or DOES NOT COMPILE)'}")
    return 0 if ok else 1
