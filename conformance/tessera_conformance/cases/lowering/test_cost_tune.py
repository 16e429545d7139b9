"""LOWER-COST-1 (the cost model against what running the kernel counts, and its time formula)
and LOWER-TUNE (sweeps, rejection, progress, the cache and its records file)."""
import json
import math

import numpy as np
import pytest

from tessera_ref import backends, kernel, op
from tessera_ref.errors import AutotuneError, CacheWarning
from tessera_ref.ir import TensorType
from tessera_ref.lowering import autotune as AT
from tessera_ref.lowering import graph_to_schedule
from tessera_ref.lowering.cost import kernel_cost
from tessera_ref.numerics import as_policy
from tessera_ref.ops.values import Trace
from tessera_ref.sim.presets import get_preset
from tessera_conformance import clause

from ..tiles.support import counters, round_to
from .support import alloc_bytes, kernels, lowered, tile_funcs

RNG = np.random.default_rng(23)
RATE = {"f64": "f64", "f32": "f32", "f16": "f16", "bf16": "bf16", "fp8_e4m3": "fp8", "fp8_e5m2": "fp8"}


def model_seconds(flops, nbytes, tiles, overlap, fmt, preset="H100"):
    """LOWER-COST-1's time: ceil(tiles / SMs) waves of one tile per SM at peak / SMs, and the
    HBM bytes at the bandwidth; overlapped (max) or added."""
    p = get_preset(preset)
    compute = math.ceil(tiles / p.sm_count) * (flops / tiles) / (p.peaks[RATE[fmt]] / p.sm_count)
    memory = nbytes / p.hbm_bandwidth
    return max(compute, memory) if overlap else compute + memory


def _run(backend, fn, shapes, fmt, directives):
    args = [round_to(RNG.standard_normal(s), fmt) for s in shapes]
    _, reports, program = lowered(backend, fn, *args, directives=directives, checks=False)
    return kernel_cost(kernels(program)[0]), counters(backend, reports[0]), program


@clause("LOWER-COST-1")
@pytest.mark.parametrize("shapes, flags, fmt, directives", [
    ([(64, 96), (96, 128)], {}, "f32", dict(tile=(32, 64, 32), stages=3)),
    ([(64, 96), (96, 128)], {}, "f16", dict(tile=(64, 32, 32), padding=1)),
    ([(64, 64), (64, 64), (64, 64)], {}, "f32", dict(shared=False, tile=(32, 32, 32))),
    ([(96, 64), (96, 64)], dict(transpose_a=True), "f32", None),
    ([(3, 64, 32), (1, 64, 32)], dict(transpose_b=True), "bf16", dict(tile=(32, 32, 16), stages=3)),
    ([(2, 1, 32, 64), (3, 64, 32), (32, 32)], {}, "f32", dict(tile=(16, 32, 32), async_copy=False)),
])
def test_matmul_cost_is_what_the_kernel_counts(backend, shapes, flags, fmt, directives):
    fn = (lambda a, b, c: op.gemm(a, b, c, **flags)) if len(shapes) == 3 else (lambda a, b: op.matmul(a, b, **flags))
    cost, c, program = _run(backend, fn, shapes, fmt, directives)
    k = kernels(program)[0]
    out = k.results[0].type.shape
    K = shapes[0][-2] if flags.get("transpose_a") else shapes[0][-1]
    assert cost.flops == c.flops == 2 * math.prod(out) * K
    assert (cost.hbm_bytes, cost.tiles) == (c.hbm_bytes, c.tiles)
    assert cost.smem_bytes == alloc_bytes(tile_funcs(program)[0])
    s = k.attributes
    overlap = s["shared"] and s["async_copy"] and s["stages"] >= 2
    assert cost.seconds == pytest.approx(model_seconds(cost.flops, cost.hbm_bytes, cost.tiles, overlap, fmt), rel=1e-12)


