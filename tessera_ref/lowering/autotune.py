"""Autotuning: sweep a space of configurations with the cost model (docs/spec/lowering.md, LOWER-TUNE).

Two entry points share one sweep engine (:func:`sweep`):

- :func:`autotune_kernel` — the variants of a ``@kernel.autotune(space=...)`` kernel
  (``kernel.tune(problem)`` calls it). Each configuration's Tile IR is checked for its static
  shared memory against the preset's per-block limit (over it: rejected, with the bytes and
  the limit, never run), then run once in the tile interpreter without checkers on copies of
  the arguments; its cost is the roofline time of the counted FLOPs and HBM bytes. The
  winner is then run once more with the checkers on: a configuration with findings (a race,
  an out-of-bounds access ...) is rejected and the next fastest is checked (LOWER-TUNE-4). A
  space parameter on which neither the kernel's Tile IR nor its launch depends is an
  :class:`~tessera_ref.errors.AutotuneWarning` naming it (LOWER-TUNE-5).
- :func:`autotune_schedule` — schedule directives for one op of a Graph IR function
  (tile shapes, stages, padding ...): each configuration is fitted to the op
  (SCHED-FIT-1) and priced by :mod:`.cost` without running anything.

The sweep prints one line per configuration to stderr (``progress=False`` to silence it;
no progress-bar dependency), picks the fastest accepted configuration (the first of equal
times, in space order), and caches the outcome keyed by the problem, the preset and the
space: in-process, and in ``autotune.json`` in :func:`tessera_ref.cache.directory` unless
``cache=False`` (LOWER-TUNE-6: records checked on read, a bad one ignored with one
:class:`~tessera_ref.errors.CacheWarning`; stores under a lock). A cached result is returned
with ``cached=True`` and no sweep is re-run; a winner read from the file is first checked
again (``verify``, LOWER-TUNE-4), and one that fails is swept again.
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import sys
import warnings
from dataclasses import dataclass, field

import numpy as np

from .. import cache as disk
from .. import context
from ..errors import AutotuneError, AutotuneWarning, CacheError, TesseraError, user_location
from ..ir import Module, Operation
from ..ir import schedule as S
from ..ir import tile as T
from ..ir.launch import Launch
from ..numerics import get_format
from ..sim.presets import get_preset
from .cost import kernel_cost
from .family import family_of
from .graph_to_schedule import graph_to_schedule

__all__ = ["Trial", "AutotuneResult", "sweep", "autotune_kernel", "autotune_schedule", "shared_bytes",
           "cache_path", "clear_cache", "unused_parameters"]

_MEMORY: dict = {}


@dataclass
class Trial:
    """One configuration: its time (seconds) or the reason it was rejected, and what was counted."""

    config: dict
    seconds: float | None
    reason: str | None = None
    details: dict = field(default_factory=dict)


@dataclass
class AutotuneResult:
    """The outcome of a sweep: every trial, the best configuration, whether it came from the cache."""

    key: str
    preset: str
    trials: list
    best: dict
    cached: bool = False
    best_variant: object = None

    def text(self) -> str:
        """A table of the trials for a person."""
        lines = [f"autotune on {self.preset}{' (cached)' if self.cached else ''}: best {_fmt(self.best)}"]
        for t in self.trials:
            mark = "*" if t.config == self.best else " "
            what = f"{t.seconds * 1e6:10.3f} us" if t.seconds is not None else f"rejected: {t.reason}"
            lines.append(f" {mark} {_fmt(t.config):40s} {what}")
        return "\n".join(lines)

    __str__ = text


def _fmt(config: dict) -> str:
    return " ".join(f"{k}={v}" for k, v in config.items())


def cache_path() -> str:
    """The JSON file of cached sweeps (``$TESSERA_CACHE_DIR/autotune.json``)."""
    return str(disk.root() / _FILE)


_FILE, _LOCK_FILE = "autotune.json", "autotune.lock"
#: The largest records file read (a bigger one is ignored with a warning).
_FILE_BYTES = 64 << 20


def clear_cache() -> None:
    """Forget every cached sweep (in-process and on disk)."""
    _MEMORY.clear()
    folder = disk.directory()
    with disk.locked(folder / _LOCK_FILE):
        try:
            os.remove(folder / _FILE)
        except FileNotFoundError:
            pass
        except OSError as exc:
            raise CacheError(f"cannot remove the autotune records {folder / _FILE}: {exc.strerror}",
                             fix=f"remove it by hand, or set {disk.ENV} to another directory") from None


def _load_disk(folder) -> dict:
    """The records of ``folder``'s file: ``{}`` when there is none, and with one CacheWarning
    when it is not a JSON object in a file of the user's that nobody else can write."""
    file = folder / _FILE
    data, why = disk.read_private(file, limit=_FILE_BYTES)
    if data is None and why == disk.MISSING:
        return {}
    try:
        records = json.loads(data) if data is not None else None
    except ValueError:
        records, why = None, "is not JSON"
    if not isinstance(records, dict):
        disk.warn_once(str(file), f"the autotune records {file} {why or 'are not a JSON object'}: they are ignored "
                                   f"(sweeps run again and rewrite the file)")
        return {}
    return records


