"""The seeds' mesh and sharding snippets, verbatim, on the simulated mesh.

Run with ``tessera-ref run examples/seed_meshes.py`` (``import tessera`` / ``from tessera import
dist`` then mean ``tessera_ref``). Between the snippets, a few lines print what each one built.
Every tensor here is abstract (no data): types, layouts and bytes per device only.
"""
import warnings

# -- seed 004 §2.1: the NVL72 mesh ------------------------------------------------------------
from tessera import dist

# Factorization: 4x9x2 = 72 GPUs
mesh = dist.mesh(
    devices=[f"cuda:{i}" for i in range(72)],
    axes=("dp","tp","pp"),
    shape=(4,9,2)
)
print("seed 004 §2.1:", mesh)

# -- seed 004 §2.2: a weight sharded over tp. 8192 columns do not split over tp=9: the seed's
# snippet is an error (MESH-TENSOR-2), and asking for padding makes it work -----------------------
try:
    W = dist.tensor(
        shape=(8192, 8192),
        layout=dist.ShardSpec(partition=("col",), mesh_axes=("tp",)), # sharded across tensor-parallel axis
        mesh=mesh,
        dtype="bf16"
    )
except dist.LayoutError as error:
    print("seed 004 §2.2 as written:", error)
W = dist.tensor(shape=(8192, 8192), layout=dist.ShardSpec(("col",), ("tp",), pad=True), mesh=mesh, dtype="bf16")
print("seed 004 §2.2 padded:", W.type, f"{W.nbytes_per_device:,} bytes per device (block {W.local_shape})")

# -- seed 000 §3.3: rows over tp (1024 rows do not split over the NVL72 mesh's tp=9, so on the
# 8-device mesh of seed 003 §3.5, where the default shape rule gives tp=2) ----------------------
mesh = dist.Mesh(axes=["tp", "dp"], devices=range(8))
X = dist.tensor(
    shape=(1024, 1024),
    layout=dist.ShardSpec(partition=("row",), mesh_axes=("tp",)),
    mesh=mesh,
    dtype="fp32"
)
print("seed 000 §3.3:", mesh, X.type, f"{X.nbytes_per_device:,} bytes per device")

# -- seed 002 §2.4-2.5: a 1,000,000 x 1,000,000 bf16 weight (2 TB) on 72 GPUs -------------------
from tessera import dist

# Define a 3D mesh over 72 GPUs: tensor, pipeline, and data parallel axes
mesh = dist.Mesh(axes=["tp", "pp", "dp"], devices=range(72))
W = dist.tensor(
    shape=(1_000_000, 1_000_000),
    layout=dist.ShardSpec(partition=("row", "col"), mesh_axes=("tp", "pp")),
    mesh=mesh,
    dtype="bf16"
)
print("seed 002 §2.5:", mesh, W.type)
print(f"  {W.nbytes / 1e12:.1f} TB in all, {W.nbytes_per_device / 1e9:.1f} GB on each of the 72 devices "
      f"(block {W.local_shape}; replicated over dp)")

# -- seed 001 §4.5 (the same weight, the same mesh) ---------------------------------------------
W = dist.tensor((1_000_000, 1_000_000),
                layout=dist.ShardSpec(partition=("row","col"), mesh_axes=("tp","pp")),
                mesh=mesh, dtype="bf16")
print("seed 001 §4.5:", W.type)

# -- seed 003 §3.5: row/col sharded matmul + reduce_scatter (the seed uses B, D, H as sizes and
# then rebinds B to a tensor; the sizes are set here) ----------------------------------------
B, D, H = 256, 512, 1024
from tessera import dist, op

mesh = dist.Mesh(axes=["tp", "dp"], devices=range(8))
A = dist.tensor((B, D), layout=dist.ShardSpec(("row",), ("dp",)), mesh=mesh)
B = dist.tensor((D, H), layout=dist.ShardSpec(("col",), ("tp",)), mesh=mesh)

with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    C_partial = op.matmul(A, B)
    C = dist.collective.reduce_scatter(C_partial, axis="tp")
print("seed 003 §3.5:", C_partial.type, "->", C.type)
for w in caught:  # C_partial is split over tp along its columns, not a partial sum: the tool says so
    print("  warning:", w.message)

# -- seed 001 §4.6: all_reduce over dp of a pending sum -----------------------------------------
X = dist.tensor((256, 512), layout=dist.ShardSpec(None, ("dp",), reduce="sum"), mesh=mesh)
Y = dist.all_reduce(X, axis="dp", op="sum")
print("seed 001 §4.6:", X.type, "->", Y.type)
