"""LOWER-TUNE-*: sweeping schedule and kernel spaces with the cost model, rejecting, caching."""
import numpy as np
import pytest

from tessera_ref import kernel, op
from tessera_ref.errors import AutotuneError, AutotuneWarning
from tessera_ref.ir import TensorType
from tessera_ref.lowering import autotune as AT
from tessera_ref.numerics import as_policy
from tessera_ref.ops.values import Trace


@pytest.fixture(autouse=True)
def _cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    AT._MEMORY.clear()
    yield
    AT._MEMORY.clear()


def _abstract_matmul(n):
    """The Graph IR of an n x n x n f32 matmul, traced on types only (no data)."""
    trace = Trace("mm")
    a, b = trace.arguments([TensorType((n, n), as_policy("f32"))] * 2)
    with trace:
        c = op.matmul(a, b)
    return trace.finish([c])


SPACE = dict(tile=[(64, 64, 32), (128, 128, 32), (256, 256, 64)], stages=[2, 4])


def _abstract(fn, *shapes, dtype="f32"):
    trace = Trace("f")
    args = trace.arguments([TensorType(s, as_policy(dtype)) for s in shapes])
    with trace:
        out = fn(*args)
    return trace.finish([out])


def test_seed_003_flash_attention_schedule_fits_with_three_stages():
    """LOWER-FA-2: with the accumulator in registers, seed 003's 3-stage schedule needs
    200,576 B of shared memory, under H100's 232,448 B; a fourth stage does not fit."""
    graph = _abstract(lambda q, k, v: op.flash_attention(q, k, v, block_k=128), *[(1024, 64)] * 3, dtype="f16")
    result = AT.autotune_schedule(graph, dict(tile=[(128, 128, 64)], padding=[1], stages=[3, 4]), "H100",
                                  progress=False, cache=False)
    by_stages = {t.config["stages"]: t for t in result.trials}
    assert by_stages[3].reason is None and by_stages[3].details["smem_bytes"] == 200_576
    assert "233,856 B" in by_stages[4].reason and "232,448 B" in by_stages[4].reason
    assert result.best["stages"] == 3


def test_schedule_sweep_prices_batched_and_transposed_matmuls():
    graph = _abstract(lambda a, b: op.matmul(a, b, transpose_a=True), (4, 256, 128), (256, 512))
    result = AT.autotune_schedule(graph, dict(tile=[(64, 64, 32), (128, 128, 32)]), "H100", progress=False, cache=False)
    small = next(t for t in result.trials if list(t.config["tile"]) == [64, 64, 32])
    # 4 products of [128 x 256] @ [256 x 512]: A once per column tile, B once per row tile, D once
    assert small.details["hbm_bytes"] == 4 * (128 * 256 * 8 + 256 * 512 * 2 + 128 * 512) * 4


def test_schedule_sweep_rejects_over_the_shared_memory_limit_with_the_reason(capsys):
    result = AT.autotune_schedule(_abstract_matmul(4096), SPACE, "H100")
    rejected = {tuple(t.config["tile"]) + (t.config["stages"],): t.reason for t in result.trials if t.reason}
    # 256x256x64, 2 stages of f32: 2 * (256*64 + 64*256) * 4 = 262,144 B > 227 KiB
    assert "262,144 B" in rejected[(256, 256, 64, 2)] and "232,448 B" in rejected[(256, 256, 64, 2)]
    assert (128, 128, 32, 4) not in rejected  # 4 * 32 KiB = 128 KiB fits
    assert result.best["tile"] == [128, 128, 32]  # fewer waves re-reading A and B than 64x64
    err = capsys.readouterr().err
    assert err.count("[autotune]") == 6 and "rejected" in err and "6/6" in err


def test_results_are_cached_by_problem_and_preset(capsys):
    graph = _abstract_matmul(2048)
    first = AT.autotune_schedule(graph, SPACE, "H100")
    capsys.readouterr()
    again = AT.autotune_schedule(graph, SPACE, "H100")
    assert again.cached and again.best == first.best
    assert "cached" in capsys.readouterr().err
    AT._MEMORY.clear()  # the disk cache still has it
    assert AT.autotune_schedule(graph, SPACE, "H100").cached
    assert not AT.autotune_schedule(graph, SPACE, "B200").cached  # another preset is another key
    assert not AT.autotune_schedule(_abstract_matmul(1024), SPACE, "H100").cached  # another problem


