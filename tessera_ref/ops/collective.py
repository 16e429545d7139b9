"""Collectives as Graph IR ops (MESH-COLL-1 … MESH-COLL-7).

Their types are the layout rules of the collectives: an op's operand is a sharded tensor type
(``tensor<..., #shard<...>>``) and ``infer`` computes the result's layout — ``all_reduce``
removes pending axes, ``reduce_scatter`` removes one and splits a dimension over it,
``all_gather`` joins a dimension, ``all_to_all`` moves a split, ``shard_slice`` takes a
split from replicated data without communication, ``collective_permute`` (``dist.permute``)
keeps the layout. The global
shape never changes. The data movement and the NUM-RED-3 reduction order live in
:mod:`tessera_ref.dist.collectives`; on distributed tensors these functions run it, in a
traced function they record the op, and the sharding propagation
(:func:`tessera_ref.dist.propagate.trace_apply`) inserts them where an op needs another
layout (MESH-REDIST-1).

On a tensor without a layout (one device) they are a :class:`~tessera_ref.errors.DTypeError`.
"""
from __future__ import annotations

from ..errors import AutodiffError, CollectiveError, DTypeError, LayoutError
from ..ir import ShardLayout, TensorType
from ..ir.layout import PARTIAL_OPS
from ..ir.redistribute import plan
from .adjoint import constant, in_accum, op
from .bind import bind
from .primitive import Attr, Cost, define, primitive
from .sharding import split_count
from .typecheck import check_int, check_str_choice, nbytes

__all__ = ["all_reduce", "reduce_scatter", "all_gather", "all_to_all", "collective_permute", "shard_slice"]

#: ``all_reduce``'s reductions: the pending ones plus ``avg`` (a sum divided once by the group size).
ALL_REDUCE_OPS = PARTIAL_OPS + ("avg",)


def _axis_tuple(value) -> tuple:
    axes = (value,) if isinstance(value, str) else tuple(value)
    if not axes or not all(isinstance(a, str) and a.isidentifier() for a in axes):
        raise ValueError("expected a mesh axis name or a tuple of them")
    return axes


def _axis(value) -> str:
    if not isinstance(value, str) or not value.isidentifier():
        raise ValueError("expected one mesh axis name")
    return value


def _sharded(name: str, x: TensorType) -> TensorType:
    if x.layout is None:
        raise DTypeError(f"{name} needs a distributed tensor (a type with #shard<...>), got {x}",
                         fix="create it with dist.tensor(..., mesh=mesh) or trace with distributed arguments")
    return x


def _dim(name: str, x: TensorType, dim: int) -> int:
    if not -x.rank <= dim < x.rank:
        raise LayoutError(f"{name}: dim={dim} is not a dimension of {x}", fix=f"use 0..{x.rank - 1}")
    return dim % x.rank


def _all_reduce_infer(attrs, x):
    lay = _sharded("all_reduce", x).layout
    for a in attrs["axis"]:
        if a in lay.split_axes:
            raise LayoutError(f"all_reduce over {a!r} of {x}: the tensor is split over {a!r} (dimension "
                              f"{lay.dim_of(a)}), so the ranks hold different blocks, not contributions to one sum",
                              fix=f"all_gather over {a!r} to assemble it, or reduce a partial sum")
    pending = tuple(a for a in attrs["axis"] if a in lay.partial)
    base = "sum" if attrs["op"] == "avg" else attrs["op"]
    if pending and lay.partial_op != base:
        raise LayoutError(f"all_reduce op={attrs['op']!r} over {pending} of {x}: its pending reduction is "
                          f"{lay.partial_op!r}", fix=f"use op={lay.partial_op!r}")
    return x.with_layout(lay.replace(partial=tuple(a for a in lay.partial if a not in pending)))


def scatter_conflict(x: TensorType, axis: str, dim: int) -> tuple | None:
    """``(what, fix)`` when ``x`` is already split over ``axis`` along another dimension than
    ``dim``, the one a reduce_scatter is asked to split (MESH-COLL-8); else ``None``."""
    split = x.layout.dim_of(axis) if x.layout is not None else None
    if split is None or split == dim:
        return None
    return (f"reduce_scatter over {axis!r} along dim {dim}: {x} is not a partial sum but already split over "
            f"{axis!r} along dimension {split}, so it cannot be split along dimension {dim}",
            f"leave dim out (or pass dim={split}) to keep it as it is, or all_gather(x, axis={axis!r}) first "
            f"to split dimension {dim}")


