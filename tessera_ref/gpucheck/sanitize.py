"""Stage ``sanitizers`` (CUDA-CHECK-5): kernels with a planted bug each, run under NVIDIA's
``compute-sanitizer`` tool that should see it and in the CUDA-on-CPU harness, whose verdicts
are compared; the same kernels with the bug fixed are the control (no finding from either)."""
from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import numpy as np

from ..backends.cuda.cpu import build as cpu_build
from ..backends.cuda.cpu import harness
from .device import Skip

__all__ = ["BUGS", "items", "run", "launch"]

# shared memory is the dynamic kind the rendered kernels use (the harness's twin of it is tsr_smem)
_SMEM = "extern __shared__ __align__(16) unsigned char tsr_smem[];\n  float* s = reinterpret_cast<float*>(tsr_smem);"
_RACE = r"""
extern "C" __global__ void race(const float* x, float* y, int n) {
  SMEM
  s[0] = x[threadIdx.x];  // every thread writes the same word
  __syncthreads();
  y[threadIdx.x] = s[0];
}
""".replace("SMEM", _SMEM)
_MISSING_BARRIER = r"""
extern "C" __global__ void missing_barrier(const float* x, float* y, int n) {
  SMEM
  s[threadIdx.x] = x[threadIdx.x];
  BARRIER
  y[threadIdx.x] = s[(threadIdx.x + 33) % 64];  // a word of the other warp
}
""".replace("SMEM", _SMEM)
_OFF_BY_ONE = r"""
extern "C" __global__ void off_by_one(const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i CMP n) y[i] = x[i];
}
"""
_DIVERGENT = r"""
extern "C" __global__ void divergent_barrier(const float* x, float* y, int n) {
  SMEM
  s[threadIdx.x] = x[threadIdx.x];
  if (COND) __syncthreads();
  y[threadIdx.x] = s[63 - threadIdx.x];
}
""".replace("SMEM", _SMEM)

#: name -> (the compute-sanitizer tool that should see it, buggy source, fixed source, grid)
BUGS = {
    "race": ("racecheck", _RACE, _RACE.replace("s[0] = x[threadIdx.x];", "if (threadIdx.x == 0) s[0] = x[0];"), 1),
    "missing_barrier": ("racecheck", _MISSING_BARRIER.replace("BARRIER", ""),
                        _MISSING_BARRIER.replace("BARRIER", "__syncthreads();"), 1),
    "off_by_one": ("memcheck", _OFF_BY_ONE.replace("CMP", "<="), _OFF_BY_ONE.replace("CMP", "<"), 2),
    "divergent_barrier": ("synccheck", _DIVERGENT.replace("COND", "threadIdx.x < 32"),
                          _DIVERGENT.replace("COND", "blockDim.x > 0"), 1),
}
N = 64


def items(arch: str, quick: bool) -> list:
    return [] if quick else [f"{bug}_{which}" for bug in BUGS for which in ("planted", "fixed")]


def _split(item: str):
    bug, which = item.rsplit("_", 1)
    tool, planted, fixed, grid = BUGS[bug]
    return bug, tool, planted if which == "planted" else fixed, grid


def _buffers():
    return [np.arange(N, dtype=np.float32) + 1, np.zeros(N, np.float32), np.array([N], np.int32)]


class _Text:
    def __init__(self, text):
        self.text, self.locations = text, {}


def _cpu_verdict(bug: str, text: str, grid: int) -> str:
    """What the harness says: a finding's kind, a result that depends on the schedule, or clean."""
    source = _Text(text)
    lib = cpu_build.library(source, [bug])
    results = []
    for schedule in ("lockstep", "reverse", "random:1"):
        args = _buffers()
        try:
            harness.run(lib, bug, (grid,), N, args, 4 * N, harness.Options(schedule=schedule), source)
        except harness.HarnessFinding as finding:
            return f"finding: {finding.kind}"
        results.append(args[1].tobytes())
    return "schedule-dependent result" if len(set(results)) > 1 else "clean"


def launch(item: str) -> None:
    """Run ``item``'s kernel once on the GPU (the process compute-sanitizer watches)."""
    import cupy
    from ..backends.cuda.compile import build
    from ..backends.cuda.runtime import arch_of
    bug, _, text, grid = _split(item)
    cupy.cuda.set_allocator(None)  # every buffer its own cudaMalloc: the tool sees exact bounds
    b = build(text, arch_of(cupy.cuda.Device().compute_capability))
    path = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"tessera-sanitize-{os.getpid()}.cubin")
    with open(path, "wb") as f:
        f.write(b.cubin)
    x, y, n = _buffers()
    fn = cupy.RawModule(path=path).get_function(bug)
    fn((grid, 1, 1), (N, 1, 1), (cupy.asarray(x), cupy.asarray(y), np.int32(n[0])), shared_mem=4 * N)
    cupy.cuda.Device().synchronize()


def _gpu_verdict(ctx, item: str, tool: str) -> str:
    if ctx.dry_run:
        raise Skip("dry run: no device for compute-sanitizer")
    sanitizer = shutil.which("compute-sanitizer") or ("/usr/local/cuda/bin/compute-sanitizer"
                                                       if os.path.exists("/usr/local/cuda/bin/compute-sanitizer") else None)
    if sanitizer is None:
        raise Skip("compute-sanitizer is not installed")
    done = subprocess.run([sanitizer, "--tool", tool, "--print-limit", "4", sys.executable, "-m",
                           "tessera_ref.gpucheck.worker", "--launch", item], capture_output=True, text=True, timeout=120)
    text = done.stdout + done.stderr
    errors = re.search(r"ERROR SUMMARY: (\d+) error", text)
    hazards = re.search(r"RACECHECK SUMMARY: (\d+) hazard", text)
    if errors is None:
        raise RuntimeError(f"compute-sanitizer printed no summary (exit {done.returncode}): {text.strip()[-400:]}")
    count = int(errors.group(1)) + (int(hazards.group(1)) if hazards else 0)
    first = next((ln.strip("= ").strip() for ln in text.splitlines()
                  if re.search(r"(Invalid|Race|Barrier|Divergent|Hazard|hazard)", ln)), "")
    return f"{count} error(s): {first}" if count else "clean"


def run(ctx, item: str) -> dict:
    bug, tool, text, grid = _split(item)
    cpu = _cpu_verdict(bug, text, grid)
    try:
        gpu = _gpu_verdict(ctx, item, tool)
    except Skip as why:
        return {"status": "pass" if (cpu == "clean") == item.endswith("fixed") else "differ",
                "cpu": cpu, "gpu": f"skipped: {why}",
                "detail": f"CPU harness: {cpu}; compute-sanitizer {tool}: skipped ({why})"}
    agree = (cpu == "clean") == (gpu == "clean")
    expected = (cpu == "clean") == item.endswith("fixed")
    return {"status": "pass" if agree and expected else "differ", "cpu": cpu, "gpu": gpu, "tool": tool,
            "detail": f"CPU harness: {cpu}; compute-sanitizer {tool}: {gpu}" + ("" if agree else " — they disagree")}
