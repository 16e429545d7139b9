"""CUDA-CPU-8, the mutation proof: bugs planted in rendered kernels (each plant keeps the line
count, so the CUDA lines and their Tile IR locations stay valid) are caught — as a finding
naming the planted line, or as bits that differ from the interpreter's — by some schedule and
cp.async mode; and the unplanted kernels pass under every one of them. A wrong tensor-core
structure in the twin's ``mma.sync`` (a wrong model of the device) is caught the same way."""
import dataclasses
import functools
import re
from unittest import mock

import ml_dtypes
import numpy as np
import pytest

import tessera_ref as t
from cpu_programs import COMBOS, bits, on_the_interpreter
from tessera_conformance.cases.numerics._common import fp8_structure_rows
from tessera_ref import backends, op
from tessera_ref.backends.cuda.cpu import CudaCpuBackend, FiberDevice, HarnessFinding
from tessera_ref.backends.cuda.cpu import backend as cpu_backend
from tessera_ref.backends.cuda.source import Source, render
from tessera_ref.lowering import lower
from tessera_ref.runtime import DeviceBackend


class _PlantedDevice(FiberDevice):
    """The harness device compiling every library with ``plant`` applied to its rendered text."""

    def __init__(self, schedule, cp_async, plant, memcheck):
        super().__init__(schedule, cp_async, memcheck)
        self.plant = plant

    def render(self, tile_module):
        unit = super().render(tile_module)
        text = self.plant(unit.source.text)
        assert text != unit.source.text and text.count("\n") == unit.source.text.count("\n"), \
            "the plant must change one line"
        return dataclasses.replace(unit, source=Source(text, unit.source.locations))


def Planted(schedule, cp_async, plant, memcheck="guard"):
    """The cuda-cpu backend over a device whose kernels carry ``plant``."""
    return DeviceBackend(_PlantedDevice(schedule, cp_async, plant, memcheck), "cuda-cpu")


@functools.lru_cache(maxsize=None)
def _tc_program(fmt="bf16", dtype=ml_dtypes.bfloat16, model="tc:sm80"):
    rng = np.random.default_rng(4)
    A = rng.standard_normal((128, 64)).astype(dtype)
    B = rng.standard_normal((64, 128)).astype(dtype)
    pol = t.Policy(fmt, accum=model)
    a, b = (t.asarray(x, policy=pol) for x in (A, B))
    program = lower(t.jit(lambda p, q: op.matmul(p, q)).trace(a, b), dict(tile=(128, 128, 32), lanes=256))
    with backends.use("interp"):
        want, _ = program.run(A, B)
    return program, [A, B], want


@functools.lru_cache(maxsize=None)
def _fp8_structure():
    """An e5m2 gemm under tc:sm90 with the outputs of fp8_structure_rows (tessera_conformance)."""
    rng = np.random.default_rng(9)
    A, B, C = (rng.standard_normal(s).astype(ml_dtypes.float8_e5m2) for s in ((64, 64), (64, 64), (64, 64)))
    fp8_structure_rows(A, B, C)
    pol = t.Policy("fp8_e5m2", accum="tc:sm90")
    program = lower(t.jit(lambda p, q, r: op.gemm(p, q, r)).trace(*(t.asarray(x, policy=pol) for x in (A, B, C))))
    with backends.use("interp"):
        want, _ = program.run(A, B, C)
    return program, [A, B, C], want


@functools.lru_cache(maxsize=None)
def _softmax_100():
    """Rows of 100 elements: the lanes' last pass is partial, so its bound is live."""
    x = np.random.default_rng(6).standard_normal((3, 100)).astype(np.float32)
    program = lower(t.jit(lambda v: op.softmax(v)).trace(x))
    with backends.use("interp"):
        want, _ = program.run(x)
    return program, [x], want


@functools.lru_cache(maxsize=None)
def _matmul_odd_k():
    """[3, 67] @ [67, 5]: K = 67 is prime, so each K tile is one column of A, a [3, 1] box."""
    rng = np.random.default_rng(8)
    a, b = rng.standard_normal((3, 67)).astype(np.float32), rng.standard_normal((67, 5)).astype(np.float32)
    program = lower(t.jit(lambda p, q: op.matmul(p, q)).trace(a, b))
    with backends.use("interp"):
        want, _ = program.run(a, b)
    return program, [a, b], want