def _store_disk(key: str, record: dict) -> None:
    """Add ``record`` under ``key``: read, updated and replaced under a lock, so concurrent
    stores (threads, processes) lose nothing."""
    folder = disk.directory()
    try:
        with disk.locked(folder / _LOCK_FILE):
            records = _load_disk(folder)
            records[key] = record
            disk.write_atomic(folder / _FILE, json.dumps(records, indent=1, sort_keys=True, default=str).encode())
    except OSError as exc:
        disk.warn_once(str(folder / _FILE), f"cannot write the autotune records {folder / _FILE} ({exc.strerror}): "
                                             f"sweeps are not cached on disk")


def _jsonable(config: dict) -> dict:
    return {k: (list(v) if isinstance(v, tuple) else v) for k, v in config.items()}


def _same(a, b) -> bool:
    return json.dumps(a, sort_keys=True, default=str) == json.dumps(b, sort_keys=True, default=str)


def _well_formed(record, configs) -> bool:
    """Whether ``record`` is one :func:`sweep` stores for ``configs``: a trial per
    configuration, in order; each timed (finite, non-negative seconds) or rejected with a
    reason; ``best`` the fastest timed one, the first among equals (LOWER-TUNE-6)."""
    try:
        trials = [Trial(t["config"], t["seconds"], t["reason"], t["details"]) for t in record["trials"]]
        best = record["best"]
    except (TypeError, KeyError):
        return False
    if len(trials) != len(configs) or not all(_same(t.config, _jsonable(c)) for t, c in zip(trials, configs)):
        return False
    for t in trials:
        seconds = isinstance(t.seconds, (int, float)) and not isinstance(t.seconds, bool) and math.isfinite(t.seconds)
        timed = seconds and t.seconds >= 0 and t.reason is None
        if not isinstance(t.details, dict) or not (timed or t.seconds is None and isinstance(t.reason, str)):
            return False
    timed = [t for t in trials if t.reason is None]
    return bool(timed) and _same(min(timed, key=lambda t: t.seconds).config, best)


