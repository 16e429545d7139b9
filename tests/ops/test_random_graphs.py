"""Hypothesis-generated random graphs: eager execution, the traced module, and the module
read back from its text all give the same bits, and the text round-trips byte for byte."""
import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.interp import run_function
from tessera_ref.ir import parse_module, verify

N = 4  # every value is a [N, N] tensor

UNARY = {
    "neg": op.neg, "abs": op.abs, "exp": op.exp, "tanh": op.tanh, "sigmoid": op.sigmoid,
    "sin": op.sin, "T": lambda x: x.T, "softmax": lambda x: op.softmax(x, axis=-1),
    "rowsum": lambda x: op.add(x, op.sum(x, axis=-1, keepdims=True)),
    "colmax": lambda x: op.sub(x, op.max(x, axis=0, keepdims=True)),
}
BINARY = {
    "add": op.add, "sub": op.sub, "mul": op.mul, "div": op.div, "minimum": op.minimum,
    "maximum": op.maximum, "matmul": op.matmul,
    "select": lambda a, b: op.where(op.less(a, b), a, b),
    "scaled": lambda a, b: op.add(op.mul(a, 0.5), b),
}

instruction = st.one_of(
    st.tuples(st.just("u"), st.sampled_from(sorted(UNARY)), st.integers(0, 99)),
    st.tuples(st.just("b"), st.sampled_from(sorted(BINARY)), st.integers(0, 99), st.integers(0, 99)),
    st.tuples(st.just("f"), st.just("fma"), st.integers(0, 99), st.integers(0, 99), st.integers(0, 99)),
)


def program(instructions, n_outputs):
    """A Python function applying ``instructions`` to a growing list of values."""
    def run(a, b):
        values = [a, b]
        for ins in instructions:
            kind, name, *refs = ins
            args = [values[r % len(values)] for r in refs]
            if kind == "u":
                values.append(UNARY[name](*args))
            elif kind == "b":
                values.append(BINARY[name](*args))
            else:
                values.append(op.fma(*args))
        return tuple(values[-n_outputs:])
    return run


def bits(x):
    return np.ascontiguousarray(np.asarray(x)).view(np.uint8)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(instruction, min_size=1, max_size=8), st.integers(1, 3), st.sampled_from(["f32", "bf16"]),
       st.integers(0, 2 ** 31 - 1))
def test_random_graphs_agree_eagerly_traced_and_parsed(instructions, n_outputs, fmt, seed):
    rng = np.random.default_rng(seed)
    a = tr.asarray(rng.normal(size=(N, N)), dtype=fmt)
    b = tr.asarray(rng.normal(size=(N, N)), dtype=fmt)
    fn = program(instructions, n_outputs)
    eager = fn(a, b)
    traced = tr.jit(fn)
    got = traced(a, b)
    text = str(traced.trace(a, b))
    module = parse_module(text)
    assert str(module) == text
    verify(module)
    reparsed = run_function(module.body.first_op, np.asarray(a), np.asarray(b))
    for e, t, p in zip(eager, got, reparsed):
        assert np.array_equal(bits(e), bits(t))
        assert np.array_equal(bits(e), bits(p))
