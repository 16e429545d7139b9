"""CUDA-CPU-7: every kernel the CUDA backend renders for the library ops and the seeds'
``@kernel``s gives the interpreter's bits on the harness, under several schedules and both
cp.async modes (the default run: :data:`FAST`; the whole cross product is ``slow``); the
tensor-core kernels give the bits of the interpreter's tc model (the twin's mma.sync computes
the same model)."""
import functools

import ml_dtypes
import numpy as np
import pytest

import tessera_ref as t
from cpu_programs import COMBOS, FAST, LIBRARY, bits, on_the_interpreter, run_on, seed_pipeline
from tessera_ref import backends, kernel, op
from tessera_ref.backends.cuda.cpu import CpuLaunchReport, CudaCpuBackend, FiberDevice
from tessera_ref.runtime import DeviceBackend
from tessera_ref.backends.cuda.source import render
from tessera_ref.errors import BackendError
from tessera_ref.lowering import lower


@functools.lru_cache(maxsize=None)
def _zoo(name):
    return on_the_interpreter(name, 7)


def _same(got, want):
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert np.asarray(g).dtype == np.asarray(w).dtype and np.array_equal(bits(g), bits(w))


@pytest.mark.parametrize("schedule, cp_async", FAST)
@pytest.mark.parametrize("name", sorted(LIBRARY))
def test_library_kernels_give_the_interpreters_bits(name, schedule, cp_async):
    program, inputs, want = _zoo(name)
    got, reports = run_on(program, inputs, schedule, cp_async)
    _same(got, want)
    assert reports and all(isinstance(r, CpuLaunchReport) and r.schedule == schedule and r.cp_async == cp_async
                           and r.switches > 0 and r.checks is False for r in reports)


@pytest.mark.slow
@pytest.mark.parametrize("schedule, cp_async", COMBOS)
@pytest.mark.parametrize("name", sorted(LIBRARY))
def test_library_kernels_give_the_interpreters_bits_under_every_combination(name, schedule, cp_async):
    program, inputs, want = _zoo(name)
    _same(run_on(program, inputs, schedule, cp_async)[0], want)


def _case(fn, shapes, directives=None, dtype=np.float32, seed=3):
    rng = np.random.default_rng(seed)
    inputs = [rng.standard_normal(s).astype(dtype) for s in shapes]
    program = lower(t.jit(fn).trace(*inputs), directives)
    with backends.use("interp"):
        want, _ = program.run(*inputs)
    return program, inputs, want


SHAPES = {
    "matmul_64": (lambda a, b: op.matmul(a, b), [(64, 64), (64, 64)], None),
    "matmul_128": (lambda a, b: op.matmul(a, b), [(128, 128), (128, 128)], dict(tile=(64, 64, 16), stages=3)),
    "gemm_96x64x80": (lambda a, b, c: op.gemm(a, b, c), [(96, 80), (80, 64), (96, 64)], None),
    "fused_elementwise": (lambda a, b: op.maximum(a, b) * b - op.abs(a) / 3.0, [(33, 65), (33, 65)], None),
    "broadcast_elementwise": (lambda x, m, b: op.neg((x - m) * b + 0.5), [(3, 5, 7), (3, 5, 1), (7,)], None),
    "broadcast_middle_axis": (lambda x, y: op.maximum(x, y) / x, [(4, 1, 6), (5, 1)], None),
    "math_chain": (lambda x, y: (op.pow(op.abs(x), y) - op.gelu(x, approximate="tanh"), op.cos(op.log(op.abs(y)))),
                   [(3, 37), (37,)], dict(vectorize=2)),
    "mask_chain": (lambda x, y: (op.where(op.logical_or(op.greater(x, y), op.less_equal(y, 0.0)), op.fma(x, y, x), y),
                                 op.not_equal(x, y)), [(5, 9), (5, 1)], None),
    "attention_short": (lambda q, k, v: op.flash_attention(q, k, v, causal=True, block_k=16),
                        [(48, 32), (48, 32), (48, 32)], None),
}
for _n in (1, 7, 100, 1000, 4100):
    SHAPES[f"sum_{_n}"] = (lambda x: op.sum(x, axis=-1), [(3, _n)], None)
    SHAPES[f"max_{_n}"] = (lambda x: op.max(x, axis=-1), [(3, _n)], None)
    SHAPES[f"softmax_{_n}"] = (lambda x: op.softmax(x), [(2, _n)], None)
    SHAPES[f"layernorm_{_n}"] = (lambda x: op.layernorm_safe(x), [(2, _n)], None)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_small_shapes_give_the_interpreters_bits(name):
    fn, shapes, directives = SHAPES[name]
    program, inputs, want = _case(fn, shapes, directives)
    for schedule, cp_async in (("reverse", "deferred"), ("random:5", "eager")):
        _same(run_on(program, inputs, schedule, cp_async)[0], want)


