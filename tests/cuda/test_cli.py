"""CUDA-REPORT-5: ``tessera-ref cuda build`` compiles every kernel a program runs and reports
each with the numbers of ``build`` (registers, stack, shared memory, the main loop) and the
budgets; JSON output has the documented keys."""
import inspect
import json
import re
import textwrap

import pytest

from cuda_programs import needs_toolchain
from tessera_ref import demo
from tessera_ref.backends.cuda.compile import build
from tessera_ref.backends.cuda.report import occupancy
from tessera_ref.backends.cuda.source import render
from tessera_ref.backends.cuda.toolchain import PINNED
from tessera_ref.cli import main
from tessera_ref.errors import BackendError

pytestmark = needs_toolchain

PROGRAM = textwrap.dedent("""
    import numpy as np
    import tessera
    from tessera import op

    @tessera.jit
    def block(x):
        return op.softmax(op.rmsnorm_safe(x))

    x = np.ones((16, 64), np.float32)
    block(x)
    block(x)  # the same kernels again: compiled and reported once
""")


def _run(capsys, *argv):
    status = main(["cuda", "build", *argv])
    return status, capsys.readouterr().out


def test_json_report_matches_build(tmp_path, capsys):
    path = tmp_path / "prog.py"
    path.write_text(PROGRAM)
    status, out = _run(capsys, str(path), "--arch", "sm_90", "--json")
    report = json.loads(out)
    assert status == 0 and report["all_within_budget"] and report["version"] == 1 and report["archs"] == ["sm_90"]
    assert "--fmad=false" in report["options"] and set(report["toolchain"]) == set(PINNED)
    kernels = report["kernels"]
    assert [k["op"] for k in kernels] == ["rmsnorm_safe", "softmax"]
    assert all(k["location"].endswith("prog.py:8") for k in kernels)
    # independently: lower and build the softmax kernel ourselves, compare the numbers
    import numpy as np
    import tessera_ref as t
    from tessera_ref import op
    from tessera_ref.lowering import lower
    program = lower(t.jit(lambda x: op.softmax(x)).trace(np.ones((16, 64), np.float32)))
    (_, plan), = [s for s in program.steps if s[1] is not None]
    k = build(render(program.tile), "sm_90").kernels[plan.func.attributes["sym_name"]]
    got = kernels[1]["arch"]["sm_90"]
    assert (got["registers"], got["shared_bytes"], got["stack_bytes"]) == (k.registers, k.shared_bytes, 0)
    assert got["main_loop"] == dict(sorted(k.main_loop.items())) and kernels[1]["threads"] == plan.lanes
    assert got["occupancy"]["blocks"] == occupancy(k, plan.lanes).blocks
    assert got["budget_ok"] is True and got["violations"] == []


def test_text_report_marks_a_kernel_over_budget(tmp_path, capsys):
    """f32 attention with 128-wide heads: (64·128 + 2·64·256 + 128·64) · 4 + (64·64 + 3·64) · 4 =
    213,760 B of shared memory, within sm_90's 232,448 B per block, over sm_80's 166,912 B."""
    path = tmp_path / "prog.py"
    path.write_text("import numpy as np\nimport tessera\nfrom tessera import op\n"
                    "x = np.ones((64, 128), np.float32)\n"
                    "tessera.jit(lambda q, k, v: op.flash_attention(q, k, v, block_k=64))(x, x, x)\n")
    status, out = _run(capsys, str(path), "--arch", "sm_80,sm_90")
    assert "sm_80:" in out and "registers" in out and "main loop" in out
    assert status == 1 and out.count("budget: OVER") == 1 and "213760 B shared memory > 166912 B per block on sm_80" \
        in out and out.count("budget: OK") == 1


def test_an_unknown_architecture_is_refused_before_running(tmp_path):
    path = tmp_path / "prog.py"
    path.write_text("raise SystemExit('must not run')\n")
    with pytest.raises(BackendError, match="sm_70"):
        main(["cuda", "build", str(path), "--arch", "sm_70"])


@pytest.mark.slow
def test_demo_reports_its_kernels(capsys):
    status, out = _run(capsys, "--demo", "--arch", "sm_80,sm_90", "--json")
    report = json.loads(out)
    ops = sorted(k["op"] for k in report["kernels"])
    assert ops == ["flash_attention", "matmul", "matmul", "rmsnorm_safe"]
    lines = inspect.getsource(demo).splitlines()
    calls = [f"demo.py:{i}" for i, line in enumerate(lines, 1)
             if re.search(r"op\.(rmsnorm_safe|gemm|flash_attention)\(", line)]
    assert len(calls) == 4
    assert sorted(k["location"].rsplit("/", 1)[-1] for k in report["kernels"]) == sorted(calls)
    assert status == 0 and report["all_within_budget"]  # flash attention: 288 keys in blocks of 64, the last of 32
    for k in report["kernels"]:
        assert not k["error"] and set(k["arch"]) == {"sm_80", "sm_90"}, k
        assert all(r["budget_ok"] and r["spill_stores"] == r["stack_bytes"] == 0 for r in k["arch"].values()), k


def test_a_kernel_launch_is_compiled_and_keeps_its_multiply_add_unfused(tmp_path, capsys):
    path = tmp_path / "axpy.py"
    path.write_text(textwrap.dedent('''
        import numpy as np
        from tessera_ref import kernel

        k = kernel.from_source("""
        @kernel
        def axpy(X: f32[m], Y: mut f32[m], alpha: f32):
            i = tile.lane_id()
            for t in tile.range(m, step=128):
                y = alpha * tile.load(X, index=t+i) + tile.load(Y, index=t+i)
                tile.store(Y, index=t+i, value=y)
        """)
        y = np.zeros(256, np.float32)
        k(np.ones(256, np.float32), y, np.float32(2.0), grid=1, lanes=128)
    '''))
    status, out = _run(capsys, str(path), "--arch", "sm_80", "--json")
    (entry,) = json.loads(out)["kernels"]
    r = entry["arch"]["sm_80"]
    assert status == 0 and (entry["op"], entry["kernel"], entry["grid"], entry["threads"]) == ("@kernel", "axpy", [1], 128)
    assert r["sass"]["FMUL"] >= 1 and r["sass"]["FADD"] >= 1 and "FFMA" not in r["sass"]