def sweep(configs, evaluate, *, key: str, preset, progress: bool = True, cache: bool = True,
          label: str | None = None, verify=None) -> AutotuneResult:
    """Run ``evaluate(config) -> (seconds, details)`` over ``configs`` (it raises
    :class:`Rejected` to reject one) and return the best; see the module docstring. ``key``
    identifies the problem in the cache, ``label`` names it in the progress lines.
    ``verify(config) -> reason or None``, if given, vets the fastest accepted configurations
    in order: the first it passes is the best; each it fails is rejected with its reason."""
    configs = [dict(c) for c in configs]
    if not configs:
        raise AutotuneError("the autotuning space is empty", fix="give every parameter at least one value")
    preset_name = get_preset(preset).name
    full_key = hashlib.sha256(json.dumps([key, preset_name, [_jsonable(c) for c in configs]], sort_keys=True,
                                         default=str).encode()).hexdigest()[:32]
    record = _MEMORY.get(full_key)
    if record is None and cache:
        record = _checked_record(full_key, configs, verify, label or key)
    if record is not None:
        trials = [Trial(t["config"], t["seconds"], t["reason"], t.get("details", {})) for t in record["trials"]]
        if progress:
            print(f"[autotune] {label or key} on {preset_name}: cached, best {_fmt(record['best'])}", file=sys.stderr)
        return AutotuneResult(full_key, preset_name, trials, record["best"], cached=True)
    trials = []
    for i, config in enumerate(configs, 1):
        try:
            seconds, details = evaluate(config)
            trial = Trial(_jsonable(config), float(seconds), None, details)
        except Rejected as exc:
            trial = Trial(_jsonable(config), None, str(exc), {})
        trials.append(trial)
        if progress:
            what = f"{trial.seconds * 1e6:.3f} us" if trial.reason is None else f"rejected: {trial.reason}"
            print(f"[autotune] {label or key} {i}/{len(configs)} {_fmt(config)}: {what}", file=sys.stderr)
    best = None
    for trial in sorted((t for t in trials if t.reason is None), key=lambda t: t.seconds):  # stable: space order
        problem = verify(trial.config) if verify is not None else None
        if problem is None:
            best = trial.config
            break
        trial.details["seconds_unchecked"], trial.seconds, trial.reason = trial.seconds, None, problem
        if progress:
            print(f"[autotune] {label or key} {_fmt(trial.config)}: rejected with the checkers on: {problem}",
                  file=sys.stderr)
    if best is None:
        reasons = "; ".join(f"{_fmt(t.config)}: {t.reason}" for t in trials)
        raise AutotuneError(f"every configuration was rejected on {preset_name}: {reasons}",
                            fix="add smaller tiles or fewer stages to the space, and fix what the checkers found")
    record = {"best": best, "trials": [t.__dict__ for t in trials]}
    _MEMORY[full_key] = record
    if cache:
        _store_disk(full_key, record)
    return AutotuneResult(full_key, preset_name, trials, best)


def _checked_record(full_key: str, configs, verify, label: str) -> dict | None:
    """The record of ``full_key`` in the disk cache when it is well formed and its winner
    passes ``verify`` again (then kept in-process), else None with one CacheWarning."""
    folder = disk.directory()
    record = _load_disk(folder).get(full_key)
    if record is None:
        return None
    where = f"the autotune record of {label} in {folder / _FILE}"
    if not _well_formed(record, configs):
        disk.warn_once(f"{folder / _FILE}:{full_key}", f"{where} is not one a sweep writes: it is ignored and the "
                                                        f"space swept again")
        return None
    problem = verify(record["best"]) if verify is not None else None
    if problem is not None:
        disk.warn_once(f"{folder / _FILE}:{full_key}", f"{where} names {_fmt(record['best'])} as the winner, which "
                                                        f"the checkers reject: {problem}; the space is swept again")
        return None
    _MEMORY[full_key] = record
    return record


class Rejected(Exception):
    """Raised by an evaluation to reject its configuration, with the reason."""


# ---------------------------------------------------------------------------------------
# @kernel.autotune variants

def shared_bytes(module: Module) -> int:
    """Static shared memory of a Tile IR module's kernels: every ``alloc``'s elements (rows
    padded by ``pad``) times the element size, summed."""
    total = 0
    for op in module.walk():
        if op.name == f"{T.DIALECT}.alloc":
            t = op.results[0].type
            *rows, last = t.shape
            total += int(np.prod(rows, dtype=np.int64)) * (last + op.attributes["pad"]) * get_format(t.policy.storage).bits // 8
    return total


def _describe_args(args) -> list:
    items = args.items() if isinstance(args, dict) else enumerate(args)
    return [(str(k), list(np.shape(v)), str(getattr(v, "dtype", type(v).__name__))) for k, v in items]


def _copy_args(args):
    if isinstance(args, dict):
        return {k: (np.array(v) if isinstance(v, np.ndarray) else v) for k, v in args.items()}
    return [np.array(v) if isinstance(v, np.ndarray) else v for v in args]


