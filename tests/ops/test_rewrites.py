"""The graph rewrites (GRAPH-RW-*): each fires where it should, and all but the attention
fusion leave every bit of every result unchanged."""
import pathlib
import subprocess
import sys

import numpy as np

import tessera_ref as tr
from tessera_ref import op
from tessera_ref.ops.rewrites import FOLD_LIMIT

ROOT = pathlib.Path(__file__).resolve().parents[2]


def bits(x):
    return np.ascontiguousarray(np.asarray(x)).view(np.uint8)


def ops_in(fn) -> list[str]:
    return [line.split('"tessera.graph.')[1].split('"')[0]
            for line in fn.inspect_ir("graph").splitlines() if '"tessera.graph.' in line]


def run_both(fn, *args):
    """The optimized result, and the result of the same function traced without rewrites."""
    plain = tr.jit(fn.fn, rewrite=False)
    return fn(*args), plain(*args)


def test_transpose_pairs_compose_or_vanish():
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)

    @tr.jit
    def identity(x):
        return op.transpose(op.transpose(x, (1, 2, 0)), (2, 0, 1)) * 2.0

    @tr.jit
    def composed(x):
        return op.transpose(op.transpose(x, (1, 0, 2)), (0, 2, 1))

    for fn, expected in ((identity, ["mul", "constant"]), (composed, ["transpose"])):
        got, plain = run_both(fn, x)
        assert sorted(ops_in(fn)) == sorted(expected)
        assert np.array_equal(bits(got), bits(plain))
    assert np.array_equal(np.asarray(composed(x)), np.transpose(np.transpose(x, (1, 0, 2)), (0, 2, 1)))


def test_transposed_matmul_operands_fold_into_flags():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(5, 7)).astype(np.float32)
    b = rng.normal(size=(6, 7)).astype(np.float32)

    @tr.jit
    def f(a, b):
        return op.matmul(a, b.T), op.matmul(b.T.T, a.T)

    got, plain = run_both(f, a, b)
    assert ops_in(f) == ["matmul", "matmul"]
    text = f.inspect_ir("graph")
    assert "transpose_b = true" in text
    for g, p in zip(got, plain):
        assert np.array_equal(bits(g), bits(p))


def test_constants_fold_with_the_ops_own_bits_and_big_ones_do_not():
    c = np.linspace(0.1, 1.0, 16, dtype=np.float32)
    big = np.ones(FOLD_LIMIT + 1, np.float32)

    @tr.jit
    def f(x):
        return x + op.exp(op.mul(c, 3.0))

    @tr.jit
    def g(x):
        return x + op.mul(big, 3.0)

    x = np.ones(16, np.float32)
    got, plain = run_both(f, x)
    assert sorted(ops_in(f)) == ["add", "constant"]
    assert np.array_equal(bits(got), bits(plain))
    g(np.ones(FOLD_LIMIT + 1, np.float32))
    assert "mul" in ops_in(g)


def test_cse_and_dce():
    @tr.jit
    def f(x, y):
        op.exp(x)  # dead code: its result is never used
        return op.mul(x, y) + op.mul(x, y)

    x = np.ones(3, np.float32)
    f(x, x)
    assert sorted(ops_in(f)) == ["add", "mul"]
    report = f.cache[next(iter(f.cache))].report
    assert "common-subexpression" in str(report) or "cse" in str(report).lower()


def _attention(q, k, v):
    return op.matmul(op.softmax(op.matmul(q, k.T)), v)


def test_attention_is_fused_only_when_the_policy_allows_reassociation():
    rng = np.random.default_rng(3)
    q, k, v = (rng.normal(size=(40, 16)) for _ in range(3))
    canonical = tr.jit(_attention)
    r_canonical = canonical(*(tr.asarray(x, dtype="f32") for x in (q, k, v)))
    assert "flash_attention" not in ops_in(canonical)
    exact = tr.jit(_attention)
    exact(*(tr.asarray(x, policy=tr.f32 @ tr.accum(tr.f32, reduction="exact")) for x in (q, k, v)))
    assert "flash_attention" not in ops_in(exact)

    pol = tr.f32 @ tr.accum(tr.f32, reduction="reassociate")
    args = [tr.asarray(x, policy=pol) for x in (q, k, v)]
    fused = tr.jit(_attention)
    r_fused = fused(*args)
    assert ops_in(fused) == ["flash_attention"]
    # the fused op is exactly flash_attention(scale=1) ...
    assert np.array_equal(bits(r_fused), bits(op.flash_attention(*args, scale=1.0)))
    # ... which rounds differently from the unfused chain, but computes the same function.
    # Bound: scores |s| <= 16·max|q||k| ~ 50 carry f32 dot errors <= 16·2^-24·Σ|q_i k_i| ~ 5e-5;
    # exp turns that into a relative error of the weights; |out| <= max|v| < 5: 2e-4 is ample.
    q32, k32, v32 = (x.astype(np.float32).astype(np.float64) for x in (q, k, v))
    s = q32 @ k32.T
    p = np.exp(s - s.max(axis=1, keepdims=True))
    ref = (p / p.sum(axis=1, keepdims=True)) @ v32
    for r in (r_canonical, r_fused):
        assert np.max(np.abs(np.asarray(r).astype(np.float64) - ref)) < 2e-4
    assert not np.array_equal(bits(r_canonical), bits(r_fused))


def test_seed_attention_runs_verbatim():
    out = subprocess.run([sys.executable, "-m", "tessera_ref.cli", "run", str(ROOT / "examples" / "attention.py")],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.count('"tessera.graph.matmul"') == 2 and '"tessera.graph.flash_attention"' in out.stdout
    err = float(out.stdout.split("max |out - float64 reference| =")[1].split()[0])
    assert err < 1e-4
