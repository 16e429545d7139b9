"""TILE-IR-1 (the dialect, its text, its side effects) and TILE-EXEC-1 (running a kernel)."""
from __future__ import annotations

import re

import numpy as np
import pytest

from tessera_ref import kernel, tbarrier, tile, tshared
from tessera_ref.errors import KernelError
from tessera_ref.ir import IRError, parse_module, verify
from tessera_ref.ir import tile as T
from tessera_ref.ir.passes import CommonSubexpressionElimination, DeadCodeElimination
from tessera_conformance import assert_bits, clause

from .support import counters, findings, launch, launch_module, part


@kernel
def staged_saxpy(x: f32[n], y: mut[f32[n]], alpha: f32):
    """Every IR feature a small kernel has: a mask, a loop, shared memory, a copy, a fragment."""
    s = tshared.alloc[f16](64, 32, swizzle="xor")
    acc = tile.zeros((4, 8), f32)
    i = tile.linear_id()
    for k in range(2):
        acc = acc
    if i < n:
        y[i] = alpha * x[i] + y[i]
    tbarrier()


#: The ops of tessera_ref.ir.tile's module documentation (TILE-IR-1).
TILE_OPS = {"lane_id", "linear_id", "num_lanes", "tile_id", "num_tiles", "dim", "constant", "binary", "unary",
            "reduce", "cast", "select", "load", "store", "alloc", "subview", "cp_async", "cp_async_commit",
            "cp_async_wait", "barrier", "fill", "frag_load", "frag_store", "mma", "for", "if", "yield"}


@clause("TILE-IR-1")
def test_a_kernel_is_a_func_of_tile_ops_with_its_attributes():
    text = staged_saxpy.inspect_ir().replace("'", '"')
    for piece in ('"tessera.func"', "tile.kernel = true", 'tile.params = ["x", "y", "alpha"]', 'tile.mut = ["y"]',
                  'tile.sizes = {n = ["x", 0]}', "tensor<[n]xf32>", "tensor<64x32xf16>", "tensor<4x8xf32>",
                  "tensor<i1>", ": () -> index", '"tessera.tile.for"', '"tessera.tile.if"', '"tessera.tile.yield"',
                  '"tessera.return"'):
        assert piece in text, piece
    names = {line.split('"')[1] for line in text.splitlines() if '"tessera.' in line}
    assert names <= {"tessera.module", "tessera.func", "tessera.return"} | {f"tessera.tile.{n}" for n in TILE_OPS}
    assert set(re.findall(r"\w+", T.__doc__)) >= TILE_OPS  # the list is the documented one


@clause("TILE-IR-1", "TILE-FE-1")
@pytest.mark.parametrize("expr", ["tile.zeros((4, 4), f32) + tile.zeros((4, 4), f32)", "-tile.zeros((4, 4), f32) * 2.0"])
def test_the_python_front_end_does_not_expose_fragment_arithmetic(expr):
    src = f"@kernel\ndef k(Y: mut f32[4, 4]):\n    c = {expr}\n"
    with pytest.raises(KernelError, match=r"\[at k.tsr:3\]"):
        kernel.from_source(src, filename="k.tsr")


def _round_trip(text):
    again = parse_module(text)
    verify(again)
    assert str(again) == text
    assert str(parse_module(str(again))) == text


@clause("TILE-IR-1")
def test_the_text_round_trips_byte_for_byte():
    from .test_numerics import tiled_matmul
    _round_trip(staged_saxpy.inspect_ir())
    _round_trip(tiled_matmul.inspect_ir())
    kb = T.KernelBuilder("frag", [("X", T.buffer((4, 8), "bf16")), ("Y", T.buffer((4, 8), "fp8_e5m2"), True)])
    X, Y = kb.params
    f = kb.frag_load(kb.subview(X, [0, 0], (4, 8)))
    g = kb.binary("sub", f, kb.reduce(f, "max", 1))
    kb.frag_store(kb.subview(Y, [0, 0], (4, 8)), kb.unary("exp", g))
    _round_trip(str(kb.finish()))


