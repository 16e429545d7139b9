"""Pytrees: nested tuples, lists, dicts, named tuples and dataclasses of tensors (AD-1).

The arguments and results of a transform, and the arguments of ``jit``, may be any nesting
of ``tuple``, ``list``, ``dict`` (entries in sorted key order, so the flattening does not
depend on insertion order), ``NamedTuple`` classes (fields in order) and dataclass instances
(the fields ``__init__`` takes, in order; rebuilt by calling the class with them); everything
else is a *leaf* (a tensor, a Python scalar, ``None``, a string). :func:`flatten`
gives the leaves in order and a :class:`TreeDef` that :meth:`TreeDef.unflatten` rebuilds
the same structure from (new) leaves with.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..errors import AutodiffError

__all__ = ["TreeDef", "flatten", "LEAF"]


@dataclass(frozen=True)
class TreeDef:
    """The structure of a pytree: ``kind`` (``"leaf"``, ``tuple``, ``list``, ``dict``, or the
    NamedTuple or dataclass class), the dict keys or field names, and the children's structures."""

    kind: object
    keys: tuple = ()
    children: tuple = ()

    @property
    def num_leaves(self) -> int:
        return 1 if self.kind == "leaf" else sum(c.num_leaves for c in self.children)

    def unflatten(self, leaves):
        """The pytree of this structure holding ``leaves`` (an iterable, consumed in order)."""
        it = iter(leaves)
        out = self._build(it)
        if next(it, _END) is not _END:
            raise ValueError("unflatten got more leaves than the structure holds")
        return out

    def _build(self, it):
        if self.kind == "leaf":
            return next(it)
        items = [c._build(it) for c in self.children]
        if self.kind is dict:
            return dict(zip(self.keys, items))
        if self.kind in (tuple, list):
            return self.kind(items)
        if self.keys:  # a dataclass
            return self.kind(**dict(zip(self.keys, items)))
        return self.kind(*items)  # a NamedTuple


_END = object()
LEAF = TreeDef("leaf")


def flatten(tree, is_leaf=None) -> tuple[list, TreeDef]:
    """The leaves of ``tree`` in order and its structure; ``is_leaf(x)`` true makes ``x`` a
    leaf even if it is a container (a checkpoint keeps an RNG key, a dataclass, whole)."""
    leaves: list = []
    return leaves, _flatten(tree, leaves, is_leaf)


def _flatten(tree, leaves: list, is_leaf=None) -> TreeDef:
    if is_leaf is not None and is_leaf(tree):
        leaves.append(tree)
        return LEAF
    if isinstance(tree, dict):
        try:
            keys = tuple(sorted(tree))
        except TypeError:
            raise AutodiffError(f"a dict of the pytree has keys that cannot be sorted together ({list(tree)!r})",
                                fix="use keys of one type (all str, or all int)") from None
        return TreeDef(dict, keys, tuple(_flatten(tree[k], leaves, is_leaf) for k in keys))
    if type(tree) in (tuple, list) or (isinstance(tree, tuple) and hasattr(type(tree), "_fields")):
        return TreeDef(type(tree), (), tuple(_flatten(x, leaves, is_leaf) for x in tree))
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        names = tuple(f.name for f in dataclasses.fields(tree) if f.init)
        if not names:
            raise AutodiffError(f"the dataclass {type(tree).__name__} of the pytree has no fields its __init__ "
                                "takes", fix="pass its tensors as fields, or as separate arguments")
        return TreeDef(type(tree), names, tuple(_flatten(getattr(tree, n), leaves, is_leaf) for n in names))
    leaves.append(tree)
    return LEAF
