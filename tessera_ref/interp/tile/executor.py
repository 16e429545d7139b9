"""The tile interpreter: runs a Tile IR kernel over a grid, one tile at a time (TILE-EXEC-1).

Every op runs through its handler in :data:`HANDLERS`, keyed by Tile IR op name like the
CUDA renderer's rules (:data:`NO_HANDLER` names the ops without one, and why).

Within a tile every op runs once for all lanes at once: a lane value is a NumPy array of
one entry per lane, or a NumPy scalar when it is uniform (the same for every lane). The
*mask* says which lanes are active; a lane-varying ``if`` runs both regions, each under its
part of the mask, and merges the results per lane. Loops need uniform bounds. Barriers split
the tile's execution into phases, which the checkers (:mod:`.checkers`) use; the counters
(:mod:`.counters`) follow hardware.md's bank and sector rules.

Tile-collective ops (``cp_async``, ``frag_load``, ``frag_store``, ``mma``) are issued by the
whole tile (never under a lane-varying ``if``, TILE-MEM-3). For the counters (TILE-VIS-3):
``cp_async`` copies pieces of its ``bytes`` (checked: contiguous and aligned), or of 16, 8
or 4 bytes (the largest contiguous and aligned in both buffers, else single elements),
piece ``j`` by lane ``j mod lanes`` (a ``transpose`` copy: one element per piece);
``frag_load`` / ``frag_store`` move elements in row-major order, element ``j`` by lane
``j mod lanes``; ``mma`` reads ``a`` a column at a time (lane ``m`` reads ``a[m, k]``) and
``b`` a row at a time (lane ``n`` reads ``b[k, n]``), the SIMT outer-product pattern whose
bank conflicts padding and swizzling remove. Under a fragment ``layout`` (TILE-FRAG-1) these
three count each lane's own accesses instead (:meth:`Run.owned`, TILE-COUNT-5). For the
checkers, their accesses are every lane's.
"""
from __future__ import annotations

import math

import numpy as np

from ...errors import KernelError
from ...ir import Module, Operation
from ...ir import tile as T
from ...ir.fragment import layout_of, ownership
from ...ir.launch import kernel_arguments
from ...ir.types import ScalarType, TensorType
from ...numerics import get_format, rng, tc
from ...numerics.arith import canonical_nan
from ...numerics.reduce import dot_canonical, reduce_canonical
from ...ops.exact import math_in_accum
from ...sim.roofline import roofline
from . import checkers as C
from .arith import STORAGE_FORMATS, cast_value, computable, convert, float_binary, float_fma, float_unary, number
from .counters import Counters, lane_requests, sectors, wavefronts
from .memory import ALL_LANES, Global, Shared, View
from .progress import Progress
from .report import TileReport

__all__ = ["run", "HANDLERS", "NO_HANDLER"]

#: Index (integer) arithmetic, comparisons (any values) and mask logic; float arithmetic is
#: :mod:`.arith`'s.
_ARITH = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "min": np.minimum, "max": np.maximum,
          "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal, "eq": np.equal,
          "ne": np.not_equal, "and": np.logical_and, "or": np.logical_or, "floordiv": np.floor_divide,
          "mod": np.mod}
_FLOAT_FLOPS = ("add", "sub", "mul", "div", "min", "max")
_FLOAT_ARITH = _FLOAT_FLOPS + ("floordiv", "mod")
_UNARY_INDEX = {"neg": np.negative, "abs": np.abs}


def _dtype(t) -> np.dtype:
    if isinstance(t, (ScalarType, TensorType)) and not (isinstance(t, TensorType) and t.element_kind):
        if t.format.name not in STORAGE_FORMATS:
            raise KernelError(f"the tile interpreter runs {', '.join(STORAGE_FORMATS)} values; {t} is not "
                              "supported", fix="use one of those formats for tile buffers and values")
    if isinstance(t, TensorType):
        return t.dtype
    return t.format.dtype if isinstance(t, ScalarType) else np.dtype(np.int64)


def _kernel_func(program, func):
    if isinstance(program, Operation) and T.is_kernel(program):
        return program
    if isinstance(program, Module):
        kernels = [op for op in program.body if T.is_kernel(op)]
        if func is not None:
            kernels = [op for op in kernels if op.attributes["sym_name"] == func]
        if len(kernels) == 1:
            return kernels[0]
        raise KernelError(f"the module holds {len(kernels)} tile kernels matching {func!r}",
                          fix="name the kernel with func=")
    raise KernelError(f"run() takes a Tile IR module or kernel func, got {type(program).__name__}",
                      fix="pass KernelBuilder.finish() or kernel.module")


class _Abort(Exception):
    """Raised to stop a run at the first finding (turned into the finding's error)."""


#: Launch limits of the interpreter, which runs tiles one after another (CUDA allows 1024
#: threads per block; 2^20 tiles take hours already).
MAX_TILES, MAX_LANES = 1 << 20, 1024

