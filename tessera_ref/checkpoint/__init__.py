"""Sharded checkpoints of pytrees: ``checkpoint.save(path, tree, step=k)`` and
``checkpoint.restore(path, like=tree, mesh=mesh)`` (DESIGN §17; docs/spec/checkpoint.md,
the ``CKPT-*`` clauses).

A checkpoint is a directory: one safetensors file per process holding the blocks that
process is the lowest-rank holder of, and ``manifest.json`` (tree, meshes, layouts, policies,
shapes, the block -> file map, SHA-256 per file, CRC-32 per block, library version, step).
Restore moves blocks onto any mesh and process count, reading only the byte ranges each
process's blocks need.
"""
from ..errors import CheckpointError
from .files import ReadLog
from .restoring import CheckpointInfo, info, restore
from .saving import save

__all__ = ["save", "restore", "info", "CheckpointInfo", "ReadLog", "CheckpointError"]