@clause("LOWER-COST-1")
@pytest.mark.parametrize("shapes, causal, directives", [
    ([(2, 16, 16), (2, 64, 16), (2, 64, 8)], False, dict(tile=(16, 32, 32), lanes=32, stages=3)),
    ([(16, 16), (48, 16), (48, 24)], True, dict(tile=(16, 16, 16), lanes=64, stages=1)),
])
def test_attention_cost_is_what_the_kernel_counts(backend, shapes, causal, directives):
    fn = lambda q, k, v: op.flash_attention(q, k, v, causal=causal, block_k=16)  # noqa: E731
    cost, c, program = _run(backend, fn, shapes, "f32", directives)
    assert (cost.flops, cost.hbm_bytes, cost.tiles) == (c.flops, c.hbm_bytes, c.tiles)
    assert cost.smem_bytes == alloc_bytes(tile_funcs(program)[0])
    overlap = directives["stages"] >= 2
    assert cost.seconds == pytest.approx(model_seconds(cost.flops, cost.hbm_bytes, cost.tiles, overlap, "f32"),
                                         rel=1e-12)


@clause("LOWER-COST-1")
@pytest.mark.parametrize("fn, shape, fmt, flops", [
    (lambda x: op.softmax(x), (8, 64), "f32", lambda n_in, n_out: 5 * n_in),
    (lambda x: op.mean(x, axis=0), (64, 32), "f32", lambda n_in, n_out: 5 * n_in),
    (lambda x: op.max(x, axis=1), (16, 128), "f16", lambda n_in, n_out: 5 * n_in),
    (lambda x: x * x, (8, 64), "f16", lambda n_in, n_out: n_out),
    (lambda x: -x, (4, 256), "f32", lambda n_in, n_out: n_out),
])
def test_row_and_elementwise_costs(backend, fn, shape, fmt, flops):
    """Nominal FLOPs (5 per input element of a row kernel, 1 per output element of an
    elementwise one); bytes as counted for aligned shapes; no overlap."""
    cost, c, program = _run(backend, fn, [shape], fmt, None)
    out = kernels(program)[0].results[0].type.shape
    assert cost.flops == flops(math.prod(shape), math.prod(out))
    assert cost.hbm_bytes == c.hbm_bytes and cost.smem_bytes == alloc_bytes(tile_funcs(program)[0])
    assert cost.seconds == pytest.approx(model_seconds(cost.flops, cost.hbm_bytes, cost.tiles, False, fmt), rel=1e-12)


@clause("LOWER-COST-1")
def test_bank_conflicts_are_not_modelled():
    graph = _trace(lambda a, b: op.matmul(a, b), (128, 128), (128, 128))
    costs = [kernel_cost(_kernel(graph, dict(swizzle=s))) for s in ("none", "xor")]
    assert costs[0] == costs[1]


def _trace(fn, *shapes, fmt="f32"):
    """A Graph IR function traced on types only."""
    trace = Trace("f")
    args = trace.arguments([TensorType(s, as_policy(fmt)) for s in shapes])
    with trace:
        out = fn(*args)
    return trace.finish([out])


def _kernel(graph, directives):
    module = graph_to_schedule(graph, directives)
    return [o for o in module.body.first_op.regions[0].entry if o.name == "tessera.schedule.kernel"][0]


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    AT.clear_cache()
    yield tmp_path
    AT.clear_cache()


SPACE = dict(tile=[(64, 64, 32), (128, 128, 32), (256, 256, 64)], stages=[2, 4])


@clause("LOWER-TUNE-1")
def test_a_schedule_sweep_prices_each_configuration_in_order(cache_dir):
    graph = _trace(lambda a, b: op.matmul(a, b), (2048, 2048), (2048, 2048))
    result = AT.autotune_schedule(graph, SPACE, "H100", progress=False)
    assert [t.config for t in result.trials] == [dict(tile=list(t), stages=s) for t in SPACE["tile"] for s in
                                                 SPACE["stages"]]
    for trial in result.trials:
        if trial.reason is None:
            cost = kernel_cost(_kernel(graph, trial.config))
            assert trial.seconds == cost.seconds and trial.details["hbm_bytes"] == cost.hbm_bytes
    accepted = [t for t in result.trials if t.reason is None]
    assert result.best == min(accepted, key=lambda t: t.seconds).config


@clause("LOWER-TUNE-1")
@pytest.mark.parametrize("order", [[(64, 64, 32), (64, 64, 40)], [(64, 64, 40), (64, 64, 32)]])
def test_equal_configurations_go_to_the_first_in_space_order(cache_dir, order):
    """K = 64: a BK of 40 fits to 32, so both configurations cost the same."""
    graph = _trace(lambda a, b: op.matmul(a, b), (256, 64), (64, 256))
    result = AT.autotune_schedule(graph, dict(tile=order), "H100", progress=False, cache=False)
    assert result.trials[0].seconds == result.trials[1].seconds
    assert result.best["tile"] == list(order[0])