def test_index_comparisons_load_64_bit_values():
    """LOWER-EW-4: index buffers are long*, and 2^40 is not truncated to the kernel's int index type."""
    x = np.array([[3, 1, 2 ** 40 + 5], [0, 5, -2]])
    y = np.array([2, 1, 7])  # truncated to 32 bits, 2^40 + 5 would be 5 < 7
    program = lower(t.jit(lambda x, y: (op.less(x, y), op.equal(x, y))).trace(x, y))
    with backends.use("interp"):
        want, _ = program.run(x, y)
    assert want[0].tolist() == [[False, False, False], [True, False, True]]
    _same(run_on(program, [x, y], "random:2", "eager")[0], want)


@pytest.mark.parametrize("model", ["tc:sm80", "tc:sm90"])
@pytest.mark.parametrize("fmt, dtype", [("bf16", ml_dtypes.bfloat16), ("f16", np.float16)])
def test_tensor_core_kernels_give_the_interpreters_tc_model_bits(model, fmt, dtype):
    rng = np.random.default_rng(11)
    A = (rng.standard_normal((128, 64)) * np.exp2(rng.integers(-6, 6, (128, 64)))).astype(dtype)
    B = rng.standard_normal((64, 128)).astype(dtype)
    pol = t.Policy(fmt, accum=model)
    a, b = (t.asarray(x, policy=pol) for x in (A, B))
    program = lower(t.jit(lambda p, q: op.matmul(p, q)).trace(a, b), dict(tile=(128, 128, 32), lanes=256))
    assert "mma.sync.aligned.m16n8k16" in render(program.tile).text
    with backends.use("interp"):
        want, _ = program.run(A, B)
    for schedule, cp_async in (("lockstep", "deferred"), ("random:3", "eager")):
        _same(run_on(program, [A, B], schedule, cp_async)[0], want)


SAXPY = '''
@kernel
def saxpy(x: f32[n], y: mut f32[n], alpha: f32):
    i = tile.linear_id()
    if i < n:
        y[i] = alpha * x[i] + y[i]
'''


@pytest.mark.parametrize("schedule, cp_async", FAST[:2])
def test_the_seed_saxpy_kernel_gives_the_interpreters_bits(schedule, cp_async):
    k = kernel.from_source(SAXPY)
    x = np.arange(300, dtype=np.float32) / 7
    y0 = np.linspace(-1, 1, 300, dtype=np.float32)
    want, got = y0.copy(), y0.copy()
    with backends.use("interp"):
        k(x, want, np.float32(1.25), grid=3, lanes=128)
    with backends.use(CudaCpuBackend(schedule, cp_async)):
        report = k(x, got, np.float32(1.25), grid=3, lanes=128)
    assert np.array_equal(bits(got), bits(want)) and report.grid == (3,) and report.lanes == 128
    assert not np.array_equal(bits(got), bits(y0))


def test_the_seed_pipeline_race_shows_as_different_bits_across_cp_async_modes():
    """Seed 004 §2.3 as printed refills the buffer other lanes still read (the tile
    interpreter's race checker reports it); on the harness the two cp.async modes disagree."""
    _, _, _, outs = seed_pipeline()
    assert not np.array_equal(bits(outs["deferred"]), bits(outs["eager"]))


def test_the_registered_backend_and_its_refusals():
    assert isinstance(backends.get("cuda-cpu"), DeviceBackend)
    assert isinstance(backends.get("cuda-cpu").device, FiberDevice)
    assert backends.get("cuda-cpu").device.options.schedule == "lockstep"
    assert "cuda-cpu" in backends.available()
    with pytest.raises(BackendError, match="single-device"):
        backends.get("cuda-cpu").communicator(object())
    with pytest.raises(BackendError, match="unknown CUDA-on-CPU schedule 'fast'"):
        CudaCpuBackend("fast")


def test_graph_ops_run_through_the_seam():
    x = np.random.default_rng(0).standard_normal((4, 50)).astype(np.float32)
    with backends.use("interp"):
        want = np.asarray(t.jit(lambda v: op.softmax(v) + 1.0)(x))
    with backends.use(CudaCpuBackend("random:1", "eager")):
        got = np.asarray(t.jit(lambda v: op.softmax(v) + 1.0)(x))
    assert np.array_equal(bits(got), bits(want))