@functools.lru_cache(maxsize=None)
def _program(name):
    special = {"matmul_tc": _tc_program, "softmax_100": _softmax_100, "gemm_tc_fp8_structure": _fp8_structure,
               "matmul_odd_k": _matmul_odd_k,
               "matmul_tc_fp8": lambda: _tc_program("fp8_e4m3", ml_dtypes.float8_e4m3fn, "tc:sm90")}
    return special[name]() if name in special else on_the_interpreter(name, 5)


def _nth(pattern, replace, n=0):
    """A plant: the ``n``-th match of ``pattern`` replaced by ``replace`` (a template)."""
    def plant(text):
        matches = list(re.finditer(pattern, text))
        m = matches[n]
        return text[:m.start()] + m.expand(replace) + text[m.end():]
    return plant


def _swap(a, b):
    """A plant: the strings ``a`` and ``b`` exchanged (two registers of a fragment)."""
    return lambda text: text.replace(a, "\0").replace(b, a).replace("\0", b)


def _line_of(text, pattern, n=0):
    return text[:list(re.finditer(pattern, text))[n].start()].count("\n") + 1


BARRIER = r"__syncthreads\(\);"
K_LOOP = r"for \(int k = 0; k < (\d+); \+\+k\) \{"
ODD_K_COPY = r"(tsr_cp_async<4>\(&v\d+\[v\d+_off \+ \(j\) \* 1 \+ )\(0\)( \* 1\], &A\[v\d+_off \+ \(j\) \* 67 \+ )\(0\)"

#: name -> (program, plant, (pattern, occurrence) of the line a finding names: the planted line, or
#: for an off-by-one bound the access it lets through)
MUTANTS = {
    "removed barrier (matmul)": ("matmul_f32", _nth(BARRIER, ";"), (BARRIER, 0)),
    "removed barrier (attention, 1st)": ("attention", _nth(BARRIER, ";", 0), (BARRIER, 0)),
    "removed barrier (attention, 2nd)": ("attention", _nth(BARRIER, ";", 1), (BARRIER, 1)),
    "removed barrier (attention, 3rd)": ("attention", _nth(BARRIER, ";", 2), (BARRIER, 2)),
    "removed barrier (attention, 4th)": ("attention", _nth(BARRIER, ";", 3), (BARRIER, 3)),
    "removed barrier (attention, 5th)": ("attention", _nth(BARRIER, ";", 4), (BARRIER, 4)),
    "cp.async wait depth 2 for 1": ("matmul_f32", _nth(r"tsr_cp_async_wait<1>", "tsr_cp_async_wait<2>"),
                                    (r"tsr_cp_async_wait<1>", 0)),
    "reversed k loop": ("matmul_f32", _nth(K_LOOP, r"for (int k = \1 - 1; k >= 0; --k) {"), (K_LOOP, 0)),
    "split k loop": ("matmul_f32", _nth(K_LOOP, r"for (int k0 = 0; k0 < \1; ++k0) { const int k = (k0 + \1 / 2) % \1;"),
                     (K_LOOP, 0)),
    "off-by-one bound": ("softmax_100", _nth(r"(bool v\d+ = v\d+) < (v\d+);", r"\1 <= \2;", 1),
                         (r"float v\d+ = x\[", 1)),  # the read one past the row: past the end in the last row
    "swapped mma fragment register": ("matmul_tc", _swap("fa[0][1] = ", "fa[0][2] = "), (r"tsr_mma_m16n8k16", 0)),
    "swapped fp8 mma fragment register (A)": ("matmul_tc_fp8", _swap("fa[0][1] = ", "fa[0][2] = "),
                                              (r"tsr_mma_m16n8k32", 0)),
    "swapped fp8 mma fragment register (B)": ("matmul_tc_fp8", _swap("fb[1][0] = ", "fb[1][1] = "),
                                              (r"tsr_mma_m16n8k32", 0)),
    "barrier in a divergent branch": ("matmul_f32", _nth(BARRIER, "if (threadIdx.x < 64) __syncthreads();"),
                                      (BARRIER, 0)),
    # the renderer once indexed element j of a [rows, 1] box at [j, j]: rows of a K tile of one
    # column landed in the wrong slots (one in the other stage's buffer) and were read from past A's row
    "[j, j] for [j, 0] in a one-column copy": ("matmul_odd_k", _nth(ODD_K_COPY, r"\1(j)\2(j)", 1),
                                                (ODD_K_COPY, 1)),
}