@clause("TILE-IR-1")
@pytest.mark.parametrize("name", ["barier", "frobnicate"])
def test_the_dialect_is_closed(name):
    text = staged_saxpy.inspect_ir().replace('"tessera.tile.barrier"', f'"tessera.tile.{name}"')
    with pytest.raises(IRError, match=name):
        verify(parse_module(text))


def _effects_kernel():
    """Ops of every side-effect kind, each used by nothing, plus pure ones used by nothing."""
    kb = T.KernelBuilder("effects", [("X", T.buffer((32,), "f32")), ("Y", T.buffer((32,), "f32"), True)])
    X, Y = kb.params
    i = kb.lane_id()
    kb.binary("add", i, kb.const(1))  # pure, dead
    kb.load(X, [i])  # reads memory
    s = kb.alloc((32,), "f32")  # allocates
    kb.cp_async(s, kb.subview(X, [0], (32,)))  # copies
    kb.commit()
    kb.commit()
    kb.wait(0)
    kb.barrier()
    kb.barrier()  # the same op twice: CSE keeps both
    kb.store(Y, [i], kb.load(s, [i]))
    kb.store(Y, [i], kb.load(s, [i]))
    return kb.finish()


@clause("TILE-IR-1")
def test_dce_and_cse_keep_memory_and_synchronization_ops():
    module = _effects_kernel()
    before = [op.name for op in module.walk()]
    DeadCodeElimination().run(module)
    CommonSubexpressionElimination().run(module)
    after = [op.name for op in module.walk()]
    kept = ("load", "store", "alloc", "cp_async", "cp_async_commit", "cp_async_wait", "barrier")
    for name in kept:
        assert after.count(f"tessera.tile.{name}") == before.count(f"tessera.tile.{name}"), name
    assert after.count("tessera.tile.binary") == before.count("tessera.tile.binary") - 1


@clause("TILE-IR-1", "TILE-EXEC-1")
def test_a_kernel_builder_kernel_launches(backend):
    x = np.arange(32, dtype=np.float32)
    y = np.zeros(32, np.float32)
    report = launch_module(backend, _effects_kernel(), [x, y], grid=1, lanes=32)
    assert_bits(y, x)
    assert findings(backend, report) == []  # one lane storing an element twice is not checked (TILE-CHECK-6)


@kernel
def scaled(X: f32[n, m], Y: mut[f32[n, m]], Z: mut[f32[4]], s: f32, rows: index):
    """Y[r, :] = s * X[r, :] for the rows this tile's lanes own; Z untouched past rows."""
    r = tile.linear_id()
    if r < rows:
        for c in range(m):
            Y[r, c] = X[r, c] * s
        Z[r % 4] = 1.0


@clause("TILE-EXEC-1")
def test_a_launch_runs_every_tile_and_reports(backend):
    x = np.arange(24, dtype=np.float32).reshape(8, 3)
    y = np.full((8, 3), -1, np.float32)
    z = np.zeros(4, np.float32)
    report = launch(backend, scaled, x, y, z, np.float32(0.5), 6, grid=4, lanes=2)
    want = np.full((8, 3), -1, np.float32)
    want[:6] = x[:6] * np.float32(0.5)
    assert_bits(y, want)  # updated in place
    outputs = part(backend, report, "outputs")
    assert outputs["Y"] is y and outputs["Z"] is z
    assert part(backend, report, "coverage") == {"Y": (18, 24), "Z": (4, 4)}
    assert findings(backend, report) and counters(backend, report).tiles == 4
    assert part(backend, report, "roofline").time > 0
    assert tuple(part(backend, report, "grid")) == (4,) and part(backend, report, "lanes") == 2


@clause("TILE-EXEC-1")
@pytest.mark.parametrize("args, match", [
    ((np.zeros((8, 3)), np.zeros((8, 3), np.float32)), "float32"),  # X is f64
    ((np.zeros(24, np.float32), np.zeros((8, 3), np.float32)), "rank|2"),
    ((np.zeros((8, 3), np.float32), np.zeros((8, 4), np.float32)), "m=3|m = 3|3"),
])
def test_arguments_must_match_the_parameters(backend, args, match):
    with pytest.raises(KernelError, match=match):
        launch(backend, scaled, *args, np.zeros(4, np.float32), np.float32(1), 2, grid=1, lanes=8)