def _reduce_scatter_infer(attrs, x):
    lay = _sharded("reduce_scatter", x).layout
    axis, dim = attrs["axis"], _dim("reduce_scatter", x, attrs["dim"])
    if axis in lay.split_axes:
        conflict = scatter_conflict(x, axis, dim)
        if conflict is not None:
            raise LayoutError(conflict[0], fix=conflict[1])
        return x  # not a partial sum: already split over the axis (a CollectiveWarning when run)
    reduced = _all_reduce_infer({"axis": (axis,), "op": attrs["op"]}, x).layout
    return x.with_layout(reduced.replace(dims=tuple(d + (axis,) if i == dim else d for i, d in enumerate(reduced.dims))))


def _all_gather_infer(attrs, x):
    lay = _sharded("all_gather", x).layout
    axis = attrs["axis"]
    if axis in lay.partial:
        raise LayoutError(f"all_gather over {axis!r} of {x}: the tensor is a pending partial sum over {axis!r}",
                          fix=f"all_reduce over {axis!r} or reduce_scatter first")
    d = lay.dim_of(axis)
    if d is None:
        return x
    if lay.dims[d][-1] != axis:
        raise LayoutError(f"all_gather over {axis!r} of {x}: dimension {d} is split over {'+'.join(lay.dims[d])} "
                          f"and {axis!r} is not its minor axis", fix=f"gather {lay.dims[d][-1]!r} first")
    return x.with_layout(lay.replace(dims=tuple(tuple(a for a in dims if a != axis) for dims in lay.dims)))


def _all_to_all_infer(attrs, x):
    lay = _sharded("all_to_all", x).layout
    axis = attrs["axis"]
    split, concat = _dim("all_to_all", x, attrs["split_dim"]), _dim("all_to_all", x, attrs["concat_dim"])
    if lay.dim_of(axis) != concat:
        raise LayoutError(f"all_to_all over {axis!r}: {x} is not split over {axis!r} along concat_dim={concat}",
                          fix="concat_dim is the dimension currently split over the axis")
    gathered = _all_gather_infer({"axis": axis}, x).layout
    return x.with_layout(gathered.replace(dims=tuple(d + (axis,) if i == split else d
                                                     for i, d in enumerate(gathered.dims))))


def _permute_infer(attrs, x):
    lay = _sharded("permute", x).layout
    if attrs["axis"] in lay.partial:
        raise LayoutError(f"collective_permute over {attrs['axis']!r} of a pending reduction ({x})", fix="all_reduce first")
    return x


def _shard_slice_infer(attrs, x):
    lay = x.layout or ShardLayout.replicated(x.rank)  # data without a layout is whole everywhere
    axis, dim = attrs["axis"], _dim("shard_slice", x, attrs["dim"])
    if axis in lay.varying_axes:
        raise LayoutError(f"shard_slice over {axis!r} of {x}: the tensor already varies along {axis!r}",
                          fix="gather or reduce over the axis first")
    return x.with_layout(lay.replace(dims=tuple(d + (axis,) if i == dim else d for i, d in enumerate(lay.dims))))


def _comm_cost(call) -> Cost:
    """No FLOPs here; bytes are the local buffer (the simulator prices the link, SIM clauses)."""
    return Cost(0, nbytes(call.in_types[0].with_layout(None)))


def _not_on_one_device(call, *arrays):
    raise DTypeError(f"{call.primitive.name} runs on the simulated mesh, not on one device",
                     fix="run the function on dist tensors (the mesh interpreter executes collectives)")


def MESH_ONLY(attrs, *types):
    """The ``shard`` rule of a collective: it *is* the communication; tessera_ref.dist runs it."""
    raise AssertionError("collectives are executed by tessera_ref.dist, not through a shard rule")


_OP = {"op": Attr("sum", check_str_choice(*ALL_REDUCE_OPS), "the reduction")}


# ---------------------------------------------------------------------------------------
# derivatives (AD-COLL-1 … AD-COLL-3)
#
# A collective keeps the global value (permute aside: it moves blocks; avg divides it), so its derivative is
# the identity on global values; what it does is choose the layout. A cotangent of a value
# takes the value's splits and no pending reduction — the dual of "a pending sum over axis a"
# (every rank's contribution) is "replicated over a" (every rank's contribution gets the whole
# cotangent) — and getting there is where the transposed collectives come from: an all_gather's
# pending-sum cotangent is reduce-scattered, a reduce_scatter's split cotangent all-gathered,
# an all_reduce's replicated cotangent passes unchanged, a shard_slice's split cotangent is
# all-gathered, an all_to_all's cotangent goes back by the swapped all_to_all, a permute's by
# the inverse permutation.

