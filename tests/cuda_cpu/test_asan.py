"""CUDA-CPU-10, the AddressSanitizer build: rendered kernels run under ASan without a finding and
with the harness's bits (the fiber annotations give no false stack reports); faults the guard
pages cannot see — an underrun by one element, an overrun inside the 16-byte rounding, a shared
memory overrun inside the page rounding, a local array overrun on a fiber's stack — are
findings naming the CUDA line, what was overrun and by how far; a use after return and a wild
access are findings too; a child that crashes or hangs, and a g++ without libasan, are
BackendErrors."""
import re

import numpy as np
import pytest

from cpu_programs import PRELUDE, bits, on_the_interpreter
from test_mutants import MUTANTS, Planted, _line_of, _program
from tessera_ref import backends
from tessera_ref.backends.cuda.cpu import CudaCpuBackend, HarnessFinding, asan, build, harness
from tessera_ref.backends.cuda.source import Source, render
from tessera_ref.errors import BackendError

#: two schedules x both cp.async modes
COMBOS = [("lockstep", "deferred"), ("lockstep", "eager"), ("reverse", "deferred"), ("reverse", "eager")]


def launch(text, kernel, lanes, args, *, memcheck, smem=0, timeout=600.0):
    """Launch ``kernel`` of hand-written CUDA C (after PRELUDE) on one block with parameters ``x, y``."""
    source, kernels = Source(PRELUDE + text), re.findall(r"__global__ void (\w+)", text)  # one build for all
    lib = build.library(source, kernels) if memcheck == "guard" else None
    options = harness.Options(memcheck=memcheck, timeout=timeout)
    return harness.run(lib, kernel, 1, lanes, args, smem, options, source, ["x", "y"], kernels=kernels)


@pytest.mark.parametrize("name", ["matmul_f32", "sum", "attention", "elementwise_f32"])
def test_rendered_kernels_run_clean_and_bit_identical_under_asan(name):
    program, inputs, want = on_the_interpreter(name, 11)
    with backends.use(CudaCpuBackend()):
        plain, _ = program.run(*inputs)
    assert all(np.array_equal(bits(p), bits(w)) for p, w in zip(plain, want)), name
    for schedule, cp_async in COMBOS:
        with backends.use(CudaCpuBackend(schedule, cp_async, memcheck="asan")):
            got, reports = program.run(*inputs)
        assert all(np.array_equal(bits(g), bits(p)) for g, p in zip(got, plain)), (name, schedule, cp_async)
        assert all(r.switches > 0 for r in reports)


@pytest.mark.slow
@pytest.mark.parametrize("name", ["matmul_f32_swizzle", "matmul_bf16", "softmax", "layernorm", "attention_causal",
                                  "attention_bf16", "cast_f32_bf16", "dropout_bf16", "matmul_tc", "softmax_100"])
def test_more_kernels_under_asan_every_schedule(name):
    program, inputs, want = _program(name)
    for schedule, cp_async in COMBOS + [("random:3", "deferred"), ("random:4", "eager")]:
        with backends.use(CudaCpuBackend(schedule, cp_async, memcheck="asan")):
            got, _ = program.run(*inputs)
        assert all(np.array_equal(bits(g), bits(w)) for g, w in zip(got, want)), (name, schedule, cp_async)


KERNELS = r"""
__global__ void under(const float* x, float* y) {
  int i = threadIdx.x;
  y[i] = x[i - 1];
}
__global__ void over(const float* x, float* y) {
  int i = threadIdx.x;
  if (i < 10) y[i] = x[i + 1];
}
__global__ void shared_over(const float* x, float* y) {
  extern __shared__ __align__(16) unsigned char tsr_smem[];
  float* s = reinterpret_cast<float*>(tsr_smem);
  int i = threadIdx.x;
  if (i < 26) s[i] = x[i];
  __syncthreads();
  if (i < 25) y[i] = s[i];
}
__device__ float pick(const float* acc, int k) { return acc[k]; }
__global__ void regs(const float* x, float* y) {
  float acc[4];
  for (int k = 0; k < 4; ++k) acc[k] = x[threadIdx.x] * k;
  __syncthreads();
  y[threadIdx.x] = pick(acc, threadIdx.x == 5 ? 4 : 3);
}
__attribute__((noinline)) __device__ void keep(float v, const float** out) { float box[2] = {v, v}; *out = box; }
__global__ void gone(const float* x, float* y) {
  const float* p;
  keep(x[threadIdx.x], &p);
  __syncthreads();
  y[threadIdx.x] = p[0];
}
__global__ void wild(const float* x, float* y) { y[threadIdx.x + (1L << 40)] = 1.0f; }
__global__ void crash(const float* x, float* y) { if (threadIdx.x == 3) __builtin_trap(); }
__global__ void hang(const float* x, float* y) { volatile int spin = 1; while (spin) {} }
"""