def _verdicts(name):
    """``{(schedule, cp_async): "finding" | "bits" | None}`` for mutant ``name``; every finding
    must name the planted line."""
    program_name, plant, (pattern, n) = MUTANTS[name]
    program, inputs, want = _program(program_name)
    text = render(program.tile).text
    line = _line_of(text, pattern, n)
    out = {}
    for schedule, cp_async in COMBOS:
        try:
            with backends.use(Planted(schedule, cp_async, plant)):
                got, _ = program.run(*inputs)
        except HarnessFinding as err:
            assert err.line == line and f"CUDA line {line}: " in str(err), (name, str(err))
            out[schedule, cp_async] = "finding"
            continue
        same = all(np.array_equal(bits(g), bits(w)) for g, w in zip(got, want))
        out[schedule, cp_async] = None if same else "bits"
    return out


@pytest.mark.parametrize("name", sorted(MUTANTS))
def test_every_planted_bug_is_caught(name):
    verdicts = _verdicts(name)
    assert any(verdicts.values()), (name, verdicts)


def test_the_cp_async_modes_catch_different_bugs():
    """A too-shallow wait is seen only when copies land late (deferred)."""
    verdicts = _verdicts("cp.async wait depth 2 for 1")
    assert all(verdicts[s, "deferred"] for s, m in COMBOS if m == "deferred"), verdicts
    assert not any(verdicts[s, "eager"] for s, m in COMBOS if m == "eager"), verdicts


def test_the_schedules_catch_different_bugs():
    """Without the attention kernel's third barrier, ascending order happens to be safe."""
    verdicts = _verdicts("removed barrier (attention, 3rd)")
    assert not verdicts["lockstep", "deferred"] and not verdicts["lockstep", "eager"], verdicts
    assert verdicts["reverse", "deferred"] and verdicts["reverse", "eager"], verdicts


def test_a_divergent_barrier_is_a_finding_under_every_schedule():
    assert set(_verdicts("barrier in a divergent branch").values()) == {"finding"}


#: the twin's fp8 instruction with another structure than the H200's (NUM-TC-1)
MODEL_MUTANTS = {"first and second half of k instead of k mod 4": dict(order=tuple(range(32))),
                 "C into the first block instead of an f32 add after": dict(fadd=False)}


@pytest.mark.parametrize("name", sorted(MODEL_MUTANTS))
def test_a_wrong_fp8_structure_in_the_twin_is_caught(name):
    program, inputs, want = _program("gemm_tc_fp8_structure")
    right = cpu_backend._tc_block

    def wrong(func):
        return dataclasses.replace(right(func), **MODEL_MUTANTS[name])

    with mock.patch.object(cpu_backend, "_tc_block", wrong), backends.use(CudaCpuBackend("lockstep", "deferred")):
        got, _ = program.run(*inputs)
    assert not np.array_equal(bits(got[0]), bits(want[0])), name


@pytest.mark.parametrize("name", ["matmul_f32", "attention", "softmax_100", "matmul_tc", "gemm_tc_fp8_structure",
                                  "matmul_odd_k"])
def test_unplanted_kernels_pass_under_every_combination(name):
    program, inputs, want = _program(name)
    for schedule, cp_async in COMBOS:
        with backends.use(CudaCpuBackend(schedule, cp_async)):
            got, _ = program.run(*inputs)
        assert all(np.array_equal(bits(g), bits(w)) for g, w in zip(got, want)), (name, schedule, cp_async)
