"""LOWER-EXACT-1: whole programs, narrow storage and random programs give the Graph IR
interpreter's bits on every schedule, with the checkers on."""
import numpy as np
import pytest

from tessera_ref import op
from tessera_conformance import assert_bits, clause

from ..tiles.support import bits, findings, fma_chain, round_to
from .support import adversarial, graph, lowered

RNG = np.random.default_rng(29)


def program(a, b, w):
    """matmul -> mul -> softmax -> sub -> layernorm -> mean: four families, one function."""
    s = op.softmax(op.matmul(a, b) * 0.125)
    n = op.layernorm_safe(s - a, w, w)
    return op.mean(n, axis=0), op.max(op.maximum(n, s), axis=1)


@clause("LOWER-EXACT-1")
@pytest.mark.parametrize("directives", [None, dict(tile=(16, 16, 16), stages=3, padding=1, vectorize=4),
                                        dict(tile=(32, 32, 32), shared=False, lanes=64),
                                        dict(tile=(64, 16, 8), swizzle="xor", async_copy=False, lanes=256)])
def test_a_whole_program_on_every_schedule(backend, directives):
    a, b = adversarial(RNG, (64, 64)), adversarial(RNG, (64, 64))
    w = RNG.standard_normal(64).astype(np.float32)
    got, reports, _ = lowered(backend, program, a, b, w, directives=directives)
    assert_bits(got, graph(program, a, b, w))
    assert len(reports) == 8 and all(findings(backend, r) == [] for r in reports)


@clause("LOWER-EXACT-1")
@pytest.mark.parametrize("fmt", ["bf16", "fp8_e4m3", "fp8_e5m2"])
@pytest.mark.parametrize("fn, kind", [
    (lambda x: op.sum(x, axis=(1, 2), keepdims=True), "x"), (lambda x: op.mean(x, axis=(0, 1)), "x"),
    (lambda x: op.min(x, axis=-1), "x"), (lambda x: op.softmax(x, axis=1), "x"),
    (lambda x, w, b: op.layernorm_safe(x, w, b), "norm"), (lambda x, w: op.rmsnorm_safe(x, w), "norm"),
    (lambda x, y: op.div(x, y), "xy"), (lambda x, y: op.minimum(op.neg(x), op.abs(y)), "xy"),
], ids=["sum", "mean", "min", "softmax", "layernorm", "rmsnorm", "div", "minimum"])
def test_narrow_storage(backend, fmt, fn, kind):
    x = round_to(RNG.standard_normal((3, 37, 40)) * 3, fmt)
    if kind == "x":
        args = [x]
    elif kind == "norm":
        args = [x.reshape(111, 40)] + [round_to(RNG.standard_normal(40), fmt)
                                       for _ in range(fn.__code__.co_argcount - 1)]
    else:
        args = [x, round_to(RNG.standard_normal((3, 37, 40)) * 3 + 0.25, fmt)]
    got, reports, _ = lowered(backend, fn, *args)
    assert got[0].dtype == x.dtype
    assert_bits(got, graph(fn, *args))
    assert all(findings(backend, r) == [] for r in reports)


@clause("LOWER-EXACT-1", "LOWER-MATMUL-3")
@pytest.mark.parametrize("fmt, big, special", [("fp8_e4m3", 32.0, np.isnan), ("fp8_e5m2", 448.0, np.isinf)])
def test_fp8_overflow_follows_each_format(backend, fmt, big, special):
    """Results past the format's range: e4m3 has no infinity (NaN of the sign), e5m2 ±inf."""
    a = round_to(np.full((16, 64), 32.0), fmt)
    b = round_to(np.full((64, 16), big), fmt)
    b[:, 1] = -b[:, 1]
    f = lambda a, b: op.matmul(a, b)  # noqa: E731
    got, _, _ = lowered(backend, f, a, b)
    assert_bits(got, graph(f, a, b))
    assert_bits(got[0], round_to(fma_chain(a, b), fmt))
    assert special(got[0].astype(np.float32)).all()
    assert (np.signbit(got[0][:, 1].astype(np.float32))).all() and not np.signbit(got[0][:, 0].astype(np.float32)).any()


UNARY = [lambda x: op.softmax(x), lambda x: op.neg(x), lambda x: op.abs(x) * 0.5, lambda x: x - 0.5]
BINARY = [lambda x, y: x + y, lambda x, y: op.maximum(x, y), lambda x, y: op.matmul(x, y),
          lambda x, y: x / (op.abs(y) + 1.0), lambda x, y: op.minimum(x * y, x)]


def random_program(seed):
    """A random composition of lowerable ops over two [32, 32] inputs (NNSmith in small)."""
    rng = np.random.default_rng(seed)
    steps = [(int(rng.integers(2)), int(rng.integers(len(UNARY))), int(rng.integers(len(BINARY))), int(rng.integers(2)))
             for _ in range(4)]

    def fn(x, y):
        values = [x, y]
        for binary, u, b, pick in steps:
            v = values[-1]
            values.append(BINARY[b](v, values[pick]) if binary else UNARY[u](v))
        return op.sum(values[-1], axis=1), values[-2]
    return fn


@clause("LOWER-EXACT-1")
@pytest.mark.parametrize("seed", range(6))
def test_random_programs(backend, seed):
    fn = random_program(seed)
    x, y = adversarial(RNG, (32, 32), span=1), adversarial(RNG, (32, 32), span=1)
    directives = [None, dict(tile=(16, 16, 8), stages=3, vectorize=2)][seed % 2]
    got, reports, _ = lowered(backend, fn, x, y, directives=directives)
    want = graph(fn, x, y)
    assert_bits(got, want)
    assert all(findings(backend, r) == [] for r in reports)
    assert all(bits(g).size for g in got)