TUNED = '''
@kernel.autotune(space=dict(BM=[128, 256, 65536, 2048], REPS=[1, 2]))
def tiled_copy(X: f32[m], Y: mut f32[m]):
    s = tshared.alloc[f32](BM)
    t = tile.id() * BM
    for r in range(REPS):
        for i in range(BM // 128):
            s[i * 128 + tile.lane_id()] = X[t + i * 128 + tile.lane_id()]
        tbarrier()
        for i in range(BM // 128):
            Y[t + i * 128 + tile.lane_id()] = s[i * 128 + tile.lane_id()]
        tbarrier()
'''


def _tune(backend, **options):
    k = kernel.from_source(TUNED)
    x = np.arange(1024, dtype=np.float32)
    y = np.zeros(1024, np.float32)
    problem = dict(args=[x, y], grid=lambda c: 1024 // c["BM"] if c["BM"] <= 1024 else 1, lanes=128)
    with backends.use(backend):
        result = k.tune(problem, "H100", **options)
    assert not y.any()  # the sweep ran on copies
    return k, x, result


@clause("LOWER-TUNE-1", "LOWER-TUNE-2")
def test_a_kernel_sweep_runs_each_variant_and_takes_its_roofline_time(backend, cache_dir):
    k, x, result = _tune(backend, progress=False)
    by = {(t.config["BM"], t.config["REPS"]): t for t in result.trials}
    assert "262,144 B" in by[65536, 1].reason and "232,448 B" in by[65536, 1].reason  # never run
    assert by[2048, 1].reason.startswith("TileBoundsError")  # a run that raises: reads past X's 1024
    for (bm, reps), trial in by.items():
        if trial.reason is None:
            (variant,) = [v for c, v in k.variants() if (c["BM"], c["REPS"]) == (bm, reps)]
            y = np.zeros(1024, np.float32)
            with backends.use("interp"):
                report = variant(x, y, grid=1024 // bm, lanes=128, checks=False)
            assert trial.seconds == report.roofline.time
            assert trial.details["hbm_bytes"] == report.counters.hbm_bytes
    accepted = [t for t in result.trials if t.reason is None]
    assert result.best == min(accepted, key=lambda t: t.seconds).config


@clause("LOWER-TUNE-2")
def test_when_everything_is_rejected_the_sweep_says_why(cache_dir):
    graph = _trace(lambda a, b: op.matmul(a, b), (4096, 4096), (4096, 4096))
    with pytest.raises(AutotuneError, match=r"every configuration was rejected.*262,144 B.*393,216 B"):
        AT.autotune_schedule(graph, dict(tile=[(256, 256, 64)], stages=[2, 3]), "H100", progress=False)


@clause("LOWER-TUNE-2", "LOWER-FA-2")
def test_seed_003_flash_schedule_fits_with_three_stages_not_four(cache_dir):
    """200,576 B with 3 stages (167,296 B with 2) under H100's 232,448 B; 4 stages need 233,856 B."""
    graph = _trace(lambda q, k, v: op.flash_attention(q, k, v, block_k=128), *[(1024, 64)] * 3, fmt="f16")
    result = AT.autotune_schedule(graph, dict(tile=[(128, 128, 64)], padding=[1], stages=[2, 3, 4]), "H100",
                                  progress=False)
    by = {t.config["stages"]: t for t in result.trials}
    assert by[2].details["smem_bytes"] == 167_296 and by[3].details["smem_bytes"] == 200_576
    assert "233,856 B" in by[4].reason and "232,448 B" in by[4].reason
    assert result.best["stages"] in (2, 3)


@clause("LOWER-TUNE-3")
def test_progress_lines_and_the_cache(cache_dir, capsys):
    graph = _trace(lambda a, b: op.matmul(a, b), (2048, 2048), (2048, 2048))
    first = AT.autotune_schedule(graph, SPACE, "H100")
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("[autotune]")]
    assert len(lines) == 6 and all(f" {i}/6 " in ln for i, ln in enumerate(lines, 1))
    assert "rejected: " in lines[-2] and " us" in lines[0] and "tile=" in lines[0] and "stages=" in lines[0]
    assert not first.cached
    stored = json.loads((cache_dir / "autotune.json").read_text())
    assert len(stored) == 1
    again = AT.autotune_schedule(graph, SPACE, "H100", progress=False)
    assert again.cached and again.best == first.best and capsys.readouterr().err == ""
    AT._MEMORY.clear()  # a new process: the file still has it
    assert AT.autotune_schedule(graph, SPACE, "H100", progress=False).cached
    assert not AT.autotune_schedule(graph, SPACE, "B200", progress=False).cached  # another preset
    assert not AT.autotune_schedule(graph, dict(SPACE, stages=[2]), "H100", progress=False).cached  # another space
    other = _trace(lambda a, b: op.matmul(a, b), (1024, 1024), (1024, 1024))
    assert not AT.autotune_schedule(other, SPACE, "H100", progress=False).cached  # another problem


@clause("LOWER-TUNE-3")
def test_cache_false_writes_no_file(cache_dir):
    graph = _trace(lambda a, b: op.matmul(a, b), (512, 512), (512, 512))
    AT.autotune_schedule(graph, SPACE, "H100", progress=False, cache=False)
    assert not (cache_dir / "autotune.json").exists()


@clause("LOWER-TUNE-3")
def test_a_cached_kernel_sweep_runs_nothing(backend, cache_dir):
    _, _, first = _tune(backend, progress=False)
    _, _, again = _tune(backend, progress=False)
    assert again.cached and again.best == first.best


def _rewrite_record(cache_dir, edit):
    records = json.loads((cache_dir / "autotune.json").read_text())
    (key,) = records
    records[key] = edit(records[key])
    (cache_dir / "autotune.json").write_text(json.dumps(records))
    AT._MEMORY.clear()  # a later process reads the file


@clause("LOWER-TUNE-6")
def test_a_record_no_sweep_would_write_is_ignored_with_one_warning(cache_dir):
    graph = _trace(lambda a, b: op.matmul(a, b), (2048, 2048), (2048, 2048))
    first = AT.autotune_schedule(graph, SPACE, "H100", progress=False)
    slowest = max((t for t in first.trials if t.reason is None), key=lambda t: t.seconds).config
    _rewrite_record(cache_dir, lambda r: dict(r, best=slowest))  # best is not the fastest trial
    with pytest.warns(CacheWarning, match="is not one a sweep writes") as caught:
        again = AT.autotune_schedule(graph, SPACE, "H100", progress=False)
    assert len(caught) == 1 and not again.cached and again.best == first.best
    _rewrite_record(cache_dir, lambda r: {"best": r["best"]})  # no trials (told once per process: no warning)
    assert not AT.autotune_schedule(graph, SPACE, "H100", progress=False).cached


@clause("LOWER-TUNE-6")
def test_stores_from_several_threads_lose_no_record(cache_dir):
    import threading
    graphs = [_trace(lambda a, b: op.matmul(a, b), (n, n), (n, n)) for n in (256, 512, 768, 1024, 1280, 1536)]
    threads = [threading.Thread(target=AT.autotune_schedule, args=(g, SPACE, "H100"), kwargs={"progress": False})
               for g in graphs]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(json.loads((cache_dir / "autotune.json").read_text())) == len(graphs)


@clause("LOWER-TUNE-4", "LOWER-TUNE-6")
def test_a_winner_read_from_the_file_is_checked_again(cache_dir):
    from .test_tune_checks import SHIFTED
    k = kernel.from_source(SHIFTED.replace(", UNUSED=[3, 4]", ""))
    problem = dict(args=[np.arange(128, dtype=np.float32), np.zeros(128, np.float32)], grid=1, lanes=128)
    assert k.tune(problem, "H100", progress=False).best == {"SHIFT": 0}

    def racy_wins(record):  # SHIFT=1 (a race) timed as fast as SHIFT=0 and first in space order
        racy, fine = record["trials"]
        racy.update(seconds=fine["seconds"], reason=None)
        return dict(record, best={"SHIFT": 1})
    _rewrite_record(cache_dir, racy_wins)
    with pytest.warns(CacheWarning, match="SHIFT=1 as the winner, which the checkers reject"):
        again = k.tune(problem, "H100", progress=False)
    assert again.best == {"SHIFT": 0} and not again.cached
