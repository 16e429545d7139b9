"""``DistTensor``: a tensor spread over a mesh — its global view and its per-device shards
(MESH-TENSOR-1).

**Storage.** The devices' local values are held *stacked*: one NumPy array ``local`` of shape
``stack_shape + local_shape`` whose leading axes are the mesh axes. Along a mesh axis over
which the tensor varies (it splits a dimension, or has a pending reduction) the stacked axis
has the axis' size; along every other mesh axis it has size 1 and broadcasts — replicated
data is held once, and an op computes it once, which is why simulating 72 devices costs
about what one global computation costs (DESIGN §7). ``local[c]`` for mesh coordinates ``c``
(index 0 along the size-1 axes) is the device's value.

Under ``reduction="exact"`` a pending partial sum is held exactly, never rounded: ``local`` is
then an :class:`~tessera_ref.numerics.ExactAccumulator` of the stacked shape (NUM-RED-4).

**Abstract tensors** carry no data (``local is None``): types, layouts, per-device bytes and
costs work; anything that needs values raises :class:`~tessera_ref.errors.AbstractValueError`.
"""
from __future__ import annotations

import math
import weakref

import numpy as np

from ..errors import AbstractValueError, CollectiveError, LayoutError, MeshError, ShapeError, user_location
from ..ir import ShardLayout, TensorType
from ..ir.types import ElementKind, element_arg
from ..numerics import ExactAccumulator, Policy, as_policy, cast
from ..numerics.packing import packed_nbytes
from ..ops.random import rand, randn
from ..ops.values import TensorOperators, asarray
from .. import sim
from .mesh import Mesh
from .spec import resolve_layout
from .world import placement

__all__ = ["DistTensor", "tensor", "from_shards", "full", "zeros", "ones", "arange", "local_shape", "stack_shape",
           "own_box", "IDENTITY"]

#: The value a pending reduction starts from on every device but the first (identity of the op;
#: −0 for sum, because x + (−0) = x for every x including +0).
IDENTITY = {"sum": -0.0, "max": -np.inf, "min": np.inf, "prod": 1.0}


