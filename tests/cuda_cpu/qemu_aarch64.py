"""The cuda-cpu backend's launches as AArch64 programs under qemu-user: the real twin
(tessera_cpu.h, tessera_fiber.h, tessera_switch.h) and the real rendered kernels, compiled for
aarch64 and emulated, their bits compared with the interpreter's.

Within :func:`on_qemu`, the backend's ``build.library`` hands back the kernels to build instead
of a loaded library, and ``harness.run`` appends a ``main`` to the translation unit (the launch's
grid, threads, shared memory and argument sizes; the schedule and cp.async mode on its command
line), compiles it with ``aarch64-linux-gnu-g++`` and the harness's flags (static), writes the
arguments to a file, runs the program under ``qemu-aarch64`` and reads them back; a finding is
harness.py's HarnessFinding. The guard pages that harness.py puts around the arguments are not
made (an access past an argument is not reported; the twin's guard behind the shared memory
is, without the ``-O0`` run that names the exact line). Needs Debian's ``qemu-user`` and
``g++-aarch64-linux-gnu``. By hand::

    PYTHONPATH=.:conformance python tests/cuda_cpu/qemu_aarch64.py [LIBRARY NAME ...]

runs the named programs of tests/cuda/cuda_programs.py (default: all) under four schedule and
cp.async combinations and prints one line per program.
"""
from __future__ import annotations

import contextlib
import hashlib
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from unittest import mock

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cpu_programs import FAST, LIBRARY, bits, on_the_interpreter, run_on  # noqa: E402

from tessera_ref.backends.cuda.cpu import build, harness  # noqa: E402
from tessera_ref.backends.cuda.toolchain import HEADER_DIR  # noqa: E402

GXX, QEMU = "aarch64-linux-gnu-g++", "qemu-aarch64"
FLAGS = tuple(f for f in build.FLAGS if f not in ("-shared", "-fPIC")) + ("-static",)

_MAIN = r"""
#include <cstdio>
#include <cstdlib>
int main(int argc, char** argv) {
  static const long sizes[] = {%(sizes)s};
  const int n = %(n)d;
  void* args[n + 1];
  FILE* in = fopen(argv[1], "rb");
  for (int i = 0; i < n; ++i) {
    args[i] = aligned_alloc(64, (sizes[i] + 63) / 64 * 64);
    if (fread(args[i], 1, sizes[i], in) != (size_t)sizes[i]) return 2;
  }
  fclose(in);
  tsr_cpu_options opt = {atoi(argv[3]), atoi(argv[4]), strtoull(argv[5], nullptr, 10), %(smem)dL, %(tc)s};
  const long grid[3] = {%(grid)s};
  tsr_cpu_result res;
  tsr_launch_%(kernel)s(grid, %(lanes)d, args, &opt, &res);  // its result is res.kind != 0
  FILE* out = fopen(argv[2], "wb");
  for (int i = 0; i < n; ++i) fwrite(args[i], 1, sizes[i], out);
  fclose(out);
  printf("%%d %%d %%d %%ld %%ld %%ld %%llu %%s\n", res.kind, res.line, res.other_line, res.block[0], res.block[1],
         res.block[2], res.switches, res.text);
  return 0;
}
"""


def tools() -> str | None:
    """What is missing to run on qemu (None: nothing)."""
    missing = [t for t in (GXX, QEMU) if shutil.which(t) is None]
    return f"{' and '.join(missing)} (apt-get install qemu-user g++-aarch64-linux-gnu)" if missing else None


class Emulated:
    """What ``build.library`` hands ``harness.run`` inside :func:`on_qemu`."""

    def __init__(self, source, kernels):
        self.source, self.kernels = source, list(kernels)


_BUILT: dict = {}
STATS = {"compiles": 0, "compile_seconds": 0.0, "runs": 0}


def _program(lib: Emulated, kernel, grid3, lanes, smem, tc, sizes, work: Path) -> Path:
    *scalars, order = harness._tc_fields(tc)  # tc_products, tc_align, tc_emin, tc_fadd, tc_order
    options = ", ".join(map(str, scalars)) + ", {" + ", ".join(map(str, order)) + "}"
    unit = build.translation_unit(lib.source, lib.kernels) + _MAIN % dict(
        sizes=", ".join(f"{s}L" for s in sizes) or "0L", n=len(sizes), smem=smem, tc=options,
        grid=", ".join(f"{g}L" for g in grid3), kernel=kernel, lanes=lanes)
    key = hashlib.sha256(unit.encode()).hexdigest()[:24]
    if key not in _BUILT or not _BUILT[key].exists():  # built in this on_qemu's directory
        src, exe = work / f"{key}.cpp", work / key
        src.write_text(unit)
        start = time.perf_counter()
        done = subprocess.run([GXX, *FLAGS, f"-I{build.TWIN_DIR}", f"-I{HEADER_DIR}", str(src), "-o", str(exe)],
                              capture_output=True, text=True, check=False)
        STATS["compiles"] += 1
        STATS["compile_seconds"] += time.perf_counter() - start
        if done.returncode:
            raise RuntimeError(f"{GXX} failed:\n{done.stderr[-4000:]}")
        _BUILT[key] = exe
    return _BUILT[key]


