"""SCHED-IR (the Schedule IR dialect and its meaning) and SCHED-FIT-1 (fitting to shapes)."""
import numpy as np
import pytest

from tessera_ref import op
from tessera_ref.ir import VerifyError, parse_module, verify
from tessera_ref.ir import schedule as S
from tessera_ref.lowering import graph_to_schedule, run_schedule, schedule_to_tile
from tessera_conformance import assert_bits, clause, eager

from ..tiles.support import part
from .support import adversarial, findings, graph, graph_of, kernels, lowered, run_program, schedule_of

RNG = np.random.default_rng(3)
ATTRS = {"op", "tile", "lanes", "vectorize", "stages", "padding", "shared", "async_copy", "swizzle"}

# Seed 001 §4.3's line, in a module that gives it operands and a kernel around it.
SEED_001 = '''"tessera.module"() ({
  "tessera.func"() ({
  ^bb0(%A: tensor<64x32xf32>, %B: tensor<32x64xf32>):
    %C = "tessera.schedule.kernel"(%A, %B) ({
    ^bb0(%a: tensor<64x32xf32>, %b: tensor<32x64xf32>):
      %smemA = "tessera.schedule.prefetch"(%a) {scope="shared", double_buffer=true} : (tensor<64x32xf32>) -> tensor<64x32xf32>
      %smemB = "tessera.schedule.prefetch"(%b) {scope="shared", double_buffer=true} : (tensor<32x64xf32>) -> tensor<32x64xf32>
      %c = "tessera.graph.matmul"(%smemA, %smemB) {transpose_a = false, transpose_b = false} : (tensor<64x32xf32>, tensor<32x64xf32>) -> tensor<64x64xf32>
      "tessera.schedule.yield"(%c) : (tensor<64x64xf32>) -> ()
    }) {async_copy = true, lanes = 128, op = "matmul", padding = 1, shared = true, stages = 2, swizzle = "none", tile = [32, 32, 16], vectorize = 1} : (tensor<64x32xf32>, tensor<32x64xf32>) -> tensor<64x64xf32>
    "tessera.return"(%C) : (tensor<64x64xf32>) -> ()
  }) {function_type = (tensor<64x32xf32>, tensor<32x64xf32>) -> tensor<64x64xf32>, sym_name = "gemm"} : () -> ()
}) : () -> ()'''


def _program(fn, *args, directives=None):
    return graph_to_schedule(graph_of(fn, *args), directives)


def _kernels(fn, *args, directives=None):
    return [o for o in _program(fn, *args, directives=directives).body.first_op.regions[0].entry if o.name == S.KERNEL]


@clause("SCHED-IR-1")
def test_every_kernel_carries_its_whole_schedule_and_the_text_round_trips():
    a = RNG.standard_normal((64, 64)).astype(np.float32)
    module = _program(lambda a, b: op.softmax(op.matmul(a, b) + a), a, a, directives=dict(tile=(32, 32, 16)))
    text = str(module)
    again = parse_module(text)
    verify(again)
    assert str(again) == text
    ks = [o for o in module.body.first_op.regions[0].entry if o.name == S.KERNEL]
    assert [k.attributes["op"] for k in ks] == ["matmul", "add", "softmax"]
    for k in ks:
        assert set(k.attributes) == ATTRS
        assert k.regions[0].entry.last_op.name == S.YIELD
    assert text.count('"tessera.schedule.prefetch"') == 2  # the staged matmul operands


@clause("SCHED-IR-1")
def test_seed_001_spelling_parses_verifies_and_lowers(backend):
    module = parse_module(SEED_001)
    verify(module)
    text = str(module)
    assert 'double_buffer = true, scope = "shared"' in text and str(parse_module(text)) == text
    a = RNG.integers(-8, 9, (64, 32)).astype(np.float32)
    b = RNG.integers(-8, 9, (32, 64)).astype(np.float32)
    (got,), reports = run_program(backend, schedule_to_tile(module), a, b)
    assert_bits(got, (a.astype(np.float64) @ b).astype(np.float32))
    assert findings(backend, reports[0]) == []


@clause("SCHED-IR-1")
@pytest.mark.parametrize("old, new, match", [
    ("stages = 2", "stages = 0", "stages"),
    ('swizzle = "none", ', "", "swizzle"),
    ('swizzle = "none"', 'swizzle = "diagonal"', "swizzle"),
    ("padding = 1", "padding = -1", "padding"),
    ("vectorize = 1", "vectorize = 1, unroll = 4", "unroll"),
    ('scope="shared"', 'scope="global"', "scope"),
    ("tile = [32, 32, 16]", "tile = [32, 0, 16]", "tile"),
])
def test_the_verifier_rejects_malformed_schedules(old, new, match):
    module = parse_module(SEED_001.replace(old, new, 1))
    with pytest.raises(VerifyError, match=match):
        verify(module)
    with pytest.raises(VerifyError):
        schedule_to_tile(module)


