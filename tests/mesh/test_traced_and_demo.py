"""Traced sharded programs show the collectives they need (MESH-SHARD-1), their IR text round
trips, and the bundled demo and the seeds' mesh snippets run."""
import os
import re
import subprocess
import sys
import warnings

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import dist, op
from tessera_ref.errors import DTypeError, LayoutError
from tessera_ref.ir import parse_module, verify

S = dist.ShardSpec
ROOT = __import__("pathlib").Path(__file__).resolve().parents[2]


def _mesh():
    return dist.Mesh(("dp", "tp"), range(6), (2, 3))


def _ops(text):
    return re.findall(r'"tessera\.graph\.(\w+)"', text)


def test_a_k_split_then_a_row_op_records_an_all_reduce_and_round_trips():
    mesh = _mesh()
    x = dist.tensor((4, 6), S(("col",), ("tp",)), mesh, init="randn", seed=1)
    w = dist.tensor((6, 9), S(("row",), ("tp",)), mesh, init="randn", seed=2)
    f = tr.jit(lambda a, b: op.softmax(op.matmul(a, b)))
    y = f(x, w)
    text = f.inspect_ir("graph")
    assert _ops(text) == ["matmul", "all_reduce", "softmax"]
    assert "partial(tp)" in text and y.layout.partial == ()
    module = parse_module(text)
    verify(module)
    assert str(module) == text
    # the traced run and the eager run are the same computation, bit for bit
    eager = op.softmax(dist.all_reduce(op.matmul(x, w), axis="tp"))
    assert np.array_equal(y.numpy().view(np.uint32), eager.numpy().view(np.uint32))


def test_a_mismatched_split_records_an_all_to_all():
    mesh = _mesh()
    a = dist.tensor((6, 6), S(("row",), ("tp",)), mesh, init="randn", seed=3)
    b = dist.tensor((6, 6), S(("col",), ("tp",)), mesh, init="randn", seed=4)
    f = tr.jit(lambda p, q: p + q)
    y = f(a, b)
    names = _ops(f.inspect_ir())
    assert names == ["all_to_all", "add"]  # b's tp split moves from the columns to the rows
    assert np.array_equal(y.numpy(), np.asarray(op.add(a.numpy(), b.numpy())))


def test_a_split_the_target_drops_is_gathered_and_one_it_moves_is_an_all_to_all():
    mesh = _mesh()
    a = dist.tensor((6, 6), S(("row",), ("tp",)), mesh, init="randn", seed=3)
    b = dist.tensor((6, 6), S(("row", "col"), ("dp", "tp")), mesh, init="randn", seed=4)
    f = tr.jit(lambda p, q: p + q)
    y = f(a, b)
    names = _ops(f.inspect_ir())
    assert names == ["all_gather", "all_to_all", "add"]  # dp off the rows, then tp from the columns to the rows
    assert np.array_equal(y.numpy(), np.asarray(op.add(a.numpy(), b.numpy())))


def test_explicit_collectives_in_traced_code_are_ops():
    mesh = _mesh()
    x = dist.tensor((6, 4), S(("row",), ("tp",)), mesh, init="randn", seed=5)
    f = tr.jit(lambda t: dist.all_gather(op.exp(t), axis="tp"))
    y = f(x)
    assert _ops(f.inspect_ir()) == ["exp", "all_gather"]
    assert y.layout.dims == ((), ())
    assert np.array_equal(y.numpy(), np.asarray(op.exp(x.numpy())))


def test_collectives_need_a_distributed_operand():
    with pytest.raises(DTypeError, match="needs a distributed tensor"):
        op.all_gather(np.ones((4, 4), np.float32), axis="tp")
    mesh = _mesh()
    x = dist.tensor((6, 4), S(("row",), ("tp",)), mesh)
    with pytest.raises(LayoutError, match="split over 'tp'"):
        tr.jit(lambda t: dist.all_reduce(t, axis="tp")).trace(x)


