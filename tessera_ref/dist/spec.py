"""``ShardSpec``: the user's spelling of a layout (MESH-SPEC-1), resolved against a tensor's
rank and a mesh into a :class:`~tessera_ref.ir.ShardLayout`.

``ShardSpec(partition, mesh_axes, replicate=False, reduce=None, pad=False)``:

- ``partition`` — the tensor dimensions to split, by name or index (negative indices count
  from the end). Names map to dimensions by MESH-SPEC-2:

  =========== ======================================================
  ``batch``   dimension 0
  ``row``     dimension ``rank−2`` (dimension 0 of a vector)
  ``col``     dimension ``rank−1`` (a vector has none: an error)
  ``channel`` dimension 1 (the NCHW convention; pass an index for NHWC)
  =========== ======================================================

- ``mesh_axes`` — the mesh axis splitting each partitioned dimension, in the same order; an
  entry may be a tuple of axes (split over their product, major first). Mesh axes listed
  *after* the partitioned ones are the axes of a pending reduction, which ``reduce`` names:
  ``ShardSpec(("row",), ("dp", "tp"), reduce="sum")`` is rows split over ``dp`` and a partial
  sum over ``tp``; ``ShardSpec(None, ("tp",), reduce="sum")`` is a partial sum over ``tp``.
- ``replicate=True`` — whole on every device (``partition`` must be empty).
- ``pad=True`` — allow a dimension that the axes do not divide; blocks are padded at the end.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import LayoutError
from ..ir.layout import PARTIAL_OPS, ShardLayout

__all__ = ["ShardSpec", "PARTITION_NAMES", "resolve_layout"]

#: The partition names and the rule that maps each to a dimension (MESH-SPEC-2).
PARTITION_NAMES = ("batch", "row", "col", "channel")


def _as_tuple(x) -> tuple:
    if x is None:
        return ()
    if isinstance(x, (str, int)):
        return (x,)
    return tuple(x)


@dataclass(frozen=True)
class ShardSpec:
    """Which tensor dimensions are split over which mesh axes (see the module docstring)."""

    partition: tuple = None
    mesh_axes: tuple = None
    replicate: bool = False
    reduce: str | None = None
    pad: bool = False

    def __post_init__(self):
        partition, axes = _as_tuple(self.partition), _as_tuple(self.mesh_axes)
        for i, a in enumerate(axes):
            if not (isinstance(a, str) or (isinstance(a, (tuple, list)) and a and all(isinstance(n, str) for n in a))):
                raise LayoutError(f"ShardSpec mesh_axes entry {i} is {a!r}: each entry names the mesh axis (or a "
                                  f"tuple of axes) splitting the dimension at the same position of partition "
                                  f"{partition}",
                                  fix="list only the split dimensions, e.g. ShardSpec(partition=('row',), "
                                      "mesh_axes=('tp',)); a dimension left out of partition is not split")
        axes = tuple(a if isinstance(a, str) else tuple(a) for a in axes)
        object.__setattr__(self, "partition", partition)
        object.__setattr__(self, "mesh_axes", axes)
        if self.replicate and partition:
            raise LayoutError(f"ShardSpec(partition={partition}, replicate=True) both splits and replicates",
                              fix="use replicate=True with partition=None, or drop replicate")
        if len(axes) < len(partition):
            raise LayoutError(f"ShardSpec partition {partition} names {len(partition)} dimension(s) but "
                              f"mesh_axes {axes} gives only {len(axes)} axis/axes",
                              fix="give one mesh axis per partitioned dimension, e.g. "
                                  "ShardSpec(partition=('row',), mesh_axes=('tp',))")
        if self.reduce is not None and self.reduce not in PARTIAL_OPS:
            raise LayoutError(f"ShardSpec reduce={self.reduce!r} is not a reduction", fix=f"use one of {PARTIAL_OPS}")
        extra = axes[len(partition):]
        if extra and self.reduce is None:
            raise LayoutError(f"ShardSpec mesh_axes {axes} has {len(extra)} more axis/axes than partition {partition}",
                              fix="give one mesh axis per partitioned dimension, or reduce='sum' to mark "
                                  f"{extra} as a pending partial sum")
        if self.reduce is not None and not extra:
            raise LayoutError(f"ShardSpec reduce={self.reduce!r} names no axis to reduce over",
                              fix="list the partial-sum axes in mesh_axes after the partitioned ones, "
                                  "e.g. ShardSpec(None, ('tp',), reduce='sum')")

    @property
    def partial_axes(self) -> tuple:
        """The mesh axes of the pending reduction."""
        return tuple(a for entry in self.mesh_axes[len(self.partition):]
                     for a in ((entry,) if isinstance(entry, str) else entry))

    def dimension(self, name, rank: int) -> int:
        """The tensor dimension a partition entry means for a rank-``rank`` tensor (MESH-SPEC-2)."""
        if isinstance(name, bool) or not isinstance(name, (int, str)):
            raise LayoutError(f"a partition entry is a name {PARTITION_NAMES} or a dimension index, got {name!r}")
        if isinstance(name, int):
            if not -rank <= name < rank:
                raise LayoutError(f"partition dimension {name} is outside a rank-{rank} tensor",
                                  fix=f"use -{rank}..{rank - 1}")
            return name % rank
        rule = {"batch": 0, "row": rank - 2 if rank >= 2 else 0, "col": rank - 1 if rank >= 2 else None,
                "channel": 1}
        if name not in rule:
            raise LayoutError(f"unknown partition name {name!r}",
                              fix=f"use one of {PARTITION_NAMES} or a dimension index")
        dim = rule[name]
        if dim is None or not 0 <= dim < rank:
            raise LayoutError(f"partition {name!r} has no dimension in a rank-{rank} tensor",
                              fix="pass a dimension index instead")
        return dim

    def layout(self, rank: int) -> ShardLayout:
        """This spec as the layout of a rank-``rank`` tensor."""
        dims = [()] * rank
        for entry, axes in zip(self.partition, self.mesh_axes):
            d = self.dimension(entry, rank)
            if dims[d]:
                raise LayoutError(f"ShardSpec partition {self.partition} names dimension {d} twice",
                                  fix="split each dimension once; to split over two axes pass a tuple: mesh_axes=(('dp', 'tp'),)")
            dims[d] = (axes,) if isinstance(axes, str) else tuple(axes)
        try:
            return ShardLayout(tuple(dims), self.partial_axes, self.reduce or "sum", self.pad)
        except Exception as exc:
            raise LayoutError(f"ShardSpec {self}: {getattr(exc, 'what', exc)}",
                              fix=getattr(exc, "fix", None)) from None


def resolve_layout(layout, rank: int) -> ShardLayout:
    """A :class:`ShardSpec`, a :class:`ShardLayout` or ``None`` (replicated) as a layout of
    a rank-``rank`` tensor."""
    if layout is None:
        return ShardLayout.replicated(rank)
    if isinstance(layout, ShardSpec):
        return layout.layout(rank)
    if isinstance(layout, ShardLayout):
        if layout.rank != rank:
            raise LayoutError(f"layout {layout} has {layout.rank} entries for a rank-{rank} tensor",
                              fix="give one entry per tensor dimension")
        return layout
    raise LayoutError(f"a layout is a dist.ShardSpec, got {type(layout).__name__}",
                      fix="pass layout=dist.ShardSpec(partition=('row',), mesh_axes=('tp',))")