@clause("SCHED-IR-1")
def test_the_dialect_is_closed():
    module = parse_module(SEED_001.replace('"tessera.schedule.prefetch"(%a)', '"tessera.schedule.stage"(%a)'))
    for check in (verify, schedule_to_tile):
        with pytest.raises(VerifyError, match=r"unknown op.*kernel.*prefetch.*yield"):
            check(module)


@clause("SCHED-IR-2")
@pytest.mark.parametrize("fn, shapes", [
    (lambda a, b: op.mean(op.matmul(a, b) + 1.0, axis=0), [(32, 48), (48, 32)]),
    (lambda a, b: op.softmax(op.matmul(a, b, transpose_b=True) * 0.5), [(32, 64), (32, 64)]),
    (lambda x, y: op.maximum(op.sum(x, axis=1), op.min(y, axis=1)) - 2.0, [(8, 100), (8, 100)]),
])
def test_run_schedule_has_the_graph_semantics(backend, fn, shapes):
    """Each kernel applies its region with the Graph IR semantics; prefetch is the identity;
    the Tile IR it lowers to keeps that meaning."""
    args = [adversarial(RNG, s) for s in shapes]
    module = _program(fn, *args, directives=dict(tile=(16, 16, 16), stages=3))
    want = graph(fn, *args)
    assert_bits(eager(backend, lambda: run_schedule(module, *args)), want)
    assert_bits(run_program(backend, schedule_to_tile(module), *args)[0], want)


@clause("SCHED-FIT-1")
@pytest.mark.parametrize("shapes, flags, directives, tile", [
    ([(96, 80), (80, 96)], {}, dict(tile=(128, 128, 32)), [96, 96, 20]),
    ([(80, 64), (64, 80)], {}, dict(tile=(128, 128, 128)), [80, 80, 64]),
    ([(96, 64), (96, 128)], dict(transpose_a=True), None, [64, 64, 32]),
    ([(64, 96), (80, 96)], dict(transpose_b=True), None, [64, 40, 32]),
    ([(2, 1, 48, 80), (3, 80, 24)], {}, None, [48, 24, 20]),
    ([(48, 36), (36, 60)], {}, dict(tile=(32, 32, 32)), [24, 30, 18]),
])
def test_each_tile_size_is_the_largest_divisor_not_above_the_request(shapes, flags, directives, tile):
    args = [np.ones(s, np.float32) for s in shapes]
    (k,) = _kernels(lambda a, b: op.matmul(a, b, **flags), *args, directives=directives)
    assert schedule_of(k)["tile"] == tile


@clause("SCHED-FIT-1")
@pytest.mark.parametrize("fn, shape, directives, want", [
    (lambda x: op.sum(x, axis=1), (6, 40), dict(tile=(4,)), dict(tile=[3], lanes=96)),
    (lambda x: op.max(x, axis=(1, 2)), (5, 7, 3), dict(tile=(8,)), dict(tile=[5], lanes=160)),
    (lambda x: op.softmax(x), (10, 33), None, dict(tile=[2], lanes=64)),
    (lambda x: op.mean(x, axis=-1), (12, 8), dict(tile=(5,)), dict(tile=[4], lanes=128)),
    (lambda x: x * 2.0, (5, 77), dict(lanes=64, vectorize=4, tile=(7,), shared=True), dict(lanes=64, vectorize=4,
                                                                                           shared=False)),
    (lambda x: op.matmul(x, x), (32, 32), dict(shared=False, stages=3, async_copy=True),
     dict(shared=False, stages=1, async_copy=False)),
    (lambda x: op.flash_attention(x, x, x, block_k=16), (64, 16), dict(tile=(32, 64, 16), shared=False,
                                                                      swizzle="xor"),
     dict(tile=[32, 16, 16], shared=True, swizzle="none")),
])
def test_fitting_rows_elementwise_staging_and_attention(fn, shape, directives, want):
    """Row kernels tile the rows (the non-reduced axes) with 32 lanes per row; without shared
    one stage and no cp.async; attention's key tile is block_k, always shared, never swizzled;
    a family ignores the directives it does not use."""
    (k,) = _kernels(fn, np.ones(shape, np.float32), directives=directives)
    got = schedule_of(k)
    assert {key: got[key] for key in want} == want


@clause("SCHED-FIT-1", "LOWER-EXACT-1")
def test_the_fitted_schedule_is_what_runs(backend):
    a = adversarial(RNG, (96, 80))
    b = adversarial(RNG, (80, 96))
    got, reports, program = lowered(backend, lambda a, b: op.matmul(a, b), a, b, directives=dict(tile=(128, 64, 32)))
    assert schedule_of(kernels(program)[0])["tile"] == [96, 48, 20]
    assert tuple(part(backend, reports[0], "grid")) == (1, 2) and part(backend, reports[0], "lanes") == 128
    assert_bits(got, graph(lambda a, b: op.matmul(a, b), a, b))
