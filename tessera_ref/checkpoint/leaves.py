"""What a checkpoint records of a pytree: its structure as JSON, each leaf's path and kind,
and element types as validated JSON fields (CKPT-TREE-1, CKPT-FMT-1).

Nothing here is pickled and nothing names a Python class to import: a NamedTuple or dataclass
is recorded by its field names and restored as that class only through ``like=``.
"""
from __future__ import annotations

import numpy as np

from ..errors import CheckpointError, TesseraError
from ..frontend.pytree import flatten
from ..ir.types import ELEMENT_KINDS, ElementKind
from ..numerics import Policy
from ..numerics.rng import RNGKey
from ..dist.spec import ShardSpec
from ..ir import ShardLayout
from ..numerics.formats import FORMATS

__all__ = ["paths_of", "encode_tree", "decode_tree", "encode_element", "decode_element", "stored_words",
           "from_words", "numpy_dtype", "savable", "safetensors_dtype", "stored_dtype", "file_shape", "encode_scalar", "decode_scalar"]

#: NumPy dtypes a safetensors file holds as themselves; every other storage dtype (bf16, the
#: fp8/fp6/fp4 formats) is stored as its raw bit words, unsigned, of the same width (CKPT-FMT-1).
NATIVE = {np.dtype(t): s for t, s in ((np.float64, "F64"), (np.float32, "F32"), (np.float16, "F16"),
                                      (np.int64, "I64"), (np.int32, "I32"), (np.int16, "I16"), (np.int8, "I8"),
                                      (np.uint64, "U64"), (np.uint32, "U32"), (np.uint16, "U16"),
                                      (np.uint8, "U8"), (np.bool_, "BOOL"), (np.complex64, "C64"))}
_WORDS = {1: np.dtype(np.uint8), 2: np.dtype(np.uint16), 4: np.dtype(np.uint32), 8: np.dtype(np.uint64)}
#: The storage dtypes of the number formats (ml_dtypes ones included), by NumPy name.
_FORMAT_DTYPES = {np.dtype(f.dtype).name: np.dtype(f.dtype) for f in FORMATS.values() if f.dtype is not None}


def file_shape(shape: tuple) -> tuple:
    """The shape a file gives a block of ``shape`` (safetensors holds a 0-d value as ``[1]``)."""
    return tuple(shape) or (1,)


def stored_words(a: np.ndarray) -> np.ndarray:
    """``a`` as a safetensors file holds it: itself for a native dtype, else its bit words (contiguous)."""
    a = np.ascontiguousarray(a).reshape(file_shape(a.shape))
    return a if a.dtype in NATIVE else a.view(_WORDS[a.dtype.itemsize])


