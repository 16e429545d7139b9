"""What the lowering cases share: tracing, lowering and running a program on the backend under
test, the Graph IR oracle's results, and the parts of a lowered program."""
from __future__ import annotations

import numpy as np
import pytest

from tessera_ref.errors import TileRaceError
from tessera_ref.ir import parse_module

from tessera_ref import backends, jit
from tessera_ref.errors import BackendError
from tessera_ref.ir import schedule as S
from tessera_conformance import ORACLE, run, unsupported

from ..tiles.support import dtype, findings, launch_module


def graph_of(fn, *args):
    """The Graph IR module of ``fn`` traced on ``args``."""
    return jit(fn).trace(*args)


def lowered(backend, fn, *args, directives=None, checks=True, counters=True):
    """``(results, reports, program)``: ``fn`` traced, lowered by ``backend`` (Graph IR ->
    Schedule IR -> Tile IR) and run on it (each kernel through its ``launch``)."""
    try:
        with backends.use(backend):
            program = backends.current().lower(graph_of(fn, *args), directives)
            got, reports = program.run(*args, checks=checks, counters=counters)
    except BackendError as exc:
        unsupported(backend, exc)
    return [np.asarray(g) for g in got], reports, program


def lower_only(backend, fn, *args, directives=None):
    """The program ``backend`` lowers ``fn`` traced on ``args`` to (nothing is run)."""
    try:
        with backends.use(backend):
            return backends.current().lower(graph_of(fn, *args), directives)
    except BackendError as exc:
        unsupported(backend, exc)


def run_program(backend, program, *args, checks=True):
    """``(results, reports)`` of a lowered program run on ``backend``."""
    try:
        with backends.use(backend):
            got, reports = program.run(*args, checks=checks)
    except BackendError as exc:
        unsupported(backend, exc)
    return [np.asarray(g) for g in got], reports


def graph(fn, *args) -> list:
    """The Graph IR interpreter's (the oracle's) results."""
    out = run(ORACLE, fn, *args)
    return out if isinstance(out, list) else [out]


def kernels(program) -> list:
    """The ``tessera.schedule.kernel`` ops of a lowered program, in order."""
    return [op for op in program.func.regions[0].entry if op.name == S.KERNEL]


def tile_funcs(program) -> list:
    """The Tile IR ``tessera.func`` kernels of a lowered program, in order."""
    return [op for op in program.tile.body if op.name == "tessera.func"]


def schedule_of(kernel) -> dict:
    """A scheduled kernel's attributes as plain values."""
    return {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in kernel.attributes.items()}


def adversarial(rng, shape, dtype=np.float32, span=3):
    """Values of very different magnitudes and signs: their sums depend on the order."""
    return (rng.standard_normal(shape) * 10.0 ** rng.integers(-span, span + 1, size=shape)).astype(dtype)


def sixteenths(rng, shape, dtype=np.float32, top=2 ** 11):
    """Multiples of 2^-4 below 2^7: every partial sum of their products is exact in float64
    (fma chains computed there round once), and f32 sums past 2^16 do round."""
    return (rng.integers(-top, top, shape) / 16).astype(dtype)


def skeleton(block) -> list:
    """The memory, copy and synchronization ops of a Tile IR block, nested like the IR:
    ``["alloc 2x32x16xf32 pad=1", "cp_async", "for", ["cp_async_wait 0", "barrier", ...], ...]``."""
    out = []
    for o in block:
        name = o.name.rsplit(".", 1)[1]
        if name == "alloc":
            out.append(f"alloc {str(o.results[0].type)[7:-1]} pad={o.attributes['pad']} {o.attributes['swizzle']}")
        elif name == "cp_async_wait":
            out.append(f"cp_async_wait {o.attributes['pending']}")
        elif name in ("cp_async", "cp_async_commit", "barrier", "mma", "frag_store", "for", "if"):
            out.append(name)
        for region in o.regions:
            out.append(skeleton(region.entry))
    return out


def without_line(text: str, needle: str, after: str) -> str:
    """``text`` without the first line holding ``needle`` that comes after ``after`` (a planted bug)."""
    at = text.index(needle, text.index(after))
    return text[:text.rindex("\n", 0, at)] + text[text.index("\n", at):]


def planted_race(backend, program, args, needle: str, after: str, match=None):
    """The program's only kernel without its first ``needle`` line after ``after`` (a barrier:
    a planted bug), launched on ``backend`` with the checkers: the race it leaves is reported."""
    (func,) = [op for op in program.tile.body if op.name == "tessera.func"]
    broken = parse_module(without_line(str(program.tile), needle, after))
    outs = [np.zeros(ty.shape, ty.dtype) for ty in func.attributes["function_type"].inputs[len(args):]]
    launch = dict(grid=tuple(func.attributes["launch.grid"]), lanes=func.attributes["launch.lanes"], checks=True)
    report = launch_module(backend, broken, list(args) + outs, on_error="collect", **launch)
    assert [f for f in findings(backend, report) if f.kind == "race"]
    with pytest.raises(TileRaceError, match=match):
        launch_module(backend, broken, list(args) + outs, **launch)


def alloc_bytes(func) -> int:
    """The static shared memory of a Tile IR kernel, computed here from its ``alloc`` ops:
    elements with padded rows times the element size."""
    def flat(items):
        for x in items:
            yield from flat(x) if isinstance(x, list) else [x]
    total = 0
    for line in flat(skeleton(func.regions[0].entry)):
        if line.startswith("alloc "):
            shape, pad = line.split()[1], int(line.split()[2][4:])
            *dims, fmt = shape.split("x")
            rows = int(np.prod([int(d) for d in dims[:-1]]))
            total += rows * (int(dims[-1]) + pad) * dtype(fmt).itemsize
    return total
