"""``tessera-ref sim`` (SIM-CLI-1; tessera_ref/cli/sim.py), run as a subprocess."""
import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    from tessera import sim
    m = sim.current()
    print("running on", m)
    for d in range(m.n_devices):
        m.alloc(d, 1 << 30, "W")
    m.record_compute(range(m.n_devices), "matmul", (2e12, 1e9), "bf16")
    m.record_collective("all_reduce", [tuple(range(m.n_devices))], 1 << 20, axis="dp")
""")


def _sim(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tessera_ref.cli", "sim", *args],
                          capture_output=True, text=True, cwd=cwd)


def test_presets_table():
    out = _sim("--presets")
    assert out.returncode == 0, out.stderr
    for text in ["H100", "H200", "B200", "GB200-NVL72", "3.35 TB/s", "989.5", "141 GiB", "72"]:
        assert text in out.stdout


def test_one_preset_in_full():
    out = _sim("--presets", "--preset", "gb200_nvl72")
    assert out.returncode == 0, out.stderr
    for text in ["GB200-NVL72", "memory tiers", "registers", "shared memory", "186 GiB", "fp4 10000 T"]:
        assert text in out.stdout


def test_runs_a_file_and_writes_the_trace(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    trace = tmp_path / "out.json"
    out = _sim(str(script), "--preset", "H100", "--trace", str(trace))
    assert out.returncode == 0, out.stderr
    assert "running on Machine('H100', 8 devices)" in out.stdout
    assert "cuda:0..7" in out.stdout and "all_reduce[dp]" in out.stdout and "Step time" in out.stdout
    events = json.loads(trace.read_text())["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == 16


def test_devices_option_and_default_preset(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(SCRIPT)
    out = _sim(str(script), "--devices", "16", "--preset", "h100")
    assert out.returncode == 0, out.stderr
    assert "16 devices" in out.stdout and "network" in out.stdout  # 16 H100s span two domains
    out = _sim(str(script))
    assert "GB200-NVL72" in out.stdout and "cuda:0..71" in out.stdout


def test_a_script_with_its_own_machine_gets_its_report(tmp_path):
    script = tmp_path / "own.py"
    script.write_text(textwrap.dedent("""
        from tessera_ref import sim
        with sim.use(sim.machine("B200", devices=4)) as m:
            m.record_compute(range(4), "mine", (1e12, 0), "fp8")
    """))
    out = _sim(str(script))
    assert out.returncode == 0, out.stderr
    assert "B200, 4 x" in out.stdout and "mine" in out.stdout and "GB200-NVL72" not in out.stdout


def test_out_of_memory_in_the_script(tmp_path):
    script = tmp_path / "oom.py"
    script.write_text("from tessera import sim\nsim.current().alloc(0, 10**12, 'huge')\n")
    out = _sim(str(script), "--preset", "H100")
    assert out.returncode == 1
    assert "OutOfMemoryError" in out.stderr and "'huge'" in out.stderr and f"{script}:2" in out.stderr
    assert "Simulated machine: H100" in out.stdout


def test_unknown_preset_and_missing_file():
    out = _sim("x.py", "--preset", "H800")
    assert out.returncode == 2 and "H100, H200, B200, GB200-NVL72" in out.stderr
    out = _sim()
    assert out.returncode == 2 and "--presets" in out.stderr


def test_the_report_sees_what_the_script_still_holds(tmp_path):
    script = tmp_path / "hold.py"
    script.write_text(textwrap.dedent("""
        import weakref
        from tessera import sim

        class Tensor:  # frees its bytes when collected, as dist tensors do
            def __init__(self, nbytes):
                m = sim.current()
                weakref.finalize(self, m.free, m.alloc(0, nbytes, "kept"))

        kept = Tensor(3 << 30)
        Tensor(1 << 30)  # collected at once
    """))
    out = _sim(str(script), "--preset", "H100")
    assert out.returncode == 0, out.stderr
    assert "Live tensors on cuda:0 (the fullest device, 3 GiB): kept (3 GiB)" in out.stdout
