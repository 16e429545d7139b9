"""``--json`` of ``sim``, ``ops`` and ``demo`` (SIM-CLI-2): one JSON document on stdout with
its schema first; a single-device program is priced on device 0 (SIM-ACT-2)."""
import json
import subprocess
import sys
import textwrap

import pytest

from tessera_ref.ops import PRIMITIVES


def _cli(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "tessera_ref.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_sim_json_holds_the_numbers_and_the_script_prints_to_stderr(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text(textwrap.dedent("""
        from tessera import sim
        m = sim.current()
        print("hello from the script")
        m.alloc(1, 3 << 20, "W")
        m.record_collective("all_reduce", [(0, 1)], 1 << 20, axis="dp")
    """))
    out = _cli("sim", "--json", "--preset", "H100", "--devices", "2", str(script))
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)  # stdout is the document alone
    assert "hello from the script" in out.stderr
    assert doc["schema"] == "tessera-ref/sim/1" and doc["error"] is None
    (m,) = doc["machines"]
    assert m["schema"] == "tessera-ref/sim-summary/1" and m["preset"] == "H100"
    assert [d["peak_bytes"] for d in m["devices"]] == [0, 3 << 20]
    assert m["axes"][0]["axis"] == "dp" and m["axes"][0]["calls"] == {"all_reduce": 1}
    assert m["devices"][0]["comm_s"]["dp"] == pytest.approx(m["step_time_s"])


def test_sim_json_reports_the_scripts_error(tmp_path):
    script = tmp_path / "bad.py"
    script.write_text("raise ValueError('boom')\n")
    out = _cli("sim", "--json", "--preset", "H100", str(script))
    assert out.returncode == 1
    assert json.loads(out.stdout)["error"] == {"type": "ValueError", "message": "boom"}


def test_sim_prices_a_single_device_program(tmp_path):
    script = tmp_path / "one.py"
    script.write_text("import numpy as np\nfrom tessera import op\n"
                      "op.matmul(np.ones((64, 32), np.float32), np.ones((32, 16), np.float32))\n")
    text = _cli("sim", "--preset", "H100", "--devices", "1", str(script))
    assert text.returncode == 0, text.stderr
    assert "nothing was recorded" not in text.stdout and "matmul" in text.stdout
    doc = json.loads(_cli("sim", "--json", "--preset", "H100", "--devices", "1", str(script)).stdout)
    (device,) = doc["machines"][0]["devices"]
    # roofline on an H100, f32: max(flops / 67e12, bytes / 3.35e12) for 2·64·32·16 FLOPs and
    # (64·32 + 32·16 + 64·16)·4 bytes — memory-bound
    assert device["compute_s"] == pytest.approx((64 * 32 + 32 * 16 + 64 * 16) * 4 / 3.35e12)


def test_ops_json_lists_every_primitive_with_its_slots():
    out = _cli("ops", "--json")
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["schema"] == "tessera-ref/ops/1"
    assert [o["name"] for o in doc["ops"]] == sorted(PRIMITIVES)
    matmul = next(o for o in doc["ops"] if o["name"] == "matmul")
    assert matmul["rules"]["vjp"] is True and matmul["rules"]["kernel_family"] == "matmul"
    missing = json.loads(_cli("ops", "--json", "--missing").stdout)["ops"]
    assert all(None in o["rules"].values() for o in missing)