def local_shape(shape: tuple, layout: ShardLayout, mesh: Mesh) -> tuple:
    """Each device's block shape (MESH-TENSOR-2): ``n / p`` per split dimension (``ceil`` when
    padded); an uneven split without padding, or over several axes, is a :class:`LayoutError`."""
    out = []
    for d, (n, axes) in enumerate(zip(shape, layout.dims)):
        p = mesh.axis_size(axes) if axes else 1
        if n % p and layout.padded and len(axes) > 1:
            raise LayoutError(
                f"dimension {d} of size {n} is split over several mesh axes {'+'.join(axes)} ({p} devices) "
                f"and does not divide evenly: padding applies to a dimension split over one axis (gathering "
                f"one of several axes of padded blocks would not give ceil(n/p) blocks)",
                fix=f"split dimension {d} over one axis, or pad the data yourself to a multiple of {p}")
        if n % p and not layout.padded:
            raise LayoutError(
                f"dimension {d} of size {n} does not split evenly over mesh axes {'+'.join(axes)} "
                f"({p} devices; shape {tuple(shape)}, layout {layout})",
                fix=f"use a size divisible by {p}, another axis, or ShardSpec(..., pad=True) to pad the "
                    f"last blocks (each device then holds {-(-n // p)})")
        out.append(-(-n // p))
    return tuple(out)


def stack_shape(layout: ShardLayout, mesh: Mesh, whole: bool = False) -> tuple:
    """The leading (mesh) axes of the stacked storage: where the tensor varies, the size of this
    process's box along the axis (the axis size in one process, or with ``whole``), 1 elsewhere
    (MESH-MP-2)."""
    varying = layout.varying_axes
    for a in varying:
        mesh.axis_index(a)
    sizes = mesh.shape if whole else placement(mesh).box
    return tuple(s if a in varying else 1 for a, s in zip(mesh.axes, sizes))


def own_box(whole_stacked: np.ndarray, mesh: Mesh) -> np.ndarray:
    """This process's box of stacked values over the whole mesh (MESH-MP-2; all of it in one process)."""
    place = placement(mesh)
    return whole_stacked if place.single else whole_stacked[place.box_slices(whole_stacked.shape[:mesh.ndim])]


def _check_static(shape) -> tuple:
    shape = (shape,) if isinstance(shape, (int, np.integer)) else tuple(shape)
    for n in shape:
        if isinstance(n, bool) or not isinstance(n, (int, np.integer)) or n < 0:
            raise LayoutError(f"a distributed tensor needs a static shape of non-negative ints, got {shape}",
                              fix="pass sizes as ints")
    return tuple(int(n) for n in shape)


class DistTensor(TensorOperators):
    """A tensor over a mesh: global ``type`` (with its ``#shard`` layout), the mesh and the stacked
    local values (``None`` when abstract). Build one with :func:`tensor` or :func:`from_shards`."""

    __slots__ = ("type", "mesh", "local", "name", "_finalizer", "__weakref__")

    def __init__(self, type: TensorType, mesh: Mesh, local, name: str | None = None):
        self.type = type
        self.mesh = mesh
        self.local = local
        self.name = name
        self._finalizer = None
        _account(self)

    # -- descriptive (shape, ndim, policy, format and the operators: TensorOperators) ----------
    @property
    def layout(self) -> ShardLayout:
        return self.type.layout

    @property
    def is_abstract(self) -> bool:
        return self.local is None

    @property
    def local_shape(self) -> tuple:
        """Each device's block shape (padding included)."""
        return local_shape(self.shape, self.layout, self.mesh)

    @property
    def nbytes_per_device(self) -> int:
        """Bytes one device holds (packed size of its block; equal on every device)."""
        return bytes_per_device(self.type, self.mesh)

    @property
    def nbytes(self) -> int:
        """Bytes of the global value (packed)."""
        n = math.prod(self.shape)
        return packed_nbytes(n, self.format) if self.type.element_kind is None else n * self.type.element_kind.bits // 8

    def __repr__(self) -> str:
        kind = "abstract " if self.is_abstract else ""
        name = f"{self.name!r}, " if self.name else ""
        return (f"DistTensor({name}{kind}{self.type}, {self.mesh!r}, local {list(self.local_shape)}, "
                f"{self.nbytes_per_device} B/device)")

    # -- values --------------------------------------------------------------------------------
    def _require_values(self, what: str):
        if self.local is None:
            raise AbstractValueError(
                f"{what} needs values, but {self.name or 'this tensor'} ({self.type}) is abstract",
                fix="create it with data= (or init='randn'/'rand', seed=) to compute values; abstract "
                    "tensors give types, layouts, bytes and costs only")

    def numpy(self) -> np.ndarray:
        """The global value (a pending reduction is carried out first, by NUM-RED-3/4). When the
        mesh spans several processes this is a collective: every process must call it, and the
        blocks of the other processes' devices are gathered (MESH-MP-3)."""
        self._require_values("the global value")
        from .collectives import fold_partial, gather_boxes
        local = fold_partial(self) if self.layout.partial else self.local
        return _assemble(gather_boxes(self, local), self.layout, self.mesh, self.shape)

    def _scalar(self, to):
        """``float()``/``int()`` of a 0-d tensor: its global value, a pending sum folded first
        (MESH-TENSOR-SCALAR-1); a collective when the mesh spans processes."""
        if self.ndim != 0:
            raise ShapeError(f"{to.__name__}() of a {self.ndim}-d distributed tensor ({self.type})",
                             fix="reduce it to a 0-d tensor first (op.sum), or take np.asarray(x)")
        self._require_values(f"{to.__name__}()")
        return to(self.numpy())

    def __float__(self) -> float:
        return self._scalar(float)

    def __int__(self) -> int:
        return self._scalar(int)

    def __array__(self, dtype=None, copy=None):
        out = self.numpy()
        return out if dtype is None else out.astype(dtype)

    def shard(self, device) -> np.ndarray:
        """The local value on one device (index or name), as that device holds it: its block of
        the split dimensions (padding included), its own contribution if a reduction is pending."""
        self._require_values("a shard")
        coords = self.mesh.coords(device)
        place = placement(self.mesh)
        at = tuple(coords[a] for a in self.mesh.axes)
        if not place.owns(at):
            raise MeshError(f"device {self.mesh.devices[self.mesh.index_of(device)]!r} of {self.mesh!r} is owned by "
                            f"process {place.owner(at)}; this is process {place.rank} of {place.size} (MESH-MP-3)",
                            fix="ask for the shards of this process's devices (x.shards()), or gather the whole "
                                "value with x.numpy() (a collective)")
        stack = stack_shape(self.layout, self.mesh, whole=True)
        index = tuple(c - s0 if s > 1 else 0 for c, s0, s in zip(at, place.start, stack))
        if isinstance(self.local, ExactAccumulator):
            raise AbstractValueError("a device's exact partial sum has no storage-format value yet",
                                     fix="all_reduce it first (it is held exactly, NUM-RED-4)")
        return np.array(self.local[index])

    def shards(self) -> dict:
        """``{device name: local value}`` for every device this process owns (all of them in one
        process, MESH-MP-3)."""
        place = placement(self.mesh)
        return {name: self.shard(i) for i, name in enumerate(self.mesh.devices)
                if place.owns(np.unravel_index(i, self.mesh.shape))}

    def redistribute(self, layout) -> "DistTensor":
        """This tensor in another layout (a :class:`~tessera_ref.dist.ShardSpec` or layout),
        moved by the collectives MESH-REDIST-1 chooses; the global value is unchanged."""
        from .redistribute import redistribute
        return redistribute(self, layout)




# ---------------------------------------------------------------------------------------------
# global <-> stacked

def _split(x: np.ndarray, layout: ShardLayout, mesh: Mesh, lshape: tuple) -> np.ndarray:
    """The stacked local values of the global array ``x`` (no pending reduction)."""
    pads = [(0, l * (mesh.axis_size(axes) if axes else 1) - n) for n, l, axes in zip(x.shape, lshape, layout.dims)]
    if any(p for _, p in pads):
        x = np.pad(x, pads)
    shape, labels = [], []
    for d, axes in enumerate(layout.dims):
        for a in axes:
            shape.append(mesh.axis_size(a))
            labels.append(a)
        shape.append(lshape[d])
        labels.append(d)
    x = x.reshape(shape)
    split = [a for a in mesh.axes if a in layout.split_axes]
    x = x.transpose([labels.index(a) for a in split] + [labels.index(d) for d in range(len(lshape))])
    return x.reshape(tuple(mesh.axis_size(a) if a in split else 1 for a in mesh.axes) + lshape)


def _assemble(local: np.ndarray, layout: ShardLayout, mesh: Mesh, shape: tuple) -> np.ndarray:
    """The global array from stacked local values with no pending reduction (inverse of :func:`_split`)."""
    m = mesh.ndim
    lshape = local.shape[m:]
    x = local[tuple(slice(None) if mesh.axes[i] in layout.split_axes else 0 for i in range(m))]
    split = [a for a in mesh.axes if a in layout.split_axes]
    labels = split + list(range(len(lshape)))
    order = []
    for d, axes in enumerate(layout.dims):
        order += [labels.index(a) for a in axes] + [labels.index(d)]
    x = x.transpose(order).reshape(tuple(l * (mesh.axis_size(axes) if axes else 1)
                                         for l, axes in zip(lshape, layout.dims)))
    if x.shape != tuple(shape):
        x = x[tuple(slice(0, n) for n in shape)]
    return x.copy(order="C")  # a fresh array, 0-d included (ascontiguousarray makes 0-d 1-d)


def _pending(x: np.ndarray, layout: ShardLayout, mesh: Mesh, dtype) -> np.ndarray:
    """Stacked values (whole mesh) of a pending reduction whose total is ``x``: ``x`` at rank 0
    of the partial axes, the op's identity on every other rank."""
    stack = stack_shape(layout, mesh, whole=True)
    out = np.full(stack + x.shape[mesh.ndim:], IDENTITY[layout.partial_op]).astype(dtype)
    first = tuple(0 if a in layout.partial else slice(None) for a in mesh.axes)
    out[first] = x[tuple(0 if a in layout.partial else slice(None) for a in mesh.axes)]
    return out


# ---------------------------------------------------------------------------------------------
# construction

def _resolve_policy(dtype, data) -> "Policy | ElementKind":
    """The element of a new tensor: ``dtype``'s (a format, policy or element kind such as
    ``"i32"``, GRAPH-TYPE-4), else the data's, else f32."""
    if dtype is None:
        if data is None:
            return as_policy("f32")
        return asarray(data).type.policy
    if isinstance(dtype, str) and dtype in ("fp32", "fp16", "fp64"):
        dtype = {"fp32": "f32", "fp16": "f16", "fp64": "f64"}[dtype]
    return dtype if isinstance(dtype, Policy) else element_arg(dtype, "dist.tensor's dtype")


def _to_element(values: np.ndarray, element) -> np.ndarray:
    """Host ``values`` in ``element``'s storage: NUM-CVT (nearest even) into a format, the
    checked conversion of :func:`~tessera_ref.ops.values.asarray` into an element kind."""
    if isinstance(element, ElementKind):
        return values if values.dtype == element.dtype else asarray(values, dtype=element).data
    if values.dtype == element.storage.dtype:
        return values
    return cast(values, element.storage)


def _new_type(what: str, shape, layout, mesh, dtype, data) -> tuple:
    """``(shape, element, layout)`` of a new tensor, or the LayoutError of a missing mesh."""
    if not isinstance(mesh, Mesh):
        raise LayoutError(f"{what} needs mesh=a dist.Mesh, got {type(mesh).__name__}",
                          fix="create one with dist.mesh(...) or dist.Mesh(axes=..., devices=...)")
    shape = _check_static(shape)
    return shape, _resolve_policy(dtype, data), resolve_layout(layout, len(shape))


def tensor(shape, layout=None, mesh: Mesh = None, dtype=None, *, data=None, init=None, seed: int = 0,
           name: str | None = None) -> DistTensor:
    """A distributed tensor of global ``shape`` on ``mesh`` in ``layout``
    (``dist.tensor(shape=(1024, 1024), layout=dist.ShardSpec(("row",), ("tp",)), mesh=mesh,
    dtype="bf16")``).

    Without ``data`` or ``init`` the tensor is *abstract* (no values). ``data`` (array-like of
    the global shape) is converted into ``dtype`` (NUM-CVT, round to nearest even) and split;
    ``init="zeros"``/``"ones"`` is :func:`full`; ``init="randn"``/``"rand"`` fills it from
    Philox keyed by ``seed``: element ``i`` of the
    global tensor depends only on ``(seed, i)``, so every mesh and layout gives the same global
    bits (NUM-RNG). ``dtype`` accepts format names (``"bf16"``, the seeds' ``"fp32"``) and policies.
    """
    shape, policy, lay = _new_type("dist.tensor", shape, layout, mesh, dtype, data)
    ttype = TensorType(shape, policy, lay)
    lshape = local_shape(shape, lay, mesh)
    stack_shape(lay, mesh)
    if data is not None and init is not None:
        raise LayoutError("dist.tensor got both data= and init=", fix="pass one of them")
    if data is None and init is None:
        return DistTensor(ttype, mesh, None, name)
    if init in ("zeros", "ones"):
        return full(shape, 0 if init == "zeros" else 1, layout, mesh, dtype, name=name)
    if init is not None:
        if init not in ("randn", "rand"):
            raise LayoutError(f"unknown init {init!r}", fix="use init='randn', 'rand', 'zeros' or 'ones'")
        draw = randn if init == "randn" else rand
        with sim.paused():  # the host draws the global values; the machine charges only their shards
            values = np.asarray(draw(shape, seed=seed, dtype=policy.storage.name))
    else:
        values = np.asarray(data)
        if values.shape != shape:
            raise LayoutError(f"data of shape {values.shape} does not match the tensor shape {shape}",
                              fix="pass data with the global shape")
    values = _to_element(values, policy)
    local = _split(values, lay.replace(partial=()), mesh, lshape)
    if lay.partial:
        local = _pending(np.broadcast_to(local, stack_shape(lay.replace(partial=()), mesh, whole=True) + lshape),
                         lay, mesh, ttype.dtype)
    return DistTensor(ttype, mesh, np.ascontiguousarray(own_box(local, mesh)), name)


def full(shape, value, layout=None, mesh: Mesh = None, dtype="f32", *, abstract: bool = False,
         name: str | None = None) -> DistTensor:
    """A distributed tensor whose every element is ``value`` converted once into ``dtype``, in
    ``layout`` on ``mesh``: each device's block is filled in place, the global tensor is never
    built (MESH-TENSOR-INIT-1). ``abstract=True`` gives the abstract tensor of that type."""
    shape, element, lay = _new_type("dist.full", shape, layout, mesh, dtype, None)
    if lay.partial:
        raise LayoutError(f"dist.full in the pending-reduction layout {lay}: a filled tensor is not a partial value",
                          fix="give a layout without partial(...); reduce_scatter/all_reduce make pending values")
    ttype = TensorType(shape, element, lay)
    lshape = local_shape(shape, lay, mesh)
    if abstract:
        return DistTensor(ttype, mesh, None, name)
    one = _to_element(np.asarray(value), element)
    stack = stack_shape(lay, mesh)
    return DistTensor(ttype, mesh, np.full(stack + lshape, one, dtype=ttype.dtype), name)


def _filled(value, what: str):
    def make(shape, layout=None, mesh: Mesh = None, dtype="f32", *, abstract: bool = False,
             name: str | None = None) -> DistTensor:
        return full(shape, value, layout, mesh, dtype, abstract=abstract, name=name)
    make.__name__ = make.__qualname__ = what
    make.__doc__ = f":func:`full` of {value} (MESH-TENSOR-INIT-1)."
    return make


zeros = _filled(0, "zeros")
ones = _filled(1, "ones")


def arange(n: int, layout=None, mesh: Mesh = None, dtype="index", *, name: str | None = None) -> DistTensor:
    """``0 … n−1`` (GRAPH-INIT-1's ``arange(n)``) split by ``layout`` on ``mesh`` (MESH-TENSOR-INIT-1)."""
    from ..ops.constant import arange as values
    return tensor((n,), layout, mesh, dtype, data=np.asarray(values(n, dtype=dtype)), name=name)


def from_shards(shards, layout, mesh: Mesh, dtype=None, *, name: str | None = None) -> DistTensor:
    """A distributed tensor from each device's local value (``shards[i]`` on device ``i``, or a
    dict by device name). Devices that the layout says hold the same data must hold the same
    bits; shapes must agree on every device — a :class:`CollectiveError` names the devices otherwise."""
    if isinstance(shards, dict):
        missing = [d for d in mesh.devices if d not in shards]
        if missing:
            raise CollectiveError(f"from_shards has no value for devices {missing[:4]}",
                                  fix="give one array per device of the mesh")
        shards = [shards[d] for d in mesh.devices]
    shards = [np.asarray(s) for s in shards]
    if len(shards) != mesh.size:
        raise CollectiveError(f"from_shards got {len(shards)} arrays for a mesh of {mesh.size} devices",
                              fix="give one array per device")
    shapes = {s.shape for s in shards}
    if len(shapes) > 1:
        first = shards[0].shape
        bad = next(i for i, s in enumerate(shards) if s.shape != first)
        raise CollectiveError(f"shards have different shapes across ranks: {mesh.devices[0]} has {first}, "
                              f"{mesh.devices[bad]} has {shards[bad].shape}",
                              fix="every device must hold a block of the same shape (pad uneven data)")
    policy = _resolve_policy(dtype, shards[0])
    lshape = shards[0].shape
    full = np.stack([_to_element(s, policy) for s in shards])
    full = full.reshape(mesh.shape + lshape)
    lay = resolve_layout(layout, len(lshape))
    stack = stack_shape(lay, mesh, whole=True)
    for i, (a, s) in enumerate(zip(mesh.axes, stack)):
        if s == 1 and mesh.shape[i] > 1:
            ref = np.take(full, [0], axis=i)
            same = np.all(full.view(np.uint8) == ref.view(np.uint8)) if full.size else True
            if not same:
                raise CollectiveError(f"the layout {lay} replicates over mesh axis {a!r}, but the devices "
                                      f"along {a!r} hold different values",
                                      fix=f"split a dimension over {a!r} or mark it partial (reduce='sum')")
            full = ref
    shape = tuple(l * (mesh.axis_size(axes) if axes else 1) for l, axes in zip(lshape, lay.dims))
    if lay.padded:
        raise LayoutError("from_shards cannot infer the global shape of padded blocks",
                          fix="build padded tensors with dist.tensor(data=...)")
    return DistTensor(TensorType(shape, policy, lay), mesh, np.ascontiguousarray(own_box(full, mesh)), name)


# ---------------------------------------------------------------------------------------------
# memory accounting on the simulated machine

def bytes_per_device(t: TensorType, mesh: Mesh) -> int:
    """Bytes one device holds of a tensor of type ``t`` (with its layout) on ``mesh``."""
    n = math.prod(local_shape(t.shape, t.layout, mesh))
    return packed_nbytes(n, t.format) if t.element_kind is None else n * t.element_kind.bits // 8


def require_memory(types, mesh: Mesh, location: str | None) -> None:
    """Before computing results of ``types`` on ``mesh``: the simulated out-of-memory error
    their allocation would raise on the active machine (if any), so it comes before any host
    memory is used (SIM-MEM-3)."""
    machine = sim.current()
    if machine is None:
        return
    devices = machine.present(mesh.devices)  # by name: sub-meshes too
    if not devices:
        return
    fullest = max(devices, key=machine.memory.live)
    machine.memory.require(fullest, sum(bytes_per_device(t, mesh) for t in types),
                           " and ".join(str(t) for t in types), location)


def _account(t: DistTensor) -> None:
    """Register the tensor's per-device bytes with the active simulated machine (if any) and
    free them when the tensor is collected (SIM memory accounting)."""
    machine = sim.current()
    if machine is None:
        return
    # by name: sub-meshes too, and meshes of which the machine has only some devices
    handles = machine.alloc_each(machine.present(t.mesh.devices), t.nbytes_per_device, t.name or str(t.type),
                                 user_location())
    t._finalizer = weakref.finalize(t, machine.free_each, handles)