#: kernel -> (x's elements, dynamic shared memory, the planted line,
#:           (read/wrote, thread, where, distance, region bytes))
PLANTED = {
    "under": (64, 0, "y[i] = x[i - 1];", ("read", 0, "before the start of argument x", 4, 256)),
    "over": (10, 0, "if (i < 10) y[i] = x[i + 1];", ("read", 9, "past the end of argument x", 0, 40)),
    "shared_over": (32, 100, "if (i < 26) s[i] = x[i];",
                    ("wrote", 25, "past the end of the dynamic shared memory", 0, 100)),
}


def _line(text):
    return [line.strip() for line in (PRELUDE + KERNELS).splitlines()].index(text) + 1


@pytest.mark.parametrize("kernel", sorted(PLANTED))
def test_asan_catches_what_guard_pages_miss(kernel):
    n, smem, planted, (verb, thread, where, distance, nbytes) = PLANTED[kernel]
    x = np.arange(n, dtype=np.float32)
    launch(KERNELS, kernel, 32, [x.copy(), np.zeros(n, np.float32)], memcheck="guard", smem=smem)  # no finding
    with pytest.raises(HarnessFinding) as caught:
        launch(KERNELS, kernel, 32, [x.copy(), np.zeros(n, np.float32)], memcheck="asan", smem=smem)
    err, line = caught.value, _line(planted)
    assert err.kind == "memory fault" and err.line == line and err.asan.error == "heap-buffer-overflow"
    assert f"CUDA line {line}: {planted}" in str(err)
    assert f"thread {thread} {verb} 4 bytes at" in str(err)
    assert f"the address is {distance} bytes {where} ({nbytes} bytes)" in str(err)
    assert (err.asan.distance, err.asan.region_bytes) == (distance, nbytes)


def test_the_off_by_one_mutant_is_caught_under_asan():
    program_name, plant, (pattern, n) = MUTANTS["off-by-one bound"]
    program, inputs, _ = _program(program_name)
    line = _line_of(render(program.tile).text, pattern, n)

    with pytest.raises(HarnessFinding) as caught, backends.use(Planted("lockstep", "deferred", plant, "asan")):
        program.run(*inputs)
    err = caught.value
    assert err.line == line and f"CUDA line {line}: " in str(err), str(err)
    assert "0 bytes past the end of argument x (1200 bytes)" in str(err), str(err)
    assert "from the Tile IR op at" in str(err)


def test_a_local_used_after_its_function_returned_is_found_on_the_fibers_fake_stack():
    """Use-after-return checking runs on the fibers (each has its own fake stack, kept across
    switches): thread 0's returned frame is still poisoned after the barrier, when the other 31
    threads have made and left theirs."""
    with pytest.raises(HarnessFinding) as caught:
        launch(KERNELS, "gone", 32, [np.ones(32, np.float32), np.zeros(32, np.float32)], memcheck="asan")
    err = caught.value
    assert err.line == _line("y[threadIdx.x] = p[0];") and err.asan.error == "stack-use-after-return", str(err)
    assert "thread 0 read 4 bytes at" in str(err) and "past the return of its function" in err.fix