def autotune_kernel(variants, problem: dict, preset="H100", *, progress: bool = True,
                    cache: bool = True, screen=None) -> AutotuneResult:
    """Pick the fastest of ``variants`` (``[(config, kernel or Tile IR module)]``) on ``problem``
    (``dict(args=..., grid=..., lanes=...)``, grid/lanes values or callables of the config;
    optional ``key``); see the module docstring. ``screen(module) -> reason or None``, if given,
    runs first on each configuration and rejects it with the reason it returns (a backend's
    compiler check, e.g. the CUDA backend's register budget); its ``key`` attribute, if any,
    is part of the cache key."""
    oracle = context.backend("interp")  # the ranking is the interpreter's counters and roofline
    variants = list(variants)
    if not variants:
        raise AutotuneError("autotune_kernel got no variants", fix="give the space at least one configuration")
    if "args" not in problem or "grid" not in problem:
        raise AutotuneError(f"an autotuning problem needs args and grid, got {sorted(problem)}",
                            fix="problem=dict(args=[x, y, 2.0], grid=lambda c: m // c['BM'], lanes=128)")
    limit = get_preset(preset).smem_per_block
    by_config = {json.dumps(_jsonable(c), sort_keys=True, default=str): (c, k) for c, k in variants}

    def module_of(kernel):
        return kernel if isinstance(kernel, Module) else kernel.module

    def pick(value, config):
        return value(config) if callable(value) else value

    def evaluate(config):
        _, kernel = by_config[json.dumps(_jsonable(config), sort_keys=True, default=str)]
        module = module_of(kernel)
        reason = screen(module) if screen is not None else None
        if reason:
            raise Rejected(reason)
        smem = shared_bytes(module)
        if smem > limit:
            raise Rejected(f"needs {smem:,} B of shared memory per block, over the {limit:,} B limit")
        try:
            report = oracle.launch(Launch(module, None, pick(problem["grid"], config),
                                          pick(problem.get("lanes", 128), config), _copy_args(problem["args"]),
                                          checks=False, counters=True, preset=preset))
        except TesseraError as exc:
            raise Rejected(f"{type(exc).__name__}: {exc}") from None
        c = report.counters
        return report.roofline.time, {"flops": c.flops, "hbm_bytes": c.hbm_bytes, "smem_bytes": smem,
                                      "smem_wavefronts": c.smem_wavefronts}

    def verify(config):
        """The first error the checkers find in ``config``'s run, or None (warnings are kept
        in the trial's details, not rejected)."""
        _, kernel = by_config[json.dumps(_jsonable(config), sort_keys=True, default=str)]
        try:
            report = oracle.launch(Launch(module_of(kernel), None, pick(problem["grid"], config),
                                          pick(problem.get("lanes", 128), config), _copy_args(problem["args"]),
                                          checks=True, counters=False, preset=preset, on_error="collect"))
        except TesseraError as exc:
            return f"{type(exc).__name__}: {exc}"
        errors = [f for f in report.findings if f.kind != "warning"]
        return f"{len(errors)} checker finding(s), first: {errors[0]}" if errors else None

    name = getattr(variants[0][1], "name", "kernel")
    for parameter, values in unused_parameters(variants, problem):
        _warn_unused(name, parameter, values)
    source = hashlib.sha256(str(module_of(variants[0][1])).encode()).hexdigest()[:16]
    key = problem.get("key") or json.dumps([name, source, _describe_args(problem["args"]),
                                            repr(problem["grid"]) if not callable(problem["grid"]) else "f(config)",
                                            repr(problem.get("lanes", 128)), getattr(screen, "key", None),
                                            "winner checked"])  # results cached before LOWER-TUNE-4 do not apply
    result = sweep([c for c, _ in variants], evaluate, key=key, preset=preset, progress=progress, cache=cache,
                   label=name, verify=verify)
    result.best_variant = by_config[json.dumps(result.best, sort_keys=True, default=str)][1]
    return result


