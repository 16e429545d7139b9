"""Pytrees of parameters, gradients and state: paths, matching (OPTIM-ERR-2), zeros (OPTIM-STATE-1)."""
from __future__ import annotations

import math

import numpy as np

from ..dist import DistTensor, tensor as dist_tensor, zeros as dist_zeros
from ..errors import OptimError
from ..frontend.pytree import flatten
from ..ir import TensorType
from ..numerics import Policy
from ..ops import asarray

__all__ = ["leaf_paths", "check_same_tree", "check_float_params", "zeros_like", "counter", "type_of",
           "check_number"]


def _steps(treedef) -> list:
    """The path step to each child of a tree node: ``['W1']`` (dict), ``.mu`` (fields), ``[0]``."""
    if treedef.kind is dict:
        return [f"[{k!r}]" for k in treedef.keys]
    if treedef.keys or hasattr(treedef.kind, "_fields"):
        return [f".{k}" for k in (treedef.keys or treedef.kind._fields)]
    return [f"[{i}]" for i in range(len(treedef.children))]


def leaf_paths(treedef, prefix: str = "") -> list:
    """The path of every leaf of ``treedef``, in leaf order (``['W1']``, ``[0]``, ``.mu``)."""
    if treedef.kind == "leaf":
        return [prefix]
    return [p for s, c in zip(_steps(treedef), treedef.children) for p in leaf_paths(c, prefix + s)]


def _describe(treedef) -> str:
    if treedef is None:
        return "missing"
    if treedef.kind == "leaf":
        return "a tensor"
    kind = treedef.kind.__name__ if isinstance(treedef.kind, type) else str(treedef.kind)
    keys = f" with keys {list(treedef.keys)}" if treedef.keys else f" of {len(treedef.children)}"
    return f"a {kind}{keys}"


def _first_mismatch(a, b, path: str):
    """``(path, a's node, b's node)`` of the first place two tree structures differ, or None."""
    if a.kind is dict and b.kind is dict and a.keys != b.keys:  # name the first key on one side only
        key = next(k for k in sorted(set(a.keys) ^ set(b.keys), key=repr))
        side = dict(zip(a.keys, a.children)), dict(zip(b.keys, b.children))
        return f"{path}[{key!r}]", side[0].get(key), side[1].get(key)
    if a.kind is b.kind and a.kind in (tuple, list) and len(a.children) != len(b.children):
        i = min(len(a.children), len(b.children))
        return f"{path}[{i}]", (a.children[i:] or [None])[0], (b.children[i:] or [None])[0]
    if a.kind != b.kind or a.keys != b.keys or len(a.children) != len(b.children):
        return path, a, b
    for step, ca, cb in zip(_steps(a), a.children, b.children):
        found = _first_mismatch(ca, cb, path + step)
        if found:
            return found
    return None


def type_of(x) -> TensorType:
    """The tensor type of a leaf (a NumPy array or scalar becomes an Array's)."""
    t = getattr(x, "type", None)
    return t if isinstance(t, TensorType) else asarray(x).type


def check_same_tree(what: str, tree, like, like_name: str = "params", *, where: str):
    """``tree``'s leaves if it has the structure of ``like`` and each leaf the shape and policy of
    ``like``'s leaf at the same path; else an OptimError naming the first mismatching path (OPTIM-ERR-2)."""
    leaves, td = flatten(tree)
    like_leaves, like_td = flatten(like)
    found = _first_mismatch(td, like_td, "")
    if found:
        path, got, want = found
        raise OptimError(f"{where}: {what}{path} is {_describe(got)} but {like_name}{path} is {_describe(want)}",
                         fix=f"pass {what} with the structure of {like_name} (the same keys, fields and lengths)")
    for path, x, y in zip(leaf_paths(td), leaves, like_leaves):
        tx, ty = type_of(x), type_of(y)
        if tuple(tx.shape) != tuple(ty.shape) or tx.policy != ty.policy:
            raise OptimError(f"{where}: {what}{path} is {tx} but {like_name}{path} is {ty}",
                             fix=f"give {what}{path} the shape and element type of {like_name}{path}")
    return leaves


def check_float_params(params, *, where: str) -> list:
    """The leaves of ``params`` if every one is a floating-point tensor (OPTIM-ERR-2)."""
    leaves, td = flatten(params)
    for path, x in zip(leaf_paths(td), leaves):
        if x is None or isinstance(x, (str, bool)):
            raise OptimError(f"{where}: params{path} is {x!r}, not a tensor",
                             fix="keep only tensors in the parameter tree (pass other values separately)")
        ttype = type_of(x)
        policy = ttype.policy
        if not isinstance(policy, Policy) or not policy.storage.is_float or policy.storage.special == "scale":
            raise OptimError(f"{where}: params{path} is {ttype}, whose elements are not in a floating-point "
                             "format: an optimizer updates real numbers",
                             fix=f"keep params{path} out of the optimized tree, or cast it to a float format "
                                 "(op.cast(x, 'f32'))")
    return leaves


def zeros_like(x, layout=None):
    """+0 in ``x``'s shape, policy and layout (a DistTensor on its mesh, in ``layout`` if given;
    abstract if ``x`` is; OPTIM-STATE-1)."""
    if isinstance(x, DistTensor):
        return dist_zeros(x.shape, layout or x.layout.replace(partial=()), x.mesh, x.type.policy,
                          abstract=x.is_abstract)
    t = type_of(x)
    return asarray(np.zeros(t.shape), policy=t.policy)


def counter(leaves):
    """A new step count (OPTIM-STATE-1): +0 in f64, replicated on the mesh of the first distributed leaf."""
    mesh = next((x.mesh for x in leaves if isinstance(x, DistTensor)), None)
    if mesh is None:
        return asarray(0.0, dtype="f64")
    return dist_tensor((), None, mesh, "f64", data=np.float64(0.0))


def check_number(name: str, value, *, low=None, high=None, low_open=False, high_open=False, where: str):
    """``value`` as a float if it is a finite real number in the stated range (OPTIM-ERR-1)."""
    ok = isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, (bool, np.bool_))
    if ok:
        value = float(value)
        ok = math.isfinite(value) and (low is None or (value > low if low_open else value >= low)) and \
            (high is None or (value < high if high_open else value <= high))
    if not ok:
        lo = "" if low is None else f"{'(' if low_open else '['}{low:g}"
        hi = "" if high is None else f"{high:g}{')' if high_open else ']'}"
        rng = f"in {lo}, {hi}" if lo and hi else (f"≥ {low:g}" if lo and not low_open else f"> {low:g}" if lo else "")
        raise OptimError(f"{where}: {name}={value!r} is not a finite number {rng}".rstrip(),
                         fix=f"pass {name} as a finite number {rng}".rstrip())
    return value