def test_a_collective_on_a_replicated_tensor_warns_and_keeps_the_value():
    mesh = _mesh()
    x = dist.tensor((6, 4), None, mesh, init="randn", seed=6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        y = dist.all_reduce(x, axis="tp")
    assert any("not a pending partial sum" in str(w.message) for w in caught)
    assert np.array_equal(y.numpy(), x.numpy())


def _run(*args, env=None):
    return subprocess.run([sys.executable, "-m", "tessera_ref.cli", *args], capture_output=True, text=True,
                          cwd=ROOT, timeout=300, env={**os.environ, **(env or {})})


def test_the_demo_runs_and_reports_what_it_checked(tmp_path):
    trace = tmp_path / "t.json"
    out = _run("demo", "--trace", str(trace))
    assert out.returncode == 0, out.stderr
    text = out.stdout
    ir = text[text.index('"tessera.module"'):text.index("each device holds")]
    assert _ops(ir) == ["rmsnorm_safe", "matmul", "split_qkv", "flash_attention", "transpose", "reshape", "matmul",
                        "reduce_scatter"]  # no communication before the K split, one collective after it
    assert "#shard<[dp, tp, *, *]>" in ir and "partial(tp)" in ir  # heads split over tp; the pending sum
    assert "rmsnorm, gemm(Wqkv), split_qkv, flash_attention: bit-identical" in text
    assert "reduction='exact': bit-identical to one device" in text
    assert re.search(r"reduce_scatter\[tp\] +8 groups of 9 devices, 1,327,104 B per device", text)  # 4*288*1152*4 / dp
    backward = text[text.index("5. the backward pass"):text.index("6. seed 002")]
    plan = re.findall(r"^ +(all_gather|all_reduce|reduce_scatter|all_to_all) +over (\w+)", backward, re.M)
    assert plan == [("all_gather", "tp"), ("all_reduce", "dp"), ("all_reduce", "dp")]  # Megatron's backward
    assert re.search(r"all_gather +over tp .* 1,327,104 B per device", backward)  # 4*288*1152*4 / dp, as forward
    assert re.search(r"all_reduce +over dp .* 1,769,472 B per device", backward)  # 1152*3456*4 / tp
    assert "gWqkv tensor<1152x3456xf32, #shard<[*, tp]>>, gWo tensor<1152x1152xf32, #shard<[tp, *]>>" in backward
    assert "reduction='exact': gWqkv: bit-identical to one device; gWo: bit-identical to one device" in backward
    assert "waiting" in text and "-0 ns" not in text
    assert "out of memory on cuda:0" in text and "W (seed 002)" in text
    assert "Step time" in text and f"timeline written to {trace}" in text
    events = __import__("json").loads(trace.read_text())["traceEvents"]
    assert any(e.get("name") == "reduce_scatter[tp]" for e in events)
    digest = re.search(r"SHA-256 of the output \(float32, \(4, 288, 1152\)\): ([0-9a-f]{64})", text).group(1)
    again = _run("demo", "--json", "--trace", str(tmp_path / "u.json"),
                 env={"OMP_NUM_THREADS": "1", "PYTHONHASHSEED": "7"})
    assert digest in again.stderr  # the same bits on every run, whatever the thread count
    # --json: the results as data on stdout, the demo's text on stderr (SIM-CLI-2)
    doc = __import__("json").loads(again.stdout)
    assert doc["schema"] == "tessera-ref/demo/1" and doc["output"]["sha256"] == digest
    assert doc["communication_plan"]["bytes_per_axis"] == {"dp": (1152 * 3456 + 1152 * 1152) * 4 // 9,
                                                           "tp": 4 * 288 * 1152 * 4 // 4}
    assert len(doc["machine"]["devices"]) == 72 and doc["machine"]["step_time_s"] > 0
    assert {a["axis"]: a["calls"] for a in doc["machine"]["axes"]} == {
        "tp": {"reduce_scatter": 2, "all_gather": 1}, "dp": {"all_reduce": 2}}


def test_the_seeds_mesh_snippets_run():
    out = _run("run", "examples/seed_meshes.py")
    assert out.returncode == 0, out.stderr
    assert "250.0 GB on each of the 72 devices" in out.stdout      # 2e12 B / 8, computed by hand
    assert "does not split evenly over mesh axes tp" in out.stdout  # seed 004 §2.2 as written
    assert "already split over 'tp'" in out.stdout                   # seed 003 §3.5's C is not partial