def test_a_wild_access_is_asans_segv_with_the_nearest_argument():
    with pytest.raises(HarnessFinding) as caught:
        launch(KERNELS, "wild", 32, [np.zeros(32, np.float32), np.zeros(32, np.float32)], memcheck="asan")
    err = caught.value
    line = _line("__global__ void wild(const float* x, float* y) { y[threadIdx.x + (1L << 40)] = 1.0f; }")
    assert err.line == line and err.asan.error == "SEGV" and "thread 0 wrote at" in str(err), str(err)
    assert f"the address is {(4 << 40) - 128} bytes past the end of argument y (128 bytes)" in str(err), str(err)


def test_a_crashing_or_hanging_asan_child_is_a_backend_error():
    with pytest.raises(BackendError, match=r"died \(signal \d+\) without a report") as caught:
        launch(KERNELS, "crash", 32, [np.zeros(4, np.float32), np.zeros(4, np.float32)], memcheck="asan")
    assert not isinstance(caught.value, HarnessFinding)
    with pytest.raises(BackendError, match=r"did not finish within 2 s") as caught:
        launch(KERNELS, "hang", 32, [np.zeros(4, np.float32), np.zeros(4, np.float32)], memcheck="asan", timeout=2)
    assert not isinstance(caught.value, HarnessFinding)


def test_unknown_memcheck_is_a_backend_error():
    with pytest.raises(BackendError, match="unknown memcheck 'valgrind'"):
        CudaCpuBackend(memcheck="valgrind")


@pytest.mark.parametrize("use_after_return", [True, False])
def test_a_local_array_overrun_on_a_fiber_stack_names_the_array(use_after_return, monkeypatch):
    """ASan knows each fiber's stack (the switch annotations): it names the overrun local array
    whether the frame lies on the fiber's fake stack (use-after-return checking, the default)
    or on the fiber's own stack (without the annotations ASan calls that address a wild pointer)."""
    if not use_after_return:
        monkeypatch.setattr(asan, "ASAN_OPTIONS", asan.ASAN_OPTIONS.replace("detect_stack_use_after_return=1",
                                                                            "detect_stack_use_after_return=0"))
    args = [np.ones(32, np.float32), np.zeros(32, np.float32)]
    launch(KERNELS, "regs", 32, [a.copy() for a in args], memcheck="guard")  # inside the stack: no finding
    with pytest.raises(HarnessFinding) as caught:
        launch(KERNELS, "regs", 32, args, memcheck="asan")
    err, line = caught.value, _line("__device__ float pick(const float* acc, int k) { return acc[k]; }")
    assert err.line == line and err.asan.error == "stack-buffer-overflow", str(err)
    assert ("thread 5 read 4 bytes at" in str(err) and "the address is 0 bytes past the end of the thread's local "
            f"array 'acc' (16 bytes, declared at CUDA line {_line('float acc[4];')})" in str(err)), str(err)
    assert "inside the local array named above" in err.fix


def test_a_g_plus_plus_without_libasan_is_a_backend_error_naming_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "ASAN_FLAGS", build.ASAN_FLAGS + ("-lno_such_asan_runtime",))  # the link fails
    with pytest.raises(BackendError, match="g\\+\\+ cannot build AddressSanitizer programs here") as caught:
        build.executable(Source(PRELUDE + KERNELS), ["under"])
    assert "memcheck='guard'" in caught.value.fix


def test_asan_refuses_to_start_where_randomisation_would_stall_it(monkeypatch, tmp_path):
    """Where ``setarch -R`` is not allowed and the kernel randomises more than 28 bits of mmap
    addresses (GCC 12's ASan would spin at start-up), the launch is a BackendError up front."""
    monkeypatch.setattr(asan, "_no_aslr", lambda: ())
    monkeypatch.setattr(asan, "RND_BITS", tmp_path / "bits")
    (tmp_path / "bits").write_text("32\n")
    args = [np.zeros(4, np.float32), np.zeros(4, np.float32)]
    with pytest.raises(BackendError, match="vm.mmap_rnd_bits is 32") as caught:
        launch(KERNELS, "crash", 32, args, memcheck="asan", timeout=2)
    assert "memcheck ('guard')" in caught.value.fix
    (tmp_path / "bits").write_text("28\n")  # 28 bits: ASan starts without setarch
    with pytest.raises(BackendError, match=r"died \(signal \d+\) without a report"):
        launch(KERNELS, "crash", 32, args, memcheck="asan")
