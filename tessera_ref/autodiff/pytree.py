"""Pytrees: nested tuples, lists and dicts of tensors (AD-1).

A transform's arguments and results may be any nesting of ``tuple``, ``list`` and ``dict``
(dict entries in sorted key order, so the flattening does not depend on insertion order);
everything else is a *leaf* (a tensor, a Python scalar, ``None``, a string). :func:`flatten`
gives the leaves in order and a :class:`TreeDef` that :meth:`TreeDef.unflatten` rebuilds
the same structure from (new) leaves with.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import AutodiffError

__all__ = ["TreeDef", "flatten", "LEAF"]


@dataclass(frozen=True)
class TreeDef:
    """The structure of a pytree: ``kind`` (``"leaf"``, ``tuple``, ``list``, ``dict``), the
    dict keys and the children's structures."""

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
        return self.kind(items)


_END = object()
LEAF = TreeDef("leaf")


def flatten(tree) -> tuple[list, TreeDef]:
    """The leaves of ``tree`` in order and its structure."""
    leaves: list = []
    return leaves, _flatten(tree, leaves)


def _flatten(tree, leaves: list) -> TreeDef:
    if isinstance(tree, dict):
        try:
            keys = tuple(sorted(tree))
        except TypeError:
            raise AutodiffError(f"a dict of the pytree has keys that cannot be sorted together ({list(tree)!r})",
                                fix="use keys of one type (all str, or all int)") from None
        return TreeDef(dict, keys, tuple(_flatten(tree[k], leaves) for k in keys))
    if type(tree) in (tuple, list):
        return TreeDef(type(tree), (), tuple(_flatten(x, leaves) for x in tree))
    leaves.append(tree)
    return LEAF