def test_a_space_with_nothing_that_fits_says_why():
    with pytest.raises(AutotuneError, match="every configuration was rejected"):
        AT.autotune_schedule(_abstract_matmul(4096), dict(tile=[(256, 256, 64)], stages=[3]), progress=False)
    with pytest.raises(AutotuneError, match="space"):
        AT.autotune_schedule(_abstract_matmul(64), dict(tile=[]), progress=False)


TILED_COPY = '''
@kernel.autotune(space=dict(BM=[128, 256, 2048, 65536], stages=[2]))
def tiled_copy(X: f32[m], Y: mut f32[m]):
    s = tshared.alloc[f32](BM)
    t = tile.id() * BM
    for i in range(BM // 128):
        s[i * 128 + tile.linear_id() % 128] = X[t + i * 128 + tile.linear_id() % 128]
    tbarrier()
    for i in range(BM // 128):
        Y[t + i * 128 + tile.linear_id() % 128] = s[i * 128 + tile.linear_id() % 128]
'''


def test_kernel_autotune_runs_the_variants_and_rejects_oversized_shared_memory(capsys):
    k = kernel.from_source(TILED_COPY)
    X = np.arange(1024, dtype=np.float32)
    Y = np.zeros(1024, np.float32)
    result = k.tune(dict(args=[X, Y], grid=lambda c: 1024 // c["BM"] if c["BM"] <= 1024 else 1, lanes=128))
    by_bm = {t.config["BM"]: t for t in result.trials}
    assert "262,144 B of shared memory" in by_bm[65536].reason  # 65536 f32 > 227 KiB: never run
    assert by_bm[2048].reason.startswith("TileBoundsError")  # a run that fails is rejected with its error
    assert by_bm[128].seconds is not None and by_bm[256].seconds is not None
    assert "4/4" in capsys.readouterr().err
    assert not Y.any()  # the sweep ran on copies
    assert result.best_variant is not None and result.best["BM"] in (128, 256)


RACY_FIRST = '''
@kernel.autotune(space=dict(SHIFT=[1, 0]))
def shifted(X: f32[m], Y: mut f32[m]):
    s = tshared.alloc[f32](129)
    l = tile.lane_id()
    s[l] = X[l]
    Y[l] = s[l + SHIFT]
'''


def test_the_winner_is_checked_and_a_racy_configuration_is_never_picked(capsys):
    # SHIFT=1 reads the neighbour's element in the barrier phase it was written in: a race. Both
    # configurations cost the same, so without the check the first in space order (racy) would win.
    k = kernel.from_source(RACY_FIRST)
    X = np.arange(128, dtype=np.float32)
    Y = np.zeros(128, np.float32)
    result = k.tune(dict(args=[X, Y], grid=1, lanes=128), cache=False)
    assert result.best == {"SHIFT": 0}
    racy = result.trials[0]
    assert racy.config == {"SHIFT": 1} and racy.seconds is None and "race" in racy.reason
    assert racy.details["seconds_unchecked"] == result.trials[1].seconds  # it ran, and was as fast
    assert "rejected with the checkers on" in capsys.readouterr().err
    assert not Y.any()  # the check ran on copies too


def test_a_space_of_racy_configurations_only_is_an_error():
    k = kernel.from_source(RACY_FIRST.replace("SHIFT=[1, 0]", "SHIFT=[1, 2]"))
    with pytest.raises(AutotuneError, match="every configuration was rejected.*race"):
        k.tune(dict(args=[np.zeros(128, np.float32), np.zeros(128, np.float32)], grid=1, lanes=128),
               cache=False, progress=False)


def test_a_space_parameter_the_kernel_never_reads_is_named():
    k = kernel.from_source(RACY_FIRST.replace("SHIFT=[1, 0]", "SHIFT=[0], BM=[64, 128], WARPS=[1, 2]"))
    args = [np.zeros(128, np.float32), np.zeros(128, np.float32)]
    with pytest.warns(AutotuneWarning, match=r"parameter 'BM' of kernel 'shifted' changes nothing.*\[64, 128\]") as w:
        k.tune(dict(args=args, grid=1, lanes=lambda c: 64 * c["WARPS"]), cache=False, progress=False)
    assert len(w) == 1  # WARPS changes the launch: it is used, though the body never reads it
    assert AT.unused_parameters(k.variants(), dict(args=args, grid=1, lanes=128)) == [("BM", [64, 128]),
                                                                                       ("WARPS", [1, 2])]
    # a parameter the body reads is used; one with a single value is never flagged
    assert AT.unused_parameters(kernel.from_source(RACY_FIRST).variants(), dict(args=args, grid=1)) == []