def to_layout(x, layout: ShardLayout):
    """``x`` moved into ``layout`` by the collective ops of MESH-REDIST-1's plan (a value without
    a layout is whole on every device). On tracers this records the ops; on DistTensors it runs them."""
    current = x.type.layout or ShardLayout.replicated(x.type.rank)
    for kind, axis, dim in plan(current, layout):
        if kind == "all_reduce":
            x = all_reduce(x, (axis,), op=current.partial_op)
        elif kind == "reduce_scatter":
            x = reduce_scatter(x, axis, dim, op=current.partial_op)
        elif kind == "all_gather":
            x = all_gather(x, axis)
        else:
            x = shard_slice(x, axis, dim)
        current = x.type.layout
    return x


def _dual(t: TensorType) -> ShardLayout:
    """The layout of a cotangent of a value of type ``t``: its splits, nothing pending."""
    return (t.layout or ShardLayout.replicated(t.rank)).replace(partial=())


def _group_size(x, axes) -> int:
    """The number of ranks an ``avg`` over ``axes`` divides by: the product of their sizes on
    ``x``'s mesh — a DistTensor's own, else the mesh the trace plans for, else (a transform's
    first trace, when only captured tensors are distributed) the captured tensors' mesh."""
    mesh = getattr(x, "mesh", None)
    if mesh is not None:
        return mesh.axis_size(tuple(axes))
    p = split_count(axes)
    captures = getattr(getattr(x, "trace", None), "captures", None)
    if p is None and captures:
        p = captures[0][0].mesh.axis_size(tuple(axes))
    if p is None:
        raise AutodiffError(f"the derivative of an avg over {axes} needs the mesh's axis sizes, and {x.type} "
                            "is traced without a mesh", fix="pass a distributed tensor as an argument")
    return p


def _averaged(attrs, operand_type, value):
    """``value`` (a cotangent or tangent) divided by the group size ``p`` when the collective
    averages (``op="avg"``: the global value is the pending sum divided by ``p``), else as it
    is. ``p`` is the product of the sizes of the axes the op reduces — those of ``attrs``'
    axes that are pending in ``operand_type`` — converted into the accumulation format
    (exact: ``p`` < 2²⁴); ``value ⊘ p`` is one division rounded to nearest even there, then
    converted once into storage with the policy's rounding (the forward's avg, MESH-COLL-1)."""
    if attrs.get("op") != "avg":
        return value
    axes = (attrs["axis"],) if isinstance(attrs["axis"], str) else tuple(attrs["axis"])
    pending = tuple(a for a in axes if a in (operand_type.layout.partial if operand_type.layout else ()))
    if not pending:
        return value
    p = _group_size(value, pending)
    return in_accum(lambda policy, v: op().div(v, constant(float(p), policy)), value)


def _vjp_to_operand(attrs, primals, results, cts):
    """AD-COLL-1: the cotangent moved into the operand's dual layout (``⊘ p`` for ``avg``)."""
    return (_averaged(attrs, primals[0].type, to_layout(cts[0], _dual(primals[0].type))),)


def _all_to_all_vjp(attrs, primals, results, cts):
    """AD-COLL-2: the swapped all_to_all when the cotangent is split like the result."""
    ct = cts[0]
    if ct.type.layout == results[0].type.layout:
        return (all_to_all(ct, attrs["axis"], split_dim=attrs["concat_dim"], concat_dim=attrs["split_dim"]),)
    return (to_layout(ct, _dual(primals[0].type)),)


def _permute_vjp(attrs, primals, results, cts):
    """AD-COLL-3: the inverse permutation (ranks that sent nothing get +0)."""
    ct = to_layout(cts[0], _dual(results[0].type))
    return (bind(PERMUTE, ct, axis=attrs["axis"], pairs=tuple((d, s) for s, d in attrs["pairs"])),)


def _jvp_same(name: str):
    """The tangent through the same collective when it has the operand's layout, else moved into
    the result's dual layout (the collective is the identity on global values; ``⊘ p`` for
    ``avg``, as the collective itself divides)."""
    def jvp(attrs, primals, tangents, results):
        t = tangents[0]
        if t is None:
            return (None,)
        if t.type.layout == primals[0].type.layout:
            return (bind(primitive(name), t, **attrs),)
        if name == "collective_permute":
            return (bind(PERMUTE, to_layout(t, _dual(primals[0].type)), **attrs),)
        return (_averaged(attrs, primals[0].type, to_layout(t, _dual(results[0].type))),)
    return jvp


_VJP = {"all_to_all": _all_to_all_vjp, "collective_permute": _permute_vjp}


def _define(name, infer, spec, attrs):
    return define(name, infer=infer, impl=_not_on_one_device, cost=_comm_cost, spec=spec, attrs=attrs,
                  shard=MESH_ONLY, layout_aware=True, vjp=_VJP.get(name, _vjp_to_operand), jvp=_jvp_same(name))


