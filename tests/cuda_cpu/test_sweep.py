"""CUDA-CPU-7's default run: every launch under lockstep, reverse and random:1, each with
deferred and eager copies; the runs must write the same bits, or the launch is a finding. A
correct kernel gives the interpreter's bits from the sweep; seed 004's racy pipeline, whose
two cp.async modes disagree (counted here from two single runs), is a schedule-dependent
result naming the argument, the two runs and how many elements differ."""
import numpy as np
import pytest

from cpu_programs import bits, on_the_interpreter, seed_pipeline
from tessera_ref import backends
from tessera_ref.backends.cuda.cpu import CudaCpuBackend, HarnessFinding
from tessera_ref.errors import BackendError


def test_the_registered_backend_runs_three_schedules_in_both_modes():
    b = backends.get("cuda-cpu")
    assert [(o.schedule, o.cp_async) for o in b.device.runs] == [
        ("lockstep", "deferred"), ("lockstep", "eager"), ("reverse", "deferred"), ("reverse", "eager"),
        ("random:1", "deferred"), ("random:1", "eager")]
    assert repr(b) == "<tessera backend 'cuda-cpu' schedule=lockstep,reverse,random:1 cp_async=deferred,eager " \
                      "memcheck=guard>"
    assert len(CudaCpuBackend("reverse", "eager").device.runs) == 1


def test_a_correct_kernel_gives_the_interpreters_bits_from_the_sweep():
    program, inputs, want = on_the_interpreter("matmul_f32", 5)
    with backends.use(CudaCpuBackend("lockstep", "deferred")):
        _, single = program.run(*inputs)
    with backends.use("cuda-cpu"):
        got, reports = program.run(*inputs)
    assert all(np.array_equal(bits(g), bits(w)) for g, w in zip(got, want))
    assert [r.schedule for r in reports] == ["lockstep,reverse,random:1"] * len(reports)
    assert all(r.cp_async == "deferred,eager" for r in reports)
    # the schedules change the order of the switches, not their number: six runs, six times the switches
    assert [r.switches for r in reports] == [6 * s.switches for s in single]


def test_seed_004s_race_is_a_schedule_dependent_result():
    tp_axpy, X, Y0, out = seed_pipeline()
    differ = np.flatnonzero(out["deferred"].view(np.uint16) != out["eager"].view(np.uint16))
    assert differ.size > 0
    Y = Y0.copy()
    with pytest.raises(HarnessFinding) as caught, backends.use("cuda-cpu"):
        tp_axpy(X, Y, np.float16(2), grid=1, lanes=128)
    err, i = caught.value, int(differ[0])
    assert err.kind == "schedule-dependent result"
    assert (f"under schedule lockstep, cp.async eager it wrote {differ.size} of the 1024 elements of argument Y "
            f"with other bits than under schedule lockstep, cp.async deferred (the first at flat index {i}: "
            f"{float(out['deferred'][i])!r} (bits 0x{int(out['deferred'].view(np.uint16)[i]):04x}) there") in str(err)
    assert "missing __syncthreads" in err.fix
    assert np.array_equal(Y.view(np.uint16), out["deferred"].view(np.uint16))  # the first run's bits stay


@pytest.mark.parametrize("schedule, cp_async",
                         [((), "eager"), ("lockstep", []), (5, "eager"), ("lockstep", ("eager", 1))])
def test_an_empty_or_bad_list_of_runs_is_a_backend_error(schedule, cp_async):
    with pytest.raises(BackendError, match="is a name or a non-empty tuple of names"):
        CudaCpuBackend(schedule, cp_async)


def test_an_unknown_name_in_a_list_is_a_backend_error():
    with pytest.raises(BackendError, match="unknown cp.async mode 'late'"):
        CudaCpuBackend(("lockstep", "reverse"), ("deferred", "late"))
