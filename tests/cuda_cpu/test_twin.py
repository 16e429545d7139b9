"""CUDA-CPU-1 … 5 on hand-written CUDA C: the twin's device operations against their PTX
definitions (computed here in Python, lane by lane), the cp.async modes, shared-memory
poisoning, and every finding, each naming its CUDA line."""
import ml_dtypes
import numpy as np
import pytest

from cpu_programs import run_text
from tessera_ref.backends.cuda.compile import CompileError
from tessera_ref.backends.cuda.cpu import HarnessFinding
from tessera_ref.backends.cuda.cpu.build import UnsupportedPTX
from tessera_ref.errors import BackendError
from tessera_ref.numerics import tc

SCHEDULES = ["lockstep", "reverse", "random:4"]

SHUFFLE = r"""
extern "C" __global__ void shuffle(const float* x, const double* y, const int* z, float* ox, double* oy, int* oz,
                                   int offset) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  ox[i] = tsr_shfl_xor(x[i], offset);
  oy[i] = tsr_shfl_xor(y[i], offset);
  oz[i] = __shfl_xor_sync(0xffffffffu, z[i], offset);
}
"""


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("offset", [1, 2, 16, 31])
def test_a_shuffle_reads_the_partner_lane(schedule, offset):
    n = 128
    x = np.arange(n, dtype=np.float32) * 1.5
    y = -np.arange(n, dtype=np.float64)
    z = np.arange(n, dtype=np.int32) * 7
    ox, oy, oz = np.zeros_like(x), np.zeros_like(y), np.zeros_like(z)
    run_text(SHUFFLE, "shuffle", (2,), 64, [x, y, z, ox, oy, oz, np.int32(offset)], schedule=schedule)
    lane = np.arange(n)
    partner = (lane & ~31) | ((lane & 31) ^ offset)
    assert np.array_equal(ox, x[partner]) and np.array_equal(oy, y[partner]) and np.array_equal(oz, z[partner])


BALLOT = r"""
extern "C" __global__ void ballot(const int* p, unsigned* out) {
  out[threadIdx.x] = __ballot_sync(0xffffffffu, p[threadIdx.x]);
}
"""


def test_a_ballot_sets_the_bit_of_each_lane_whose_predicate_holds():
    p = (np.arange(64) % 3 == 0).astype(np.int32)
    out = np.zeros(64, np.uint32)
    run_text(BALLOT, "ballot", (1,), 64, [p, out], schedule="reverse")
    want = [sum(1 << i for i in range(32) if i % 3 == 0), sum(1 << i for i in range(32) if (i + 32) % 3 == 0)]
    assert out.tolist() == [want[0]] * 32 + [want[1]] * 32


LDMATRIX = r"""
extern "C" __global__ void ld(const unsigned short* m, unsigned* out, int trans) {
  extern __shared__ __align__(16) unsigned char tsr_smem[];
  unsigned short* s = reinterpret_cast<unsigned short*>(tsr_smem);
  for (int j = threadIdx.x; j < 4 * 64; j += blockDim.x) s[j] = m[j];
  __syncthreads();
  const unsigned short* row = s + (threadIdx.x / 8) * 64 + (threadIdx.x % 8) * 8;  // lane 8m + i: row i of matrix m
  unsigned r[4];
  if (trans) tsr_ldmatrix<4, true>(r, row);
  else tsr_ldmatrix<4>(r, row);
  for (int k = 0; k < 4; ++k) out[threadIdx.x * 4 + k] = r[k];
}
"""


@pytest.mark.parametrize("trans", [0, 1])
def test_ldmatrix_gives_each_lane_its_pairs_of_the_four_matrices(trans):
    m = np.arange(4 * 64, dtype=np.uint16) * 3 + 1  # matrix k, row i, column j at k*64 + i*8 + j
    out = np.zeros(32 * 4, np.uint32)
    run_text(LDMATRIX, "ld", (1,), 32, [m, out, np.int32(trans)], smem=512, schedule="random:2")
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for k in range(4):
            mat = m[k * 64:(k + 1) * 64].reshape(8, 8)
            lo, hi = (mat[2 * t, g], mat[2 * t + 1, g]) if trans else (mat[g, 2 * t], mat[g, 2 * t + 1])
            assert out[lane * 4 + k] == int(lo) | (int(hi) << 16), (lane, k)