def from_words(words: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """The inverse of :func:`stored_words`."""
    return words if words.dtype == dtype else words.view(dtype)


def stored_dtype(dtype: np.dtype) -> np.dtype:
    """The dtype of the words a file holds values of ``dtype`` in."""
    return dtype if dtype in NATIVE else _WORDS[dtype.itemsize]


def safetensors_dtype(dtype: np.dtype) -> str:
    """The safetensors dtype name of the words that hold ``dtype``."""
    return NATIVE[stored_dtype(dtype)]


def savable(dtype: np.dtype) -> bool:
    """True for the dtypes a checkpoint holds: the native ones and the number formats'."""
    return dtype in NATIVE or _FORMAT_DTYPES.get(dtype.name) == dtype


def numpy_dtype(name, where: str) -> np.dtype:
    """A NumPy dtype from its recorded name: a native one or a number format's (never ``object``)."""
    for dtype in (*NATIVE, *_FORMAT_DTYPES.values()):
        if dtype.name == name:
            return dtype
    raise CheckpointError(f"{where}: unknown dtype {name!r}", fix="the manifest is damaged or from another library")


# ---------------------------------------------------------------------------------------------
# element types (policies and element kinds)

_POLICY_FIELDS = ("storage", "accum", "rounding", "overflow", "scaling", "reduction", "tc")


def encode_element(element) -> dict:
    """A policy or element kind as JSON fields."""
    if isinstance(element, ElementKind):
        return {"kind": element.name}
    out = {f: getattr(element, f) for f in _POLICY_FIELDS}
    out["storage"], out["accum"] = element.storage.name, element.accum.name
    return {"policy": out, "text": str(element)}


def decode_element(fields, where: str):
    """The policy or element kind recorded by :func:`encode_element` (validated)."""
    if not isinstance(fields, dict):
        raise CheckpointError(f"{where}: the element type is not a JSON object", fix="the manifest is damaged")
    if "kind" in fields:
        if fields["kind"] not in ELEMENT_KINDS:
            raise CheckpointError(f"{where}: unknown element kind {fields['kind']!r}", fix="the manifest is damaged")
        return ELEMENT_KINDS[fields["kind"]]
    policy = fields.get("policy")
    if not isinstance(policy, dict) or set(policy) != set(_POLICY_FIELDS) or not all(
            v is None or (isinstance(v, str) and len(v) < 64) for v in policy.values()):
        raise CheckpointError(f"{where}: the policy is not {list(_POLICY_FIELDS)} as strings",
                              fix="the manifest is damaged")
    try:
        return Policy(**policy)
    except TesseraError as exc:
        raise CheckpointError(f"{where}: the recorded policy is invalid: {exc.what}",
                              fix="the manifest is damaged or from another version") from None


# ---------------------------------------------------------------------------------------------
# scalars (held in the manifest itself)

def encode_scalar(x) -> dict:
    """A Python scalar as JSON, bit-exactly (floats by ``float.hex``)."""
    if x is None:
        return {"kind": "none"}
    if isinstance(x, bool):
        return {"kind": "bool", "value": x}
    if isinstance(x, int):
        return {"kind": "int", "value": str(x)}
    if isinstance(x, float):
        return {"kind": "float", "value": x.hex()}
    return {"kind": "str", "value": x}


def decode_scalar(leaf: dict, where: str):
    kind, value = leaf["kind"], leaf.get("value")
    try:
        if kind == "none":
            return None
        if kind == "bool" and isinstance(value, bool):
            return value
        if kind == "int" and isinstance(value, str) and len(value) <= 400:
            return int(value)
        if kind == "float" and isinstance(value, str) and len(value) <= 40:
            return float.fromhex(value)
        if kind == "str" and isinstance(value, str):
            return value
    except ValueError:
        pass
    raise CheckpointError(f"{where}: a {kind} leaf holds {str(value)[:40]!r}", fix="the manifest is damaged")


# ---------------------------------------------------------------------------------------------
# structure

#: Dataclasses a tree holds as leaves: an RNG key is a value, a layout says where one goes.
_WHOLE = (RNGKey, ShardSpec, ShardLayout)


def paths_of(tree) -> tuple[list, list, object]:
    """``(leaves, paths, treedef)``: the leaves in order, each one's path (``['opt']['m'][0]``,
    ``.field`` for a record's field) and the structure."""
    leaves, treedef = flatten(tree, is_leaf=lambda x: isinstance(x, _WHOLE))
    paths: list = []
    _paths(treedef, "", paths)
    return leaves, paths, treedef


def _paths(node, prefix: str, out: list) -> None:
    if node.kind == "leaf":
        out.append(prefix or "<root>")
        return
    if node.kind is dict:
        names = [f"[{k!r}]" for k in node.keys]
    elif node.keys:
        names = [f".{k}" for k in node.keys]
    else:
        names = [f"[{i}]" for i in range(len(node.children))]
    for name, child in zip(names, node.children):
        _paths(child, prefix + name, out)


def encode_tree(node) -> dict:
    """The structure as JSON: dicts (str or int keys), lists, tuples and records (NamedTuple or
    dataclass: their field names)."""
    if node.kind == "leaf":
        return {"t": "leaf"}
    children = [encode_tree(c) for c in node.children]
    if node.kind is dict:
        for k in node.keys:
            if not isinstance(k, (str, int)) or isinstance(k, bool):
                raise CheckpointError(f"a dict key of the tree is {k!r}: a checkpoint records str and int keys",
                                      fix="use str or int keys")
        return {"t": "dict", "k": list(node.keys), "c": children}
    if node.kind in (list, tuple):
        return {"t": node.kind.__name__, "c": children}
    return {"t": "record", "name": node.kind.__name__, "k": list(node.keys or node.kind._fields), "c": children}


def decode_tree(node, leaves, depth: int = 0):
    """The tree of :func:`encode_tree` holding ``leaves`` (an iterator); records become dicts."""
    if depth > 100 or not isinstance(node, dict):
        raise CheckpointError("the manifest's tree is nested deeper than 100 levels or malformed",
                              fix="the manifest is damaged")
    kind, children = node.get("t"), node.get("c", [])
    if kind == "leaf":
        return next(leaves)
    if not isinstance(children, list):
        raise CheckpointError("the manifest's tree is malformed", fix="the manifest is damaged")
    items = [decode_tree(c, leaves, depth + 1) for c in children]
    if kind in ("list", "tuple"):
        return items if kind == "list" else tuple(items)
    keys = node.get("k")
    if kind in ("dict", "record") and isinstance(keys, list) and len(keys) == len(items):
        return dict(zip(keys, items))
    raise CheckpointError(f"the manifest's tree has a node of kind {kind!r}", fix="the manifest is damaged")
