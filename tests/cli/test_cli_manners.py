"""CLI manners (issue 19, item 6): a closed pipe ends quietly; a missing script or an
unwritable output is one line and exit 2 before anything runs; ``run`` and ``sim`` report a
script's Tessera error as one clean line (``--traceback`` for the rest) and ``sim`` prints
its report whatever the script raised; the demo writes no trace unless asked."""
import os
import subprocess
import sys
import textwrap

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tessera_ref", *args], capture_output=True, text=True,
                          cwd=cwd or ROOT, env={**os.environ, "PYTHONPATH": ROOT})


def test_a_closed_pipe_ends_quietly():
    for args in (["ops"], ["formats", "--json"]):
        p = subprocess.Popen([sys.executable, "-m", "tessera_ref", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, env={**os.environ, "PYTHONPATH": ROOT})
        p.stdout.close()  # the reader leaves at once, like `| head -0`
        err = p.stderr.read().decode()
        p.wait()
        assert "Traceback" not in err and "BrokenPipeError" not in err, err


def test_a_missing_file_or_a_directory_is_one_line_and_exit_2(tmp_path):
    for command in ("run", "sim"):
        for path, words in ((tmp_path / "nope.py", "no such file"), (tmp_path, "is a directory")):
            out = _cli(command, str(path))
            assert out.returncode == 2 and words in out.stderr, out.stderr
            assert out.stderr.count("\n") == 1 and "Traceback" not in out.stderr


def test_sim_refuses_a_trace_path_it_cannot_write_before_running(tmp_path):
    script = tmp_path / "p.py"
    script.write_text("print('ran')\n")
    out = _cli("sim", str(script), "--trace", "/no/such/dir/t.json")
    assert out.returncode == 2 and "does not exist" in out.stderr and "ran" not in out.stdout


ERROR_SCRIPT = textwrap.dedent("""
    import numpy as np
    from tessera import op, sim
    if sim.current():  # under `sim`: something for its report
        sim.current().alloc(0, 1 << 20, "W")
    op.matmul(np.ones((2, 3), np.float32), np.ones((2, 3), np.float32))
""")


def test_run_and_sim_report_a_tessera_error_as_one_line_and_traceback_on_request(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text(ERROR_SCRIPT)
    for command in ("run", "sim"):
        out = _cli(command, str(script))
        assert out.returncode == 1
        assert "error: ShapeError: matmul" in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert f"{script}:6" in out.stderr
        out = _cli(command, "--traceback", str(script)) if command == "run" else _cli(command, str(script),
                                                                                      "--traceback")
        assert out.returncode == 1 and "Traceback" in out.stderr and "error: ShapeError" in out.stderr
    assert "Step time" in _cli("sim", str(script)).stdout  # the report is printed before the error


def test_sim_prints_its_report_when_the_script_raises_any_exception(tmp_path):
    script = tmp_path / "boom.py"
    script.write_text("from tessera import sim\nsim.current().alloc(0, 1 << 20, 'W')\nraise KeyError('boom')\n")
    out = _cli("sim", str(script))
    assert out.returncode == 1 and "Step time" in out.stdout
    assert "KeyError: 'boom'" in out.stderr and "Traceback" in out.stderr


def test_the_demo_refuses_an_unwritable_trace_before_running():
    out = _cli("demo", "--trace", "/no/such/dir/t.json")
    assert out.returncode == 2 and "does not exist" in out.stderr and out.stdout == ""