def unused_parameters(variants, problem: dict) -> list:
    """``[(parameter, values)]``: the space parameters with two or more values on which
    nothing depends — among configurations that differ only in it, the Tile IR text and the
    launch (grid, lanes) are the same (LOWER-TUNE-5)."""
    def launch_of(config, kernel):
        try:
            launch = tuple(repr(v(config) if callable(v) else v) for v in (problem.get("grid"), problem.get("lanes", 128)))
        except Exception:  # noqa: BLE001 - a launch that fails to compute is not "the same"; the sweep reports it
            launch = (id(config),)
        return (str(kernel if isinstance(kernel, Module) else kernel.module), *launch)

    signatures = [(_jsonable(c), launch_of(c, k)) for c, k in variants]
    unused = []
    for parameter in signatures[0][0]:
        values = list(dict.fromkeys(json.dumps(c[parameter], default=str) for c, _ in signatures))
        if len(values) < 2:
            continue
        groups: dict = {}
        for config, signature in signatures:
            rest = json.dumps({k: v for k, v in config.items() if k != parameter}, sort_keys=True, default=str)
            groups.setdefault(rest, set()).add(signature)
        if all(len(g) == 1 for g in groups.values()):
            unused.append((parameter, [json.loads(v) for v in values]))
    return unused


def _warn_unused(kernel: str, parameter: str, values: list) -> None:
    message = AutotuneWarning(
        f"autotune space parameter {parameter!r} of kernel {kernel!r} changes nothing: for every value {values} "
        f"the kernel's Tile IR and its launch (grid, lanes) are the same, so the kernel body never reads it and "
        f"the sweep runs the same kernel {len(values)} times - read {parameter} in the kernel body or in the "
        f"problem's grid/lanes, or drop it from the space")
    filename, _, line = (user_location() or "").rpartition(":")
    if filename and line.isdigit():
        warnings.warn_explicit(message, AutotuneWarning, filename, int(line))
    else:
        warnings.warn(message, stacklevel=3)


# ---------------------------------------------------------------------------------------
# schedules of Graph IR ops

def autotune_schedule(graph, space: dict, preset="H100", *, op_index: int | None = None, progress: bool = True,
                      cache: bool = True) -> AutotuneResult:
    """The best schedule directives from ``space`` (``dict(tile=[(128, 128, 32), ...],
    stages=[2, 3])``) for one op of a Graph IR module or function — the op at ``op_index``
    in the function body, by default the first op with a tile lowering — priced by the cost
    model. Configurations whose shared memory exceeds the preset's limit are rejected."""
    if not isinstance(space, dict) or not space or not all(isinstance(v, (list, tuple)) and v for v in space.values()):
        raise AutotuneError(f"an autotuning space is a dict of non-empty lists, got {space!r}",
                            fix="space=dict(tile=[(64, 64, 32), (128, 128, 32)], stages=[2, 3])")
    func = graph if isinstance(graph, Operation) and graph.name == "tessera.func" else graph.body.first_op
    ops = list(func.regions[0].entry)
    index = op_index if op_index is not None else next((i for i, o in enumerate(ops) if family_of(o)), None)
    if index is None or family_of(ops[index]) is None:
        raise AutotuneError("no op with a tile lowering to tune", fix="pass op_index= of a matmul, softmax, ...")
    target = ops[index]
    configs = [dict(zip(space, values)) for values in itertools.product(*space.values())]

    def evaluate(config):
        sched = graph_to_schedule(func, per_op={index: config})
        kop = [o for o in sched.body.first_op.regions[0].entry if o.name == S.KERNEL][
            sum(1 for o in ops[:index] if family_of(o))]
        cost = kernel_cost(kop, preset)
        ok, reason = cost.fits(preset)
        if not ok:
            raise Rejected(reason)
        return cost.seconds, {"fitted": S.schedule_of(kop), "hbm_bytes": cost.hbm_bytes,
                              "smem_bytes": cost.smem_bytes}

    key = json.dumps(["schedule", str(target).split(" loc(")[0]])
    label = f"{target.name.rsplit('.', 1)[-1]}({', '.join(str(v.type) for v in target.operands)})"
    return sweep(configs, evaluate, key=key, preset=preset, progress=progress, cache=cache, label=label)