class Run:
    """One execution of a kernel over a grid (see :func:`run`)."""

    def __init__(self, func, args, grid, lanes, checks, counters, on_error, observer=None):
        self.func = func
        self.observer = observer
        sizes = (grid,) if np.ndim(grid) == 0 else tuple(grid)
        if not all(isinstance(g, (int, np.integer)) and not isinstance(g, bool) for g in sizes + (lanes,)):
            raise KernelError(f"a launch needs integer grid sizes and lanes, got grid={grid!r}, lanes={lanes!r}",
                              fix="e.g. grid=(4, 4), lanes=128")
        self.lanes = int(lanes)
        self.grid = tuple(int(g) for g in sizes)
        if not 1 <= len(self.grid) <= 3 or min(self.grid) < 1 or self.lanes < 1:
            raise KernelError(f"a launch needs 1 to 3 positive grid sizes and lanes >= 1, got grid={grid}, "
                              f"lanes={lanes}", fix="e.g. grid=(4, 4), lanes=128")
        if math.prod(self.grid) > MAX_TILES or self.lanes > MAX_LANES:
            raise KernelError(f"the tile interpreter runs at most {MAX_TILES} tiles of at most {MAX_LANES} lanes, one "
                              f"after another; grid={self.grid} is {math.prod(self.grid)} tiles of {self.lanes} lanes",
                              fix="check the grid on a smaller problem, or run the kernel on a GPU backend")
        self.checks, self.count, self.on_error = checks, counters, on_error
        self.counters = Counters()
        self.findings: list = []
        self._seen: dict = {}
        self.lane_ids = np.arange(self.lanes, dtype=np.int64)
        self.full = np.ones(self.lanes, dtype=bool)
        self.env: dict = {}
        self.dtype_hint = None
        self.globals = self._bind(args)
        self._cache: dict = {}

    # -- arguments ----------------------------------------------------------------------
    def _bind(self, args) -> dict:
        names = list(self.func.attributes["tile.params"])
        mut = set(self.func.attributes["tile.mut"])
        params = self.func.regions[0].entry.args
        for param in params:
            _dtype(param.type)  # a format the interpreter does not run: named first
        values, _ = kernel_arguments(self.func, args)  # TILE-EXEC-1
        out, base = {}, 0
        for name, param, value in zip(names, params, values):
            t = param.type
            if isinstance(t, TensorType):
                buf = Global(name, value, base, name in mut)
                base += -(-value.nbytes // 256) * 256 + 256
                self.env[param] = buf
                out[name] = buf
                self.dtype_hint = self.dtype_hint or (None if t.element_kind else t.format.name)  # not a mask
            else:
                self.env[param] = number(value, _dtype(t))
        return out

    # -- findings -----------------------------------------------------------------------
    def report(self, kind, what, op, lanes=(), index=(), fix=None) -> None:
        lanes = tuple(int(x) for x in np.unique(np.atleast_1d(lanes)))[:64]
        finding = C.Finding(kind, what, op.location, self.tile, lanes, tuple(index), 1, fix)
        key = (kind, op.location, what.rsplit(": ", 1)[-1])
        if key in self._seen:
            self._seen[key].count += 1
            return
        self._seen[key] = finding
        self.findings.append(finding)
        if kind != "warning" and self.on_error == "raise":
            raise _Abort(finding)

    def _problem(self, problem, op, buf, phys, lanes, verb):
        kind, bad, detail = problem
        where = np.flatnonzero(bad)
        index = buf.logical_of(phys[where[0]])[0]
        who = lanes if np.ndim(lanes) == 0 else lanes[where][phys[where] == phys[where[0]]]  # that element's lanes
        self.report(kind, f"{verb} {buf.name}{list(index)} by {C.describe_lanes(who)} of tile "
                          f"{self.tile}: {detail}", op, who, index,
                    fix="separate the accesses with tbarrier() (and cp_async wait before it)"
                    if kind == "race" else "write the element before reading it")

    def check_shared(self, op, base, offs, lanes, verb, write: bool, asynchronous: bool = False) -> None:
        """TILE-CHECK-1/2/4 for an access of shared ``offs`` by ``lanes`` (an array per
        element, or ALL_LANES), then record it (a copy is recorded when it is retired)."""
        problem = (C.check_write(base, offs, lanes, self.phase, asynchronous) if write
                   else C.check_read(base, offs, lanes, self.phase))
        if problem:
            self._problem(problem, op, base, offs, lanes, verb)
        if self.observer is not None:
            self.observe(op, base, offs, lanes, verb, problem[1] if problem else None)
        if not asynchronous:
            (C.mark_write if write else C.mark_read)(base, offs, lanes, self.phase)

    def observe(self, op, base, offs, lanes, verb: str, conflicts) -> None:
        """Tell the observer about a checked shared-memory access (TILE-CHECK-7)."""
        self.observer(C.SharedAccess(self.tile, self.phase, verb, base.name, base.logical_indices(offs),
                                     np.broadcast_to(lanes, offs.shape).copy(),
                                     np.zeros(offs.shape, bool) if conflicts is None else np.asarray(conflicts, bool),
                                     op.location))

    # -- running ------------------------------------------------------------------------
    def run(self) -> None:
        body = self.func.regions[0].entry
        progress = Progress(self.func.attributes["sym_name"], math.prod(self.grid))
        for tile in np.ndindex(*self.grid):
            self.tile = tile
            self.tile_linear = int(np.ravel_multi_index(tile, self.grid))
            self.phase = 0
            self.allocs: dict = {}
            self.pending: list = []
            self.groups: list = []
            self.counters.tiles += 1
            self.block(body, self.full)
            left = self.pending + [c for g in self.groups for c in g]
            if left:
                dst, _, _, op = left[0]
                n = len(left)
                self.report("warning", f"tile {tile} ends with {n} cp.async cop{'y' if n == 1 else 'ies'} never "
                            f"retired by a cp_async_wait (the first into {dst.name}): their data is never used", op)
            progress.tick(self.tile_linear + 1)

    def block(self, block, mask) -> list:
        env = self.env
        for op in block:
            name = op.name
            if name == T.YIELD:
                return [env[v] for v in op.operands]
            if name == "tessera.return":
                return []
            handler = HANDLERS.get(name)
            if handler is None:
                raise KernelError(f"the tile interpreter has no rule for '{name}'", location=op.location,
                                  fix="emit tessera.tile ops only")
            value = handler(self, op, mask)
            if op.results:
                if len(op.results) == 1:
                    env[op.results[0]] = value
                else:
                    for r, v in zip(op.results, value):
                        env[r] = v
        return []

    # -- helpers ------------------------------------------------------------------------
    def uniform(self, value, op, mask, what: str) -> int:
        if np.ndim(value) == 0:
            return int(value)
        active = value[mask]
        if active.size and (active != active[0]).any():
            raise KernelError(f"{what} differs between lanes ({C.describe_lanes(self.lane_ids[mask][active != active[0]])} "
                              f"disagree with lane {int(self.lane_ids[mask][0])}) in tile {self.tile}",
                              location=op.location, fix="compute it from tile ids and constants only")
        return int(active[0]) if active.size else 0

    def lanes_of(self, value, mask) -> np.ndarray:
        return np.broadcast_to(value, (self.lanes,))[mask]

    def index_of(self, op, buf, idx_values, mask, verb):
        """(target buffer, physical/flat offsets, active lane ids) of a lane-level access."""
        lanes = self.lane_ids[mask]
        local = [self.lanes_of(v, mask).astype(np.int64) for v in idx_values]
        bad = np.zeros(lanes.size, dtype=bool)
        for i, n in zip(local, buf.shape):  # the index against the view's (or buffer's) own shape
            bad |= (i < 0) | (i >= n)
        base = buf.base if isinstance(buf, View) else buf
        what = f"(shape {list(buf.shape)}, {base.space} memory)"
        if isinstance(buf, View):
            offs = buf.offsets
            idx = [np.full(lanes.size, o, dtype=np.int64) for o in offs[:buf.drop]]
            idx += [i + o for i, o in zip(local, offs[buf.drop:])]
            if not bad.any():  # a view leaving its buffer (reported where it was made): stay inside
                for i, n in zip(idx, base.shape):
                    bad |= (i < 0) | (i >= n)
                what = f"(a view at {list(offs)} of {base.name} {list(base.shape)} that leaves the buffer)"
        else:
            idx = local
        if bad.any():
            first = np.flatnonzero(bad)[0]
            at = [int(i[first]) for i in local]
            self.report("bounds", f"{verb} {buf.name}{at} {what} by "
                        f"{C.describe_lanes(lanes[bad])} of tile {self.tile}: index out of bounds", op,
                        lanes[bad], at, fix="check the index arithmetic or guard the access with an if")
            keep = ~bad
            idx, lanes = [i[keep] for i in idx], lanes[keep]
        if isinstance(base, Shared):
            return base, base.phys_map[tuple(idx)], lanes
        return base, base.flat_index(tuple(idx)), lanes

    def count_lane_access(self, base, offsets, lanes, write: bool) -> None:
        if not self.count or offsets.size == 0:
            return
        size = base.itemsize
        addr = base.base + offsets.astype(np.int64) * size
        request = lanes // 32
        if base.space == "shared":
            self.counters.add_shared(*wavefronts(addr, request, size), offsets.size * size, write)
        else:
            self.counters.add_global(*sectors(addr, request, size),
                                     np.unique((request << 40) | addr).size * size, write)

    def box_offsets(self, view, op, verb):
        """(base buffer, offsets of the view's elements in row-major order) of a view/buffer."""
        if not isinstance(view, View):
            if isinstance(view, Shared):
                return view, view.phys_map.reshape(-1)
            return view, np.arange(view.flat.size)
        key = (view.base.layout_key, view.offsets, view.shape)
        hit = self._cache.get(key)
        if hit is not None:
            return view.base, hit
        base, box = view.base, view.box_shape
        if self.box_leaves(op, base, view.offsets, box, verb):
            return base, None
        if isinstance(base, Shared):
            sl = tuple(slice(o, o + s) for o, s in zip(view.offsets, box))
            offs = base.phys_map[sl].reshape(-1)
        else:  # a box of a global buffer is a fixed pattern of offsets moved to its corner
            rel_key = (base.layout_key, box)
            rel = self._cache.get(rel_key)
            if rel is None:
                rel = self._cache[rel_key] = base.box((0,) * len(box), box).reshape(-1)
            offs = rel + int(np.ravel_multi_index(view.offsets, base.shape))
        self._cache[key] = offs
        return base, offs

    def box_leaves(self, op, base, offsets, box, verb) -> bool:
        """Report (TILE-CHECK-3) and return True if the box ``box`` at ``offsets`` leaves ``base``."""
        bad = [a for a, (o, s, n) in enumerate(zip(offsets, box, base.shape)) if o < 0 or o + s > n]
        if bad:
            a = bad[0]
            self.report("bounds", f"{verb} {base.name}[{offsets[a]}:{offsets[a] + box[a]}] in axis {a} "
                        f"(size {base.shape[a]}, {base.space} memory) in tile {self.tile}: the box "
                        f"{list(box)} at offsets {list(offsets)} leaves the buffer", op,
                        (), offsets, fix="check the view offsets or guard the last tile")
        return bool(bad)

    def layout(self, op):
        """The fragment layout of ``op`` (None: cyclic), checked against the launch's lanes."""
        key = ("layout", op)
        if key not in self._cache:
            layout = layout_of(op.attributes)
            if layout is not None and layout.lanes != self.lanes:
                raise KernelError(f"'{op.name}' has a fragment layout for {layout.lanes} lanes, the launch has "
                                  f"{self.lanes}", location=op.location,
                                  fix=f"launch with lanes={layout.lanes}")
            self._cache[key] = layout
        return self._cache[key]

    def owned(self, op, shape, role: str, k_major: bool = False):
        """``(index matrix [lanes, n] into the row-major elements of the operand, group)``:
        what each lane accesses, in order, for fragment op ``op`` under its layout (TILE-COUNT-5).
        ``role`` ``"fragment"``: its owned elements value by value (group: all); ``"a"`` /
        ``"b"`` of an ``mma``: for each ``k`` ascending, the distinct rows of ``a`` (columns of
        ``b``) of its owned elements, ascending (group: one ``k``)."""
        key = ("owned", op, role, tuple(shape))
        hit = self._cache.get(key)
        if hit is None:
            acc = op.results[0].type.shape if op.results else op.operands[1].type.shape
            own = ownership(self.layout(op), int(np.prod(acc)), self.lanes)
            if role == "fragment":
                hit = (own, own.shape[1])
            else:
                lines = np.sort(own // acc[1] if role == "a" else own % acc[1], axis=1)
                keep = np.c_[np.ones(self.lanes, dtype=bool), lines[:, 1:] != lines[:, :-1]]
                counts = keep.sum(axis=1)
                lines = lines[keep].reshape(self.lanes, -1) if (counts == counts[0]).all() else lines
                R = lines.shape[1]
                K = shape[0] if role == "b" or k_major else shape[1]
                k = np.arange(K)[None, :, None]
                line = lines[:, None, :]
                if role == "b":
                    index = k * shape[1] + line
                else:
                    index = k * shape[1] + line if k_major else line * shape[1] + k
                hit = (index.reshape(self.lanes, K * R), R)
            self._cache[key] = hit
        return hit

    def collective_counts(self, op, base, offs, chunk_bytes, write, role="rowmajor", shape=None, own=None):
        """Count a tile-collective access of ``offs`` (row-major elements of a box); with
        ``own`` (``(index matrix, group)`` of :meth:`owned`), each lane's own accesses."""
        if not self.count or offs is None:
            return
        first = int(offs[0]) if offs.size else 0
        # a global box's counts depend on its corner only through the sector alignment
        corner = first if base.space == "shared" else (base.base + first * base.itemsize) % 32
        key = (op, base.layout_key, role, offs.size, corner, shape, chunk_bytes)
        hit = self._cache.get(key)
        if hit is None:
            size = base.itemsize
            addr = base.base + offs.astype(np.int64) * size
            if own is not None:
                index, group = own
                addr, request, access = lane_requests(addr[index], size, group)
            elif role == "column":  # lane m reads a[m, k] for each k: requests by column
                M, K = shape
                addr = addr.reshape(M, K).T.reshape(-1)
                pos = np.arange(addr.size)
                request = (pos // M) * ((M + 31) // 32) + (pos % M) // 32
                access = size
            else:
                per = max(1, chunk_bytes // size)
                chunk = np.arange(offs.size) // per
                addr = addr[::per]
                pos = chunk[::per]
                request = pos // self.lanes * ((self.lanes + 31) // 32) + (pos % self.lanes) // 32
                access = per * size
            if base.space == "shared":
                hit = ("shared",) + wavefronts(addr, request, access) + (offs.size * size,)
            else:
                hit = ("global",) + sectors(addr, request, access) + (offs.size * size,)
            self._cache[key] = hit
        if hit[0] == "shared":
            self.counters.add_shared(*hit[1:], write)
        else:
            self.counters.add_global(*hit[1:], write)

    def chunk_lanes(self, n: int, itemsize: int, chunk_bytes: int) -> np.ndarray:
        key = ("lanes", n, itemsize, chunk_bytes)
        hit = self._cache.get(key)
        if hit is None:
            hit = (np.arange(n) * itemsize // chunk_bytes) % self.lanes
            self._cache[key] = hit
        return hit

    def collective_read(self, op, view, verb, role="rowmajor", chunk=None, own=None):
        """The data of a view (row-major, view shape), checked and counted (moved in
        ``chunk``-byte pieces, default one element; by the lanes' own accesses with ``own``)."""
        base, offs = self.box_offsets(view, op, verb)
        shape = view.shape
        if offs is None:
            return np.zeros(shape, dtype=base.dtype if isinstance(base, Shared) else base.array.dtype)
        if isinstance(base, Shared):
            if self.checks:
                self.check_shared(op, base, offs, ALL_LANES, verb, False)
            data = base.data[offs]
        else:
            data = base.flat[offs]
        self.collective_counts(op, base, offs, chunk or base.itemsize, False, role,
                               shape if role == "column" else None, own)
        return data.reshape(shape)

    def global_write(self, op, base, offs, values, lanes) -> None:
        """Store ``values`` at ``offs`` of a mut global buffer, checking TILE-CHECK-6 first."""
        if not base.mut:
            raise KernelError(f"the kernel stores into {base.name!r}, which is not declared mut",
                              location=op.location, fix=f"annotate it as mut, e.g. {base.name}: mut f32[n]")
        if self.checks:
            for kind, what, flat, who in C.check_global_store(base, offs, values, lanes, self.tile_linear, self.grid):
                idx = [int(i) for i in np.unravel_index(flat, base.shape)]
                self.report(kind, f"writes {base.name}{idx} {what}", op, who, idx,
                            fix="give each lane and each tile its own elements")
        base.flat[offs] = values
        base.written[offs] = True

    # -- barrier phases and cp.async ------------------------------------------------------
    def retire(self, copies) -> None:
        for dst, offs, data, op in copies:
            dst.data[offs] = data
            if self.checks:
                dst.pending[offs] -= 1
                C.mark_write(dst, offs, ALL_LANES, self.phase)
                if self.observer is not None:
                    self.observe(op, dst, offs, ALL_LANES, "cp.async lands in", None)


def _ids(run, op, mask):
    name = op.name.rsplit(".", 1)[1]
    if name == "lane_id":
        return run.lane_ids
    if name == "linear_id":
        return run.lane_ids + run.tile_linear * run.lanes
    if name == "num_lanes":
        return np.int64(run.lanes)
    axis = op.attributes["axis"]
    if name == "tile_id":
        return np.int64(run.tile[axis] if axis < len(run.tile) else 0)
    return np.int64(run.grid[axis] if axis < len(run.grid) else 1)


def _dim(run, op, mask):
    return np.int64(run.env[op.operands[0]].shape[op.attributes["axis"]])


def _constant(run, op, mask):
    return number(op.attributes["value"], _dtype(op.results[0].type))


def _is_float(t) -> bool:
    """Whether values of type ``t`` are floating-point lane values or fragments."""
    return isinstance(t, ScalarType) or isinstance(t, TensorType) and t.rank > 0 and not t.element_kind


def _binary(run, op, mask):
    fn = op.attributes["fn"]
    x, y = (_operand_array(run, op, run.env[v]) for v in op.operands)
    t = op.operands[0].type
    is_float = _is_float(t)
    if fn in T.MATH2_FNS:  # NUM-MATH in the format's accum, rounded once into it (as op.pow)
        return _math(run, op, mask, np.asarray(x), np.asarray(y))
    if fn == "div" and not is_float:
        raise KernelError("'/' of index values; use '//' for integer division", location=op.location,
                          fix="write a // b")
    if is_float and fn in _FLOAT_ARITH:
        out = float_binary(fn, x, y, t.format.name, op.location)
    else:
        with np.errstate(all="ignore"):
            if fn in ("floordiv", "mod") and not is_float:
                if np.any(np.asarray(y)[mask] == 0 if np.ndim(y) else y == 0):
                    raise KernelError(f"integer {fn} by zero in tile {run.tile}", location=op.location,
                                      fix="guard the divisor")
            out = _ARITH[fn](x, y)
    if is_float and fn in _FLOAT_FLOPS:
        run.counters.flops += int(np.size(out)) if isinstance(t, TensorType) else int(mask.sum())
    return out


def _operand_array(run, op, value):
    if isinstance(value, (Global, Shared, View)):
        raise KernelError(f"'{op.name}' computes on lane values and fragments, got the {value.space} buffer "
                          f"{value.name!r}", location=op.location, fix="load it first (tile.load / frag_load)")
    return value


def _unary(run, op, mask):
    fn = op.attributes["fn"]
    x = _operand_array(run, op, run.env[op.operands[0]])
    t = op.results[0].type
    if fn == "not":
        return np.logical_not(x)
    if fn in T.MATH_FNS:  # NUM-MATH in the format's accum, rounded once into it (as op.exp etc.)
        return _math(run, op, mask, np.asarray(x))
    if not _is_float(t):
        if fn not in _UNARY_INDEX:
            raise KernelError(f"'{fn}' of an index value", location=op.location, fix="cast it to f32 first")
        return _UNARY_INDEX[fn](x)
    return float_unary(fn, x, t.format.name, op.location)


def _fma(run, op, mask):
    """TILE-NUM-1: ``x·y + z`` rounded once in the result's format; two FLOPs per element."""
    x, y, z = (_operand_array(run, op, run.env[v]) for v in op.operands)
    t = op.results[0].type
    if not _is_float(t):
        raise KernelError("'fma' of index values", location=op.location, fix="write x * y + z")
    out = float_fma(x, y, z, t.format.name, op.location)
    run.counters.flops += 2 * (int(np.size(out)) if isinstance(t, TensorType) else int(mask.sum()))
    return out


def _math(run, op, mask, *xs):
    """TILE-NUM-1: the NUM-MATH function ``fn`` of ``xs`` in the result format's accum,
    rounded once into it (``math_in_accum``, as the graph's ops); one FLOP per element."""
    fn, t = op.attributes["fn"], op.results[0].type
    computable(t.format.name, f"'{fn}'", op.location)
    out = convert(math_in_accum(fn, *xs, accum=t.policy.accum), _dtype(t))
    run.counters.flops += int(np.size(out)) if isinstance(t, TensorType) else int(mask.sum())
    return out


def _reduce(run, op, mask):
    x = _operand_array(run, op, run.env[op.operands[0]])
    axis = op.attributes["axis"]
    r = reduce_canonical(x, axis, op.attributes["fn"], accum=op.attributes["accum"])
    run.counters.flops += int(x.size)
    return convert(np.expand_dims(r, axis), _dtype(op.results[0].type))


def _cast(run, op, mask):
    x, t = run.env[op.operands[0]], op.results[0].type
    if isinstance(t, ScalarType) and _is_float(op.operands[0].type):
        index = run.env[op.operands[1]] if len(op.operands) > 1 else None
        return cast_value(x, t.policy, op.location, seed=op.attributes.get("seed"), index=index)
    return convert(x, _dtype(t))


def _select(run, op, mask):
    m, a, b = (run.env[v] for v in op.operands)
    return np.where(m, a, b) if np.ndim(m) or np.ndim(a) or np.ndim(b) else (a if m else b)


def _uniform(run, op, mask):
    """TILE-RNG-1: NUM-RNG-5's uniform of each lane's element index, by the numerics RNG."""
    index = np.asarray(run.env[op.operands[0]])
    key = rng.RNGKey(op.attributes["seed"], op.attributes["stream"])
    u = rng.uniform(key, np.maximum(index, 0).astype(np.uint64), _dtype(op.results[0].type))
    run.counters.flops += int(mask.sum()) if index.ndim else 1
    return u if index.ndim else u[()]


def _shfl_xor(run, op, mask):
    """TILE-WARP-1: lane ``l`` gets the value of lane ``l xor offset`` of its warp. Every
    lane of a warp that executes it must be present and active (the full-warp mask of
    ``__shfl_xor_sync(0xffffffff, …)``); otherwise a ``barrier`` finding, and such a lane
    reads its own value."""
    x = run.env[op.operands[0]]
    lanes = run.lane_ids
    warps = np.unique(lanes[mask] // T.WARP)
    run.counters.shuffles += int(warps.size)
    members = (warps[:, None] * T.WARP + np.arange(T.WARP)).reshape(-1)
    absent = members[(members >= run.lanes) | ~np.isin(members, lanes[mask])]
    if absent.size:
        run.report("barrier", f"a warp shuffle (shfl_xor by {op.attributes['offset']}) in tile {run.tile} is executed "
                   f"by {C.describe_lanes(lanes[mask])} but not by {C.describe_lanes(absent)} of the same warp "
                   f"(a divergent or partial warp: the values read from those lanes are undefined on a GPU)",
                   op, absent, fix="execute warp shuffles with all 32 lanes of the warp, outside lane-varying ifs, "
                                   "with lanes a multiple of 32")
    if np.ndim(x) == 0:
        return x
    partner = lanes ^ op.attributes["offset"]
    ok = partner < run.lanes
    ok[ok] &= mask[partner[ok]]
    return np.where(ok, x[np.where(ok, partner, lanes)], x)


def _load(run, op, mask):
    buf = run.env[op.operands[0]]
    dtype = _dtype(op.results[0].type)
    out = np.zeros(run.lanes, dtype=dtype)
    base, offs, lanes = run.index_of(op, buf, [run.env[v] for v in op.operands[1:]], mask, "reads")
    if isinstance(base, Shared):
        if run.checks and offs.size:
            run.check_shared(op, base, offs, lanes, "reads", False)
        out[lanes] = base.data[offs]
    else:
        out[lanes] = base.flat[offs]
    run.count_lane_access(base, offs, lanes, False)
    return out


def _store(run, op, mask):
    buf = run.env[op.operands[0]]
    base, offs, lanes = run.index_of(op, buf, [run.env[v] for v in op.operands[1:-1]], mask, "writes")
    values = np.broadcast_to(run.env[op.operands[-1]], (run.lanes,))[lanes]
    if offs.size == 0:
        return None
    target = base.dtype if isinstance(base, Shared) else base.array.dtype
    if values.dtype != target:  # a value of another format is stored as `cast` converts it
        values = convert(values, target)
    if isinstance(base, Shared):
        if run.checks:
            uniq, first, counts = np.unique(offs, return_index=True, return_counts=True)
            if (counts > 1).any():
                dup = np.isin(offs, uniq[counts > 1])
                run._problem(("race", dup, "write-after-write race: several lanes store to it in one store"),
                             op, base, offs, lanes, "writes")
            run.check_shared(op, base, offs, lanes, "writes", True)
        base.data[offs] = values
    else:
        run.global_write(op, base, offs, values, lanes)
    run.count_lane_access(base, offs, lanes, True)
    return None


def _alloc(run, op, mask):
    """A tile's allocations are static (like CUDA ``__shared__``): an alloc op run again in
    the same tile (in a loop) gives the same buffer, at its place in
    :func:`~tessera_ref.ir.tile.shared_layout` (TILE-MEM-2)."""
    buf = run.allocs.get(op)
    if buf is not None:
        return buf
    t = op.results[0].type
    name = op.results[0].name or f"smem@{op.location or '?'}"
    layout = run._cache.get("smem")
    if layout is None:
        layout = run._cache["smem"] = T.shared_layout(run.func)[0]
    buf = Shared(name, t.shape, _dtype(t), op.attributes["swizzle"], op.attributes["pad"], layout[op], run.checks)
    run.allocs[op] = buf
    return buf


def _subview(run, op, mask):
    base = run.env[op.operands[0]]
    offsets = tuple(run.uniform(run.env[v], op, mask, "a view offset") for v in op.operands[1:])
    shape = op.results[0].type.shape
    run.box_leaves(op, base, offsets, (1,) * (len(offsets) - len(shape)) + tuple(shape), "views")
    if isinstance(base, View):
        offsets = tuple(a + b for a, b in zip(base.offsets, (0,) * base.drop + offsets))
        base = base.base
    return View(base, offsets, shape, len(base.shape) - len(shape))


def _aligned_pieces(dbase, doffs, sbase, soffs, chunk: int) -> bool:
    """Whether ``chunk``-byte pieces of the copy are contiguous and naturally aligned in both
    buffers (hardware.md: cp.async copies 4, 8 or 16 aligned bytes)."""
    size = dbase.itemsize
    per = chunk // size
    if chunk < size or per == 0 or doffs.size % per:
        return False
    for base, offs in ((dbase, doffs), (sbase, soffs)):
        pieces = offs.reshape(-1, per)
        if ((base.base + pieces[:, 0] * size) % chunk).any() or (pieces != pieces[:, :1] + np.arange(per)).any():
            return False
    return True


def _copy_chunk(run, op, dbase, doffs, sbase, soffs) -> int:
    """The cp.async piece size of a copy: its ``bytes`` attribute, which must fit the data (a
    KernelError otherwise), or else the largest of 16, 8, 4 bytes whose pieces fit (else one
    element)."""
    key = ("chunk", op, dbase.layout_key, int(doffs[0]), sbase.layout_key,
           (sbase.base + int(soffs[0]) * sbase.itemsize) % 16, doffs.size)
    hit = run._cache.get(key)
    if hit is None:
        given = op.attributes.get("bytes")
        if given is not None and not _aligned_pieces(dbase, doffs, sbase, soffs, given):
            raise KernelError(f"cp_async copies {given}-byte pieces, but the pieces of this copy ({sbase.name} -> "
                              f"{dbase.name}, in tile {run.tile}) are not contiguous and {given}-byte aligned in "
                              f"both buffers (hardware.md's cp.async rule)", location=op.location,
                              fix="align the views (offsets, row lengths, padding) or copy smaller pieces")
        hit = given or next((c for c in (16, 8, 4) if _aligned_pieces(dbase, doffs, sbase, soffs, c)),
                            dbase.itemsize)
        run._cache[key] = hit
    return hit


def _cp_async(run, op, mask):
    dst, src = run.env[op.operands[0]], run.env[op.operands[1]]
    sbase, soffs = run.box_offsets(src, op, "cp.async reads")
    dbase, doffs = run.box_offsets(dst, op, "cp.async writes")
    if doffs is None or soffs is None:
        return None
    if not isinstance(dbase, Shared) or isinstance(sbase, Shared) or soffs.size != doffs.size:
        raise KernelError(f"cp_async copies global memory into shared memory of the same size; got "
                          f"{src.space} {list(getattr(src, 'shape', ()))} -> {dbase.space} {list(dst.shape)}",
                          location=op.location, fix="copy a slice of the global buffer of the shared buffer's size")
    if op.attributes.get("transpose"):  # the destination's offsets in the source's row-major order
        doffs = doffs.reshape(dst.shape).T.reshape(-1)
    chunk = _copy_chunk(run, op, dbase, doffs, sbase, soffs)
    data = run.collective_read(op, src, "cp.async reads", chunk=chunk)
    if run.checks:
        run.check_shared(op, dbase, doffs, ALL_LANES, "cp.async writes", True, asynchronous=True)
        dbase.pending[doffs] += 1
    run.collective_counts(op, dbase, doffs, chunk, True)
    run.pending.append((dbase, doffs, data.reshape(-1), op))
    return None


def _commit(run, op, mask):
    run.groups.append(run.pending)
    run.pending = []


def _wait(run, op, mask):
    keep = op.attributes["pending"]
    while len(run.groups) > keep:
        run.retire(run.groups.pop(0))


def _barrier(run, op, mask):
    if not mask.all():
        off = run.lane_ids[~mask]
        run.report("barrier", f"tbarrier() in tile {run.tile} is reached by {C.describe_lanes(run.lane_ids[mask])} "
                   f"but not by {C.describe_lanes(off)} (a divergent barrier: the tile deadlocks on a GPU)",
                   op, off, fix="move the barrier out of the lane-varying if")
    run.phase += 1
    run.counters.barriers += 1


def _fill(run, op, mask):
    t = op.results[0].type
    return np.full(t.shape, number(op.attributes["value"], _dtype(t)))


def _frag_load(run, op, mask):
    layout = run.layout(op)
    shape = op.results[0].type.shape
    return run.collective_read(op, run.env[op.operands[0]], "frag_load reads", role="owned" if layout else "rowmajor",
                               own=run.owned(op, shape, "fragment") if layout else None)


def _frag_store(run, op, mask):
    view, frag = run.env[op.operands[0]], run.env[op.operands[1]]
    base, offs = run.box_offsets(view, op, "frag_store writes")
    if offs is None:
        return None
    if isinstance(base, Shared):
        if run.checks:  # a collective write is every lane's (TILE-VIS-3)
            run.check_shared(op, base, offs, ALL_LANES, "frag_store writes", True)
        base.data[offs] = convert(frag.reshape(-1), base.dtype)  # TILE-NUM-2, as a lane store
    else:
        run.global_write(op, base, offs, convert(frag.reshape(-1), base.array.dtype),
                         run.chunk_lanes(offs.size, base.itemsize, base.itemsize))
    layout = run.layout(op)
    run.collective_counts(op, base, offs, base.itemsize, True, "owned" if layout else "rowmajor",
                          own=run.owned(op, view.shape, "fragment") if layout else None)
    return None


def _mma(run, op, mask):
    a, b, acc = (run.env[v] for v in op.operands)
    layout, k_major = run.layout(op), op.attributes.get("transpose_a", False)
    if not isinstance(a, np.ndarray):
        a = run.collective_read(op, a, "mma reads", role="owned a" if layout else "column",
                                own=run.owned(op, a.shape, "a", k_major) if layout else None)
    if not isinstance(b, np.ndarray):
        b = run.collective_read(op, b, "mma reads", role="owned b" if layout else "rowmajor",
                                own=run.owned(op, b.shape, "b") if layout else None)
    if k_major:
        a = a.T
    M, K = a.shape
    run.counters.flops += 2 * M * K * b.shape[1]
    return convert(_mma_values(a, b, acc, op.attributes["accum"]), _dtype(op.results[0].type))


_F32 = np.dtype(np.float32)


def _mma_values(a, b, acc, accum: str) -> np.ndarray:
    """``dot_canonical(a, b, accum=accum, c=acc)`` (NUM-RED-1). For f32 operands, accumulator
    and accumulation — where ``dot_canonical`` always runs the fma kernel — that kernel is
    called directly, skipping the per-call dispatch (the bits are the same). A tensor-core
    ``accum`` (``"tc:sm80"``) computes the model's block FMAs (NUM-TC-5)."""
    if accum.startswith(tc.PREFIX):
        return tc.mma(a, b, acc, accum)
    if accum == "f32" and a.dtype == b.dtype == acc.dtype == _F32:
        import numba  # loaded with the first mma, as the numerics package does

        from ...numerics.kernels import dot_rows

        out = np.array(acc, order="C")
        threads = numba.get_num_threads()
        numba.set_num_threads(1)  # a tile-sized call: one thread (same bits, no pool wake-up)
        try:
            dot_rows(out[None], np.ascontiguousarray(a)[None], np.ascontiguousarray(b)[None],
                     exact_products=False)
        finally:
            numba.set_num_threads(threads)
        return canonical_nan(out)
    return dot_canonical(a, b, accum=accum, c=acc)


def _for(run, op, mask):
    lb, ub, step = (run.uniform(run.env[v], op, mask, what) for v, what in
                    zip(op.operands[:3], ("the loop start", "the loop end", "the loop step")))
    if step <= 0:
        raise KernelError(f"tile.range step must be positive, got {step}", location=op.location,
                          fix="use a positive step")
    carried = [run.env[v] for v in op.operands[3:]]
    block = op.regions[0].entry
    iv, params = block.args[0], block.args[1:]
    env = run.env
    for i in range(lb, ub, step):
        env[iv] = np.int64(i)
        for p, v in zip(params, carried):
            env[p] = v
        carried = run.block(block, mask)
    return carried if len(op.results) != 1 else carried[0]


def _if(run, op, mask):
    cond = run.env[op.operands[0]]
    then_block, else_block = op.regions[0].entry, op.regions[1].entry
    if np.ndim(cond) == 0:
        out = run.block(then_block if cond else else_block, mask)
    else:
        if any(isinstance(r.type, TensorType) and r.type.rank for r in op.results):
            raise KernelError("a lane-varying if cannot yield a tile-level value (buffer or fragment, "
                              "TILE-MEM-3)", location=op.location, fix="make the condition uniform")
        inner = _collective_in(run, op)
        if inner is not None:
            raise KernelError(f"'{inner.name}' is issued by the whole tile and cannot be under a lane-varying if "
                              f"(line {op.location}; TILE-MEM-3)", location=inner.location,
                              fix="move it out of the if, or make the condition uniform (tile ids and constants)")
        cond = cond.astype(bool)
        m_then, m_else = mask & cond, mask & ~cond
        a = run.block(then_block, m_then) if m_then.any() else None
        b = run.block(else_block, m_else) if m_else.any() else None
        if a is None or b is None:
            out = a if b is None else b
            out = out or []
        else:
            out = [np.where(cond, x, y) for x, y in zip(a, b)]
    if not op.results:
        return None
    return out if len(op.results) != 1 else out[0]


_COLLECTIVE = tuple(T._name(k) for k in ("cp_async", "frag_load", "frag_store", "mma"))


def _collective_in(run, op):
    """The first tile-collective op nested in ``op``'s regions, or None (cached per op): the
    check does not depend on which lanes take the branches."""
    key = ("collective", op)
    if key not in run._cache:
        run._cache[key] = next((o for o in op.walk() if o.name in _COLLECTIVE), None)
    return run._cache[key]


#: The handler of each Tile IR op: ``handler(run, op, mask)`` returns its result(s).
HANDLERS = {T._name(k): v for k, v in {
    "lane_id": _ids, "linear_id": _ids, "num_lanes": _ids, "tile_id": _ids, "num_tiles": _ids,
    "dim": _dim, "constant": _constant, "binary": _binary, "unary": _unary, "fma": _fma, "reduce": _reduce, "cast": _cast,
    "select": _select, "shfl_xor": _shfl_xor, "uniform": _uniform, "load": _load, "store": _store, "alloc": _alloc, "subview": _subview,
    "cp_async": _cp_async, "cp_async_commit": _commit, "cp_async_wait": _wait, "barrier": _barrier,
    "fill": _fill, "frag_load": _frag_load, "frag_store": _frag_store, "mma": _mma, "for": _for,
    "if": _if}.items()}

#: The Tile IR ops without a handler, and why.
NO_HANDLER = {T.YIELD: "the terminator of for/if regions: Run.block returns its operands to the for/if handler"}


def run(program, args, *, grid=1, lanes=128, checks: bool = True, counters: bool = True,
        preset="H100", func: str | None = None, on_error: str = "raise", observer=None) -> TileReport:
    """Run a tile kernel (TILE-EXEC-1) over ``grid`` tiles of ``lanes`` lanes on ``args``.

    ``program`` is a Tile IR module (or its kernel func); ``args`` a list in parameter order
    or a dict by name: NumPy arrays for global buffers (``mut`` ones are updated in place),
    numbers for scalars. ``checks`` turns the race / uninitialized / barrier checkers on
    (bounds are always checked); ``counters`` the performance counters. With
    ``on_error="raise"`` the first finding raises its error (a :class:`TesseraError` naming
    the kernel line, tile and lanes); with ``"collect"`` every finding is recorded in the
    report and the run goes on. ``observer``, with ``checks``, is called with a
    :class:`~tessera_ref.interp.tile.checkers.SharedAccess` for every shared-memory access the
    checkers see, in order (TILE-CHECK-7). Returns a :class:`TileReport`.
    """
    if on_error not in ("raise", "collect"):
        raise KernelError(f"on_error is 'raise' or 'collect', got {on_error!r}", fix="pick one")
    r = Run(_kernel_func(program, func), args, grid, lanes, bool(checks), bool(counters), on_error, observer)
    try:
        r.run()
    except _Abort as abort:
        finding = abort.args[0]
        raise C.ERRORS[finding.kind](finding.what, location=finding.location, fix=finding.fix) from None
    fmt = get_format(r.dtype_hint or "f32").name
    c = r.counters
    return TileReport(
        kernel=r.func.attributes["sym_name"], grid=r.grid, lanes=r.lanes,
        outputs={n: g.array for n, g in r.globals.items() if g.mut},
        coverage={n: (int(g.written.sum()), int(g.written.size)) for n, g in r.globals.items() if g.mut},
        counters=c, findings=r.findings,
        roofline=roofline((c.flops, c.hbm_bytes), fmt, preset) if counters else None,
        preset=str(preset))
