"""Seed 004's autodiff snippets run as written under ``import tessera`` (DESIGN §10): §2.5's
``gW = tessera.grad(loss_fn)(W)`` with tensor-parallel GEMMs on a mesh, and §2.8's
``@jit @autodiff`` transformer block. Only the definitions the seed leaves to the reader
(``model``, ``mse``, the tensors) are supplied around the verbatim text."""
import numpy as np

from tessera_ref.runner import run_path

SEED_2_5 = '''
def loss_fn(W):
    y = model(x, W)  # includes tensor-parallel GEMMs
    return mse(y, y_true)

gW = tessera.grad(loss_fn)(W)  # inserts reduce_scatter/all_gather in backward pass
'''

PRELUDE_2_5 = '''
import tessera
from tessera import dist, op

mesh = dist.mesh(devices=[f"cuda:{i}" for i in range(8)], axes=("dp", "tp"), shape=(2, 4))
S = dist.ShardSpec
x = dist.tensor((4, 8, 16), S((0, 1), ("dp", "tp")), mesh, init="randn", seed=1)
y_true = dist.tensor((4, 8, 16), S((0, 1), ("dp", "tp")), mesh, init="randn", seed=2)
W = dist.tensor((16, 16), S(("row",), ("tp",)), mesh, init="randn", seed=3)

def model(x, W):
    h = dist.all_gather(x, axis="tp")                   # the sequence, gathered
    return dist.collective.reduce_scatter(op.matmul(op.gelu(h), W), axis="tp", dim=1)

def mse(y, t):
    d = y - t
    return op.mean(d * d)
'''

SEED_2_8 = '''
@jit @autodiff
def block(x, Wqkv, Wo):
    h = rmsnorm_safe(x)
    qkv = gemm(x, Wqkv)                 # TP-sharded GEMM
    q,k,v = split_qkv(qkv, heads=16)
    y = flash_attention(q, k, v)        # all_gather + reduce_scatter fused
    return gemm(y, Wo)
'''

PRELUDE_2_8 = '''
import numpy as np
import tessera
from tessera import jit, autodiff
from tessera.op import rmsnorm_safe, gemm, split_qkv, flash_attention
'''


def test_seed_004_grad_with_tp_gemms_runs_as_written(tmp_path):
    script = tmp_path / "seed_2_5.py"
    script.write_text(PRELUDE_2_5 + SEED_2_5)
    env = run_path(str(script))
    gW, W = env["gW"], env["W"]
    assert gW.type == W.type  # the gradient in W's layout: rows split over tp
    g = env["tessera"].grad(env["loss_fn"])
    g(W)
    text = env["tessera"].autodiff.communication_plan(g)
    assert "all_gather         over tp" in text and "all_reduce         over dp" in text
    # against one device
    op, xs, ys = env["op"], env["x"].numpy(), env["y_true"].numpy()

    def one(W):
        d = op.matmul(op.gelu(xs), W) - ys
        return op.mean(d * d)
    ref = np.asarray(env["tessera"].grad(one)(W.numpy()))
    assert np.max(np.abs(gW.numpy() - ref)) <= 2.0 ** -20 * np.max(np.abs(ref))


def test_seed_004_jit_autodiff_block_runs_as_written(tmp_path):
    script = tmp_path / "seed_2_8.py"
    script.write_text(PRELUDE_2_8 + SEED_2_8)
    env = run_path(str(script))
    block, tessera, op = env["block"], env["tessera"], env["tessera"].op
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 8, 64)).astype(np.float32)
    Wqkv = (rng.standard_normal((64, 192)) * 0.1).astype(np.float32)
    Wo = (rng.standard_normal((4, 4)) * 0.5).astype(np.float32)  # gemm(y, Wo) on [B, heads, S, 64/16]
    y = block(x, Wqkv, Wo)
    assert y.shape == (2, 16, 8, 4)
    out, pullback = block.vjp(x, Wqkv, Wo)
    assert np.array_equal(np.asarray(out), np.asarray(y))
    u = np.ones(y.shape, np.float32)
    gx, gqkv, go = pullback(u)
    assert gx.shape == x.shape and gqkv.shape == Wqkv.shape and go.shape == Wo.shape
    g_wo = tessera.grad(lambda w: op.sum(block(x, Wqkv, w)))(Wo)
    assert np.allclose(np.asarray(g_wo), np.asarray(go), rtol=1e-5, atol=1e-5)
    assert "flash_attention" in pullback.inspect_ir()