MMA = r"""
extern "C" __global__ void mma(const unsigned* a, const unsigned* b, const float* c, float* d) {
  const int l = threadIdx.x;
  unsigned fa[4] = {a[l * 4], a[l * 4 + 1], a[l * 4 + 2], a[l * 4 + 3]}, fb[2] = {b[l * 2], b[l * 2 + 1]};
  float fc[4] = {c[l * 4], c[l * 4 + 1], c[l * 4 + 2], c[l * 4 + 3]}, fd[4];
  tsr_mma_m16n8k16_bf16(fd, fa, fb, fc);
  for (int i = 0; i < 4; ++i) d[l * 4 + i] = fd[i];
}
"""


def _fragments(A, B, C):
    """The PTX m16n8k16 fragments of each lane (hardware.md): g = lane >> 2, t = lane & 3."""
    ab = A.view(np.uint16).astype(np.uint32)
    bb = B.view(np.uint16).astype(np.uint32)
    fa, fb, fc = np.zeros((32, 4), np.uint32), np.zeros((32, 2), np.uint32), np.zeros((32, 4), np.float32)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for i, (r, k) in enumerate(((g, 2 * t), (g + 8, 2 * t), (g, 2 * t + 8), (g + 8, 2 * t + 8))):
            fa[lane, i] = ab[r, k] | ab[r, k + 1] << 16
        for i, k in enumerate((2 * t, 2 * t + 8)):
            fb[lane, i] = bb[k, g] | bb[k + 1, g] << 16
        for i, (r, c) in enumerate(((g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1))):
            fc[lane, i] = C[r, c]
    return fa, fb, fc


