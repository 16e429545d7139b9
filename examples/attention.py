"""Seed 002 §2.2's attention module, verbatim, run with `tessera-ref run examples/attention.py`.

The four lines of the seed (the import and the decorated function) are unchanged; below them
this script calls the module on random inputs, prints its Graph IR, and shows what changes
when the inputs' policy allows reassociation (the matmul-softmax-matmul chain becomes one
flash_attention op, GRAPH-RW-4).
"""
from tessera import op, graph

@graph.module("attention")
def attention(Q, K, V):
    S = op.matmul(Q, K.T)
    A = op.softmax(S)
    return op.matmul(A, V)


if __name__ == "__main__":
    import numpy as np

    import tessera as ts

    rng = np.random.default_rng(0)
    q, k, v = (rng.normal(size=(128, 64)).astype(np.float32) for _ in range(3))
    out = attention(q, k, v)
    print(attention.inspect_ir("graph"))
    scores = q.astype(np.float64) @ k.T.astype(np.float64)
    p = np.exp(scores - scores.max(axis=1, keepdims=True))
    reference = (p / p.sum(axis=1, keepdims=True)) @ v
    print("max |out - float64 reference| =", float(np.max(np.abs(np.asarray(out) - reference))))

    fused_policy = ts.f32 @ ts.accum(ts.f32, reduction="reassociate")
    qr, kr, vr = (ts.asarray(x, policy=fused_policy) for x in (q, k, v))
    fused = attention(qr, kr, vr)
    print(attention.inspect_ir("graph"))
    print("max |fused - unfused| =", float(np.max(np.abs(np.asarray(fused) - np.asarray(out)))))