@contextlib.contextmanager
def on_qemu():
    """The cuda-cpu backend's launches run as AArch64 programs under qemu-aarch64."""
    missing = tools()
    if missing:
        raise RuntimeError(f"running on emulated AArch64 needs {missing}")
    with tempfile.TemporaryDirectory(prefix="tsr-qemu-") as d:
        work = Path(d)

        def run(lib, kernel, grid, lanes, args, smem, options, source, names=None, **_):  # harness.run's signature
            code, seed = harness.parse_schedule(options.schedule)
            grid = tuple(int(g) for g in (tuple(grid) if np.ndim(grid) else (grid,)))
            grid3 = grid + (1,) * (3 - len(grid))
            exe = _program(lib, kernel, grid3, int(lanes), int(smem), options.tc, [a.nbytes for a in args], work)
            files = work / f"in-{uuid.uuid4().hex}", work / f"out-{uuid.uuid4().hex}"  # launches from threads
            files[0].write_bytes(b"".join(np.ascontiguousarray(a).tobytes() for a in args))
            done = subprocess.run([QEMU, str(exe), *map(str, files), str(code), str(int(options.cp_async == "eager")),
                                   str(seed)], capture_output=True, text=True, check=False)
            STATS["runs"] += 1
            if done.returncode:
                raise RuntimeError(f"{kernel} under qemu-aarch64 exited {done.returncode}: {done.stderr[-2000:]}")
            back, at = files[1].read_bytes(), 0
            for a in args:  # as harness.run: the buffers hold what the kernel wrote, a finding or not
                if a.flags.writeable:
                    a.reshape(-1).view(np.uint8)[...] = np.frombuffer(back, np.uint8, a.nbytes, at)
                at += a.nbytes
            res, fields = harness._Result(), done.stdout.split(" ", 7)  # the fields of tsr_cpu_result
            res.kind, res.line, res.other_line, x, y, z, res.switches = (int(v) for v in fields[:7])
            res.block[:] = (x, y, z)
            res.text = fields[7].rstrip("\n").encode()[:1023]
            if res.kind:  # the harness's own message
                raise harness._finding(res, kernel, options, source, (), names)
            return res.switches

        def library(source, kernels, flags=build.FLAGS):
            return Emulated(source, kernels)

        with mock.patch.object(build, "library", library), mock.patch.object(harness, "run", run):
            yield


def same_bits(got, want) -> bool:
    return len(got) == len(want) and all(np.asarray(g).dtype == np.asarray(w).dtype
                                         and np.array_equal(bits(g), bits(w)) for g, w in zip(got, want))


def check(name: str, combos=FAST) -> tuple[bool, int, float]:
    """``(bit-identical under every combination, switches, seconds)`` of library program ``name``."""
    program, inputs, want = on_the_interpreter(name, 7)
    ok, switches, start = True, 0, time.perf_counter()
    with on_qemu():
        for schedule, cp_async in combos:
            got, reports = run_on(program, inputs, schedule, cp_async)
            ok &= same_bits(got, want)
            switches += sum(r.switches for r in reports)
    return ok, switches, time.perf_counter() - start


if __name__ == "__main__":
    names = sys.argv[1:] or sorted(LIBRARY)
    failed = []
    for name in names:
        try:
            ok, switches, seconds = check(name)
            print(f"{name:32s} {'bit-identical' if ok else 'DIFFERENT BITS'} under {len(FAST)} schedule/mode "
                  f"combinations ({switches} fiber switches, {seconds:.1f} s)", flush=True)
        except Exception as exc:  # one line per program, the rest still run
            ok = False
            print(f"{name:32s} ERROR {type(exc).__name__}: {str(exc)[:800]}", flush=True)
        if not ok:
            failed.append(name)
    print(f"{len(names) - len(failed)} of {len(names)} programs bit-identical on emulated AArch64; compiles "
          f"{STATS['compiles']} ({STATS['compile_seconds']:.0f} s), launches {STATS['runs']}")
    sys.exit(1 if failed else 0)
