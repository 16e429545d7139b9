"""A sharded program gives the same bits whatever the thread count and hash seed (DESIGN §6)."""
from determinism import digests_across_environments

SCRIPT = r'''
import hashlib
from tessera_ref import dist, op
from tessera_ref.numerics import Policy

S = dist.ShardSpec
mesh = dist.Mesh(("dp", "tp", "pp"), range(12), (2, 3, 2))
digest = hashlib.sha256()
for dtype in ("f32", "bf16", Policy("f32", reduction="exact")):
    x = dist.tensor((24, 48), S(("row", "col"), ("dp", "tp")), mesh, dtype=dtype, init="randn", seed=1)
    w = dist.tensor((48, 36), S(("row", "col"), ("tp", "pp")), mesh, dtype=dtype, init="randn", seed=2)
    h = dist.all_reduce(x @ w, "tp")                       # K split over tp: a pending sum
    y = op.softmax(op.layernorm_safe(h), axis=-1)          # over the split (pp) axis: gathered
    s = dist.all_reduce(op.sum(y * 3.0, axis=0), "dp")     # rows split over dp: pending, then folded
    for t in (h, y, s):
        digest.update(t.numpy().tobytes())
print(digest.hexdigest())
'''


def test_sharded_program_digest_is_the_same_for_1_and_2_threads():
    digests = digests_across_environments(SCRIPT)
    assert len(set(digests)) == 1, digests