ALL_REDUCE = _define("all_reduce", _all_reduce_infer, "MESH-COLL-1",
                     {"axis": Attr(check=_axis_tuple, doc="the mesh axis or axes"), **_OP})
REDUCE_SCATTER = _define("reduce_scatter", _reduce_scatter_infer, "MESH-COLL-2",
                         {"axis": Attr(check=_axis, doc="the mesh axis"),
                          "dim": Attr(check=check_int, doc="the dimension to split"), **_OP})
ALL_GATHER = _define("all_gather", _all_gather_infer, "MESH-COLL-3", {"axis": Attr(check=_axis, doc="the mesh axis")})
ALL_TO_ALL = _define("all_to_all", _all_to_all_infer, "MESH-COLL-5",
                     {"axis": Attr(check=_axis, doc="the mesh axis"),
                      "split_dim": Attr(check=check_int, doc="the dimension split afterwards"),
                      "concat_dim": Attr(check=check_int, doc="the dimension split before")})
PERMUTE = _define("collective_permute", _permute_infer, "MESH-COLL-6",
                  {"axis": Attr(check=_axis, doc="the mesh axis"),
                   "pairs": Attr(check=lambda v: tuple(tuple(int(r) for r in p) for p in v),
                                 doc="(source rank, destination rank) pairs")})
SHARD_SLICE = _define("shard_slice", _shard_slice_infer, "MESH-REDIST-1",
                      {"axis": Attr(check=_axis, doc="the mesh axis"),
                       "dim": Attr(check=check_int, doc="the dimension each device keeps a block of")})


def _scatter_default(x, axis) -> int:
    """reduce_scatter's default ``dim``: the dimension already split over ``axis`` (the tensor is
    then returned unchanged, MESH-COLL-8), else the first whole one."""
    lay = getattr(x.type, "layout", None)
    if lay is None:
        return 0
    split = lay.dim_of(axis) if isinstance(axis, str) else None
    return split if split is not None else next((d for d, axes in enumerate(lay.dims) if not axes), 0)


def all_reduce(x, axis, op: str = "sum"):
    """``dist.all_reduce(X, axis="dp", op="sum")``: carry out the pending reduction over ``axis`` (MESH-COLL-1)."""
    return bind(ALL_REDUCE, x, axis=axis, op=op)


def reduce_scatter(x, axis, dim=None, op: str = "sum"):
    """Carry out the pending reduction over ``axis`` and split ``dim`` over it (MESH-COLL-2);
    ``dim`` defaults to the first dimension that is whole (to the split one of a tensor already
    split over ``axis``, which is returned unchanged: MESH-COLL-8)."""
    return bind(REDUCE_SCATTER, x, axis=axis, dim=_scatter_default(x, axis) if dim is None else dim, op=op)


def all_gather(x, axis):
    """``all_gather(y_local, axis="tp")``: join the dimension split over ``axis`` (MESH-COLL-3)."""
    return bind(ALL_GATHER, x, axis=axis)


def all_to_all(x, axis, split_dim: int, concat_dim: int):
    """Move the split over ``axis`` from ``concat_dim`` to ``split_dim`` (MESH-COLL-5)."""
    return bind(ALL_TO_ALL, x, axis=axis, split_dim=split_dim, concat_dim=concat_dim)


def collective_permute(x, axis, perm):
    """Move local values between ranks of ``axis`` (MESH-COLL-6): ``perm`` is a list of
    ``(source, destination)`` rank pairs, a dict ``{source: destination}``, or (on a
    distributed tensor, whose mesh gives the axis size) an int shift."""
    if isinstance(perm, dict):
        perm = list(perm.items())
    elif isinstance(perm, int) and not isinstance(perm, bool):
        mesh = getattr(x, "mesh", None)
        if mesh is None:
            raise LayoutError("collective_permute by a shift needs the axis size; in a traced function pass (source, "
                              "destination) pairs", fix="collective_permute(x, axis, [(0, 1), (1, 2), ...])")
        if axis not in mesh.axes:
            raise CollectiveError(f"permute: {axis!r} is not an axis of {mesh!r} (operand {x.type})",
                                  fix=f"use one of {', '.join(map(repr, mesh.axes))}")
        p = mesh.axis_size(axis)
        perm = [(r, (r + perm) % p) for r in range(p)]
    return bind(PERMUTE, x, axis=axis, pairs=perm)


def shard_slice(x, axis, dim: int):
    """Split dimension ``dim`` over ``axis`` from replicated data, without communication (MESH-REDIST-1)."""
    return bind(SHARD_SLICE, x, axis=axis, dim=dim)