@pytest.mark.parametrize("model", ["tc:sm80", "tc:sm90"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mma_sync_computes_the_tensor_core_model_in_the_ptx_fragment_layout(model, seed):
    rng = np.random.default_rng(seed)
    scale = np.exp2(rng.integers(-12, 12, size=(16, 16)))  # products of many exponents: the alignment matters
    A = (rng.standard_normal((16, 16)) * scale).astype(ml_dtypes.bfloat16)
    B = rng.standard_normal((16, 8)).astype(ml_dtypes.bfloat16)
    C = rng.standard_normal((16, 8)).astype(np.float32)
    fa, fb, fc = _fragments(A, B, C)
    out = np.zeros((32, 4), np.float32)
    run_text(MMA, "mma", (1,), 32, [fa, fb, fc, out], tc=tc.model(model).block("bf16").resolved("bf16"))
    want = tc.mma(A, B, C, model)
    for lane in range(32):
        g, t = lane >> 2, lane & 3
        for i, (r, c) in enumerate(((g, 2 * t), (g, 2 * t + 1), (g + 8, 2 * t), (g + 8, 2 * t + 1))):
            assert out[lane, i].view(np.uint32) == want[r, c].view(np.uint32), (lane, i)


def test_mma_sync_without_a_tensor_core_model_is_a_finding():
    z = np.zeros((32, 4), np.uint32)
    with pytest.raises(HarnessFinding, match="names no tensor-core model"):
        run_text(MMA, "mma", (1,), 32, [z, z[:, :2].copy(), np.zeros((32, 4), np.float32),
                                        np.zeros((32, 4), np.float32)])


ATOMIC = r"""
extern "C" __global__ void count(int* n, float* f) {
  atomicAdd(n, 1);
  atomicAdd(f, 0.5f);
  __syncthreads();
  atomicMax(n + 1, (int)threadIdx.x);
}
"""


def test_atomics_see_every_thread():
    n, f = np.zeros(2, np.int32), np.zeros(1, np.float32)
    run_text(ATOMIC, "count", (3,), 96, [n, f], schedule="random:9")
    assert n.tolist() == [288, 95] and f[0] == 144.0


CP_ASYNC = r"""
extern "C" __global__ void early(const float* g, float* before, float* after) {
  extern __shared__ __align__(16) unsigned char tsr_smem[];
  float* s = reinterpret_cast<float*>(tsr_smem);
  tsr_cp_async<16>(s + 4 * threadIdx.x, g + 4 * threadIdx.x);
  tsr_cp_async_commit();
  before[threadIdx.x] = s[4 * threadIdx.x];  // a read the program may not rely on: no wait yet
  tsr_cp_async_wait<0>();
  after[threadIdx.x] = s[4 * threadIdx.x];
}
"""


@pytest.mark.parametrize("mode", ["deferred", "eager"])
def test_a_copy_lands_at_issue_or_at_its_wait(mode):
    g = np.arange(128, dtype=np.float32)
    before, after = np.zeros(32, np.float32), np.zeros(32, np.float32)
    run_text(CP_ASYNC, "early", (1,), 32, [g, before, after], smem=512, cp_async=mode)
    assert np.array_equal(after, g[::4])
    if mode == "eager":
        assert np.array_equal(before, g[::4])
    else:  # still the poison: 0xFF bytes
        assert (before.view(np.uint32) == 0xFFFFFFFF).all()


POISON = r"""
extern "C" __global__ void stale(float* out) {
  extern __shared__ __align__(16) unsigned char tsr_smem[];
  float* s = reinterpret_cast<float*>(tsr_smem);
  out[blockIdx.x * blockDim.x + threadIdx.x] = s[threadIdx.x];  // never written in this block
  s[threadIdx.x] = 1.0f;
}
"""


def test_shared_memory_is_poisoned_before_every_block():
    out = np.zeros(3 * 32, np.float32)
    run_text(POISON, "stale", (3,), 32, [out], smem=128)
    assert (out.view(np.uint32) == 0xFFFFFFFF).all()


FINDINGS = {
    "divergent": (r"""
extern "C" __global__ void k(float* out) {
  if (threadIdx.x < 32) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1.0f;
}
""", 64, "divergent barrier", "divergent __syncthreads: threads 0-31 wait at the barrier of line 8, threads 32-63 at "
         "the barrier of line 10"),
    "exited": (r"""
extern "C" __global__ void k(float* out) {
  if (threadIdx.x >= 48) return;
  __syncthreads();
  out[threadIdx.x] = 1.0f;
}
""", 64, "barrier after exit", "__syncthreads at line 8 is reached by threads 0-47 after threads 48-63 returned"),
    "partial warp": (r"""
extern "C" __global__ void k(float* out) {
  float v = out[threadIdx.x];
  if (threadIdx.x % 32 < 16) v = tsr_shfl_xor(v, 1);
  out[threadIdx.x] = v;
}
""", 64, "partial warp", "a warp shuffle of warp 0 \\(line 8\\) is reached by lanes 0-15 only; lanes 16-31 exited"),
    "short block": (r"""
extern "C" __global__ void k(float* out) {
  out[threadIdx.x] = tsr_shfl_xor(out[threadIdx.x], 1);
}
""", 48, "partial warp", "warp 1 \\(line 7\\) is reached by lanes 32-47 only; lanes 48-63 do not exist"),
}


@pytest.mark.parametrize("case", sorted(FINDINGS))
@pytest.mark.parametrize("schedule", SCHEDULES)
def test_every_finding_names_the_kernel_the_schedule_and_the_cuda_line(case, schedule):
    text, lanes, kind, message = FINDINGS[case]
    with pytest.raises(HarnessFinding, match=message) as info:
        run_text(text, "k", (2,), lanes, [np.zeros(lanes, np.float32)], schedule=schedule, cp_async="eager")
    err = info.value
    assert err.kind == kind and f"schedule {schedule}, cp.async eager, block (0, 0, 0)" in str(err)
    line = text.splitlines()[err.line - 5]  # the prelude is 4 lines, the text starts with a newline
    assert f"CUDA line {err.line}: {line.strip()}" in str(err)
    assert "__syncthreads" in line or "shfl" in line


def test_inline_ptx_without_a_twin_is_refused_naming_its_line():
    text = r"""
extern "C" __global__ void k(float* out) {
  asm volatile("bar.sync 0;");
}
"""
    with pytest.raises(UnsupportedPTX, match=r"CUDA line 7: asm volatile\(\"bar.sync 0;\"\);"):
        run_text(text, "k", (1,), 32, [np.zeros(1, np.float32)])


def test_a_static_shared_variable_is_refused_naming_its_line():
    """Under the twin a static __shared__ array would be each fiber's own (a race, a missing
    barrier would run clean): refused rather than run wrong (CUDA-CPU-9)."""
    text = r"""
extern "C" __global__ void k(const float* x, float* y) {
  __shared__ float s[64];  // static: one copy per block on a GPU
  s[threadIdx.x] = x[threadIdx.x];
  y[threadIdx.x] = s[63 - threadIdx.x];
}
"""
    with pytest.raises(BackendError, match=r"CUDA line 7 declares a static __shared__ variable") as info:
        run_text(text, "k", (1,), 64, [np.zeros(64, np.float32), np.zeros(64, np.float32)])
    assert "extern __shared__" in info.value.fix


def test_a_compile_error_names_the_cuda_line():
    text = 'extern "C" __global__ void k(float* out) {\n  out[0] = undefined_name;\n}\n'
    with pytest.raises(CompileError, match=r"CUDA line 6: out\[0\] = undefined_name;"):
        run_text(text, "k", (1,), 32, [np.zeros(1, np.float32)])


@pytest.mark.parametrize("bad", [dict(schedule="sideways"), dict(schedule="random:x"), dict(cp_async="late")])
def test_unknown_launch_options_are_refused(bad):
    with pytest.raises(BackendError, match="unknown"):
        run_text(SHUFFLE, "shuffle", (1,), 32, [], **bad)


def test_a_bad_launch_shape_is_refused():
    with pytest.raises(HarnessFinding, match="1 to 1024 threads per block"):
        run_text(BALLOT, "ballot", (1,), 2048, [np.zeros(64, np.int32), np.zeros(64, np.uint32)])


OUT_OF_BOUNDS = r"""
extern "C" __global__ void past(const float* x, float* y, int extra) {
  int i = threadIdx.x;
  y[i] = x[i + extra];
}
"""


@pytest.mark.parametrize("extra, buffer, distance", [(8, "argument 0", "0 bytes past the end"),
                                                     (-100, "argument 0", "400 bytes before the start")])
def test_an_access_outside_a_buffer_is_a_memory_fault_naming_the_line_and_the_buffer(extra, buffer, distance):
    x, y = np.arange(1024, dtype=np.float32), np.zeros(1024, np.float32)
    with pytest.raises(HarnessFinding, match=rf"memory fault .*{distance} of {buffer} \(4096 bytes\)") as info:
        run_text(OUT_OF_BOUNDS, "past", (1,), 1024, [x, y, np.int32(extra)])
    assert info.value.line == 8 and "CUDA line 8: y[i] = x[i + extra];" in str(info.value)


SMEM_PAST = r"""
extern "C" __global__ void over(float* y) {
  extern __shared__ __align__(16) unsigned char tsr_smem[];
  float* s = reinterpret_cast<float*>(tsr_smem);
  s[threadIdx.x * 1024] = 1.0f;
  y[threadIdx.x] = s[threadIdx.x * 1024];
}
"""


def test_an_access_past_the_shared_memory_of_the_launch_is_a_memory_fault():
    y = np.zeros(32, np.float32)
    with pytest.raises(HarnessFinding, match="memory fault") as info:
        run_text(SMEM_PAST, "over", (1,), 32, [y], smem=4096)
    assert info.value.line == 9
    run_text(SMEM_PAST, "over", (1,), 32, [y], smem=32 * 4096)  # with enough shared memory it runs
    assert (y == 1.0).all()


def test_builds_are_cached_on_disk_by_source_and_flags(tmp_path, monkeypatch):
    from tessera_ref.backends.cuda.cpu import build
    from tessera_ref.backends.cuda.source import Source
    from cpu_programs import PRELUDE
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(build, "_LOADED", {})  # nothing loaded yet
    source = Source(PRELUDE + BALLOT)
    build.library(source, ["ballot"])
    assert len(list((tmp_path / "cuda-cpu").glob("*.so"))) == 1
    monkeypatch.setattr(build, "_LOADED", {})  # a fresh process: the library comes from the disk cache
    def no_compiler(*args, **kwargs):
        raise RuntimeError("g++ called")
    monkeypatch.setattr(build.subprocess, "run", no_compiler)
    lib = build.library(source, ["ballot"])
    p, out = (np.arange(32) % 2).astype(np.int32), np.zeros(32, np.uint32)
    from tessera_ref.backends.cuda.cpu import harness
    harness.run(lib, "ballot", (1,), 32, [p, out], 0, harness.Options(), source)
    assert (out == 0xAAAAAAAA).all()
    with pytest.raises(RuntimeError, match="g\\+\\+ called"):  # other flags: another key
        build.library(source, ["ballot"], flags=build.DEBUG_FLAGS)


def test_launches_from_several_threads_give_the_same_bits():
    import threading
    x = np.arange(128, dtype=np.float32)
    outs = [np.zeros((3, 128), np.float32) for _ in range(4)]

    def work(i):
        for j, off in enumerate((1, 2, 4)):
            o = [np.zeros(128, np.float32), np.zeros(128), np.zeros(128, np.int32)]
            run_text(SHUFFLE, "shuffle", (2,), 64, [x, np.zeros(128), np.zeros(128, np.int32), *o, np.int32(off)],
                     schedule=f"random:{i}")
            outs[i][j] = o[0]
    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    lane = np.arange(128)
    want = np.stack([x[(lane & ~31) | ((lane & 31) ^ off)] for off in (1, 2, 4)])
    assert all(np.array_equal(o, want) for o in outs)
