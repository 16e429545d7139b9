"""What ops take and return: concrete :class:`Array` values and :class:`Tracer` placeholders.

An :class:`Array` is a tensor with values: a NumPy array of its storage dtype (ml_dtypes
dtypes for bf16 and the narrow formats, ``bool``/``int64``/``complex64`` for the element
kinds) and its :class:`~tessera_ref.ir.TensorType` (static shape, policy).
``numpy.asarray(a)`` gives the values. :func:`asarray` makes one from array-likes.

A :class:`Tracer` stands for a value while a function is being traced into Graph IR (see
:class:`Trace`); it has the same operator surface but no values, so Python control flow on
it (``if t > 0``) is a :class:`~tessera_ref.errors.TraceError` telling the user to use
``op.where``.

Python scalars in an op are *weakly typed*: a float or int takes the policy of the op's
first numeric tensor operand (f32 when there is none) and is converted into its storage
format with that policy's rounding; an int with only integer tensors takes the first one's
integer kind (GRAPH-TYPE-4); a bool is an ``i1`` scalar.
"""
from __future__ import annotations

import numbers
from types import SimpleNamespace

import numpy as np

from ..context import TRACES
from ..errors import DTypeError, OpError, ShapeError, TraceError
from ..ir import Block, Module, Operation, TensorType, Value, func_op, return_op
from ..ir.types import BOOL, COMPLEX64, I32, INDEX, UI8, ElementKind, element_arg
from ..numerics import Policy, as_policy, cast, get_format

__all__ = ["FUNCTIONS", "Array", "Tracer", "Trace", "asarray", "element_of_dtype", "current_trace", "is_weak_scalar",
           "length_of"]


#: Every op function by name (``FUNCTIONS.add``), as ``tessera_ref.op`` has them: a registry
#: that ops/__init__ fills once the op families (which import this module) are defined.
FUNCTIONS = SimpleNamespace()


class TensorOperators:
    """Python operators and type properties shared by every tensor value — :class:`Array`,
    :class:`Tracer` and :class:`~tessera_ref.dist.DistTensor` (they call the op functions)."""

    __slots__ = ()
    __array_priority__ = 1000

    def __add__(self, other): return FUNCTIONS.add(self, other)
    def __radd__(self, other): return FUNCTIONS.add(other, self)
    def __sub__(self, other): return FUNCTIONS.sub(self, other)
    def __rsub__(self, other): return FUNCTIONS.sub(other, self)
    def __mul__(self, other): return FUNCTIONS.mul(self, other)
    def __rmul__(self, other): return FUNCTIONS.mul(other, self)
    def __truediv__(self, other): return FUNCTIONS.div(self, other)
    def __rtruediv__(self, other): return FUNCTIONS.div(other, self)
    def __pow__(self, other): return FUNCTIONS.pow(self, other)
    def __rpow__(self, other): return FUNCTIONS.pow(other, self)
    def __matmul__(self, other): return FUNCTIONS.matmul(self, other)
    def __rmatmul__(self, other): return FUNCTIONS.matmul(other, self)
    def __neg__(self): return FUNCTIONS.neg(self)
    def __abs__(self): return FUNCTIONS.abs(self)
    def __lt__(self, other): return FUNCTIONS.less(self, other)
    def __le__(self, other): return FUNCTIONS.less_equal(self, other)
    def __gt__(self, other): return FUNCTIONS.greater(self, other)
    def __ge__(self, other): return FUNCTIONS.greater_equal(self, other)
    def __getitem__(self, index): return FUNCTIONS.getitem(self, index)

    def __iter__(self):
        """The sub-tensors along axis 0 (``x[0]``, ``x[1]``, ...)."""
        return (self[i] for i in range(length_of(self.type)))

    def __len__(self) -> int:
        return length_of(self.type)

    @property
    def T(self):
        """All axes reversed, as NumPy's ``.T`` (the matrix transpose for rank 2)."""
        return FUNCTIONS.transpose(self)

    @property
    def mT(self):
        """The last two axes swapped (a batched matrix transpose)."""
        rank = len(self.shape)
        if rank < 2:
            return FUNCTIONS.transpose(self)
        return FUNCTIONS.transpose(self, tuple(range(rank - 2)) + (rank - 1, rank - 2))

    def reshape(self, *shape):
        return FUNCTIONS.reshape(self, shape[0] if len(shape) == 1 and isinstance(shape[0], (tuple, list)) else shape)

    def astype(self, dtype, **policy):
        return FUNCTIONS.cast(self, dtype, **policy)

    # NumPy's reduction signatures, so np.sum/np.mean/np.max/np.min(x) call these (NumPy
    # interop, GRAPH-NUMPY-1); the op computes, so the result is exact and a tensor.
    def sum(self, axis=None, dtype=None, out=None, keepdims=False, **numpy_only):
        return _reduction("sum", self, axis, dtype, out, keepdims, numpy_only)

    def mean(self, axis=None, dtype=None, out=None, keepdims=False, **numpy_only):
        return _reduction("mean", self, axis, dtype, out, keepdims, numpy_only)

    def max(self, axis=None, out=None, keepdims=False, **numpy_only):
        return _reduction("max", self, axis, None, out, keepdims, numpy_only)

    def min(self, axis=None, out=None, keepdims=False, **numpy_only):
        return _reduction("min", self, axis, None, out, keepdims, numpy_only)

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """A NumPy ufunc of the same meaning as an op runs as that op (exact; a DistTensor keeps
        its layout, a traced value is traced); any other ufunc call is :meth:`_numpy_only`'s."""
        name = NUMPY_UFUNCS.get(ufunc.__name__)
        if method == "__call__" and name is not None and not kwargs:
            return getattr(FUNCTIONS, name)(*inputs)
        return self._numpy_only(ufunc, method, inputs, kwargs)

    def _numpy_only(self, ufunc, method, inputs, kwargs):
        """A ufunc call with no op: refused (an Array computes it with NumPy on its values)."""
        raise OpError(f"{_ufunc_text(ufunc, method, kwargs)} on a {type(self).__name__} has no Tessera op",
                      fix="use the tessera_ref.op functions, or convert explicitly with np.asarray(x) first")

    @property
    def dtype(self) -> np.dtype:
        """The NumPy dtype holding the values (the storage format's)."""
        return self.type.dtype

    @property
    def policy(self):
        """The numerics policy (or the element kind for bool, index and complex tensors)."""
        return self.type.policy

    @property
    def format(self):
        """The storage format (or element kind)."""
        return self.type.format

    @property
    def shape(self) -> tuple:
        return self.type.shape

    @property
    def ndim(self) -> int:
        return self.type.rank


class Array(TensorOperators):
    """A concrete tensor: ``data`` (values in the storage dtype) and ``type`` (static)."""

    __slots__ = ("data", "type")

    def __init__(self, data: np.ndarray, type: TensorType):
        self.data = data
        self.type = type

    @property
    def size(self) -> int:
        return self.data.size

    def _numpy_only(self, ufunc, method, inputs, kwargs):
        """NumPy computes a ufunc that has no op on the values (a NumPy array results)."""
        if any(isinstance(o, TensorOperators) for o in kwargs.get("out", ()) or ()):
            raise OpError(f"{_ufunc_text(ufunc, method, kwargs)}: out= cannot be a Tessera tensor (tensors are "
                          "values)", fix="write into a NumPy array, or use the result")
        values = [np.asarray(x) if isinstance(x, TensorOperators) else x for x in inputs]
        return getattr(ufunc, method)(*values, **kwargs)

    def __dlpack__(self, **kwargs):
        """DLPack export of the values, for formats NumPy holds natively (f64, f32, f16, int8,
        index, i1, complex<f32>); the other formats have no DLPack type."""
        if self.data.dtype.isbuiltin != 1:  # 2: a user-defined (ml_dtypes) type
            raise DTypeError(f"{self.type} has no DLPack type (its values are {self.data.dtype}, an ml_dtypes "
                             "type that DLPack consumers cannot read)",
                             fix="convert first: x.astype('f32'), or np.asarray(x) for the raw storage values")
        return self.data.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self.data.__dlpack_device__()

    def __array__(self, dtype=None, copy=None):
        data = self.data
        if dtype is not None and np.dtype(dtype) != data.dtype:
            return data.astype(dtype)
        return data.copy() if copy else data

    def __bool__(self) -> bool:
        return bool(self.data)

    def __float__(self) -> float:
        return float(self.data)

    def __int__(self) -> int:
        return int(self.data)

    def item(self):
        return self.data.item()

    def numpy(self) -> np.ndarray:
        """The values (the storage-dtype array itself; do not modify it)."""
        return self.data

    def __repr__(self) -> str:
        body = np.array2string(np.asarray(self.data), separator=", ", threshold=20, edgeitems=3)
        return f"Array({body}, type={self.type})"


class Tracer(TensorOperators):
    """A value of a function being traced: an IR :class:`~tessera_ref.ir.Value` in a :class:`Trace`."""

    __slots__ = ("value", "trace")

    def __init__(self, value: Value, trace: "Trace"):
        self.value = value
        self.trace = trace

    @property
    def type(self) -> TensorType:
        return self.value.type

    def _concrete(self, what: str):
        raise TraceError(f"{what} of a traced value ({self.type}) inside {self.trace.name!r}: tracing "
                         "records the computation, the values do not exist yet",
                         fix="use op.where(cond, a, b) instead of if/else on tensor values, or make "
                             "the value a static Python argument")

    def __bool__(self):
        self._concrete("the truth value")

    def __array__(self, dtype=None, copy=None):
        self._concrete("numpy.asarray()")

    def __float__(self):
        self._concrete("float()")

    def __int__(self):
        self._concrete("int()")

    def __repr__(self) -> str:
        return f"Tracer({self.type} in {self.trace.name!r})"


#: NumPy ufuncs that have an op of the same meaning: ``{ufunc name: op function name}``.
NUMPY_UFUNCS = {
    "add": "add", "subtract": "sub", "multiply": "mul", "divide": "div", "negative": "neg",
    "absolute": "abs", "power": "pow", "matmul": "matmul", "maximum": "maximum", "minimum": "minimum",
    "exp": "exp", "expm1": "expm1", "log": "log", "sqrt": "sqrt", "tanh": "tanh", "sin": "sin",
    "cos": "cos", "less": "less", "less_equal": "less_equal", "greater": "greater",
    "greater_equal": "greater_equal", "equal": "equal", "not_equal": "not_equal",
    "logical_and": "logical_and", "logical_or": "logical_or", "logical_not": "logical_not",
}


def _ufunc_text(ufunc, method: str, kwargs: dict) -> str:
    call = f"numpy.{ufunc.__name__}" + ("" if method == "__call__" else f".{method}")
    return call + (f" with {', '.join(sorted(kwargs))}=" if kwargs else "")


def _reduction(name: str, x, axis, dtype, out, keepdims, numpy_only: dict):
    """``x.<name>(...)`` with NumPy's arguments: ``dtype`` casts first (the result and its
    accumulation are in that format); ``out=`` and NumPy-only arguments are refused."""
    if out is not None:
        raise OpError(f"{name}(out=...): a Tessera tensor is a value, so a reduction returns a new tensor",
                      fix=f"use the result: y = np.{name}(x) or y = x.{name}()")
    if numpy_only:
        raise OpError(f"{name}: NumPy's {', '.join(sorted(numpy_only))}= argument(s) are not supported",
                      fix="select the elements first (op.where, slicing), then reduce")
    if dtype is not None:
        x = FUNCTIONS.cast(x, dtype if isinstance(dtype, str) else element_of_dtype(np.dtype(dtype)))
    return getattr(FUNCTIONS, name)(x, axis=axis, keepdims=keepdims)


def length_of(t: TensorType) -> int:
    """``len()`` of a tensor of type ``t``: its first dimension, which must exist and be a number."""
    if not t.shape:
        raise ShapeError(f"len() of a 0-d tensor ({t}): it has no first dimension",
                         fix="use x.shape (here ()), or reshape it to [1] first")
    if not isinstance(t.shape[0], int):
        raise ShapeError(f"len() of {t}: its first dimension {t.shape[0]!r} is symbolic",
                         fix="use x.shape[0] (the symbol), or trace with a concrete size")
    return t.shape[0]


def current_trace() -> "Trace | None":
    """The innermost trace this thread is recording, or ``None`` (eager execution)."""
    traces = TRACES.get()
    return traces[-1] if traces else None


class Trace:
    """Records ops into a new ``tessera.func`` of a new module while it is active.

    Use as a context manager; :meth:`arguments` creates the function's parameters,
    :meth:`finish` adds the return and seals the trace (tracers of a sealed trace raise
    :class:`~tessera_ref.errors.TraceError` when used again).
    """

    def __init__(self, name: str, location: str | None = None):
        self.name = name
        self.location = location
        self.module = Module()
        self.func: Operation | None = None
        self.block = Block()
        self.sealed = False
        self._constants: dict = {}

    def __enter__(self) -> "Trace":
        TRACES.set(TRACES.get() + (self,))
        return self

    def __exit__(self, *exc) -> None:
        traces = list(TRACES.get())
        traces.remove(self)
        TRACES.set(tuple(traces))

    def arguments(self, types) -> list[Tracer]:
        return [Tracer(self.block.add_argument(t), self) for t in types]

    def emit(self, name: str, operands, result_types, attributes, location) -> Operation:
        op = Operation(name, operands, result_types, attributes, (), location)
        self.block.append(op)
        return op

    def value_of(self, x, weak) -> Value:
        """The IR value for an operand: a tracer's own value, or a constant op for concrete data."""
        if isinstance(x, Tracer):
            if x.trace is not self or x.trace.sealed:
                raise TraceError(f"a traced value of {x.trace.name!r} ({x.type}) is used in {self.name!r}"
                                 + (" after its trace ended" if x.trace.sealed else ""),
                                 fix="pass values between traced functions as arguments and results")
            return x.value
        array = asarray(x, weak=weak)
        key = (array.type, array.data.tobytes())
        value = self._constants.get(key)
        if value is None:
            value = constant_op(array, self).results[0]
            self._constants[key] = value
        return value

    def finish(self, results) -> Module:
        """Return ``results`` from the function and put it into the module."""
        values = [self.value_of(r, None) for r in results]
        self.block.append(return_op(values, location=self.location))
        func = func_op(self.name, [a.type for a in self.block.args], [v.type for v in values],
                       location=self.location)
        func.regions[0].blocks.pop()
        func.regions[0].append(self.block)
        self.module.body.append(func)
        self.func = func
        self.sealed = True
        return self.module


def constant_op(array: "Array", trace: Trace) -> Operation:
    """A ``tessera.graph.constant`` holding ``array`` in ``trace`` (defined in :mod:`.constant`)."""
    from .constant import constant_attrs
    return trace.emit("tessera.graph.constant", (), (array.type,), constant_attrs(array), None)


# ---------------------------------------------------------------------------------------
# making Arrays

def element_of_dtype(dtype) -> "Policy | ElementKind":
    """The element a NumPy dtype holds: a format's default policy, or an element kind."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return BOOL
    if dtype.kind in "iu":  # i32 and ui8 as themselves, every other integer dtype as index (int64)
        return {np.dtype(np.int32): I32, np.dtype(np.uint8): UI8}.get(dtype, INDEX)
    if dtype.kind == "c":
        return COMPLEX64
    return as_policy(get_format(dtype))


def is_weak_scalar(x) -> bool:
    """A Python (or NumPy) int/float scalar, which takes its operation's policy."""
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_)) and not isinstance(x, np.ndarray)


def _convert(values: np.ndarray, element, seed) -> np.ndarray:
    if isinstance(element, ElementKind):
        if element.is_int:
            return _to_int_kind(values, element)
        if element is BOOL and values.dtype != np.bool_:
            raise DTypeError(f"an i1 tensor holds booleans; got values of dtype {values.dtype}",
                             fix="compare explicitly (x != 0) to make a mask")
        return values.astype(element.dtype)
    if values.dtype.kind == "c":
        raise DTypeError(f"complex values cannot be stored as {element.storage.name}",
                         fix="take op.real / op.imag first, or store them as complex<f32>")
    if values.dtype == element.storage.dtype:
        return values
    if element.rounding == "stochastic" and seed is None:
        raise DTypeError(f"converting data into {element} rounds stochastically, which needs a key",
                         fix="pass seed=<int> to asarray (element i uses the Philox stream of (seed, i))")
    return cast(values, element.storage, rounding=element.rounding, overflow=element.overflow, key=seed)


def _to_int_kind(values: np.ndarray, kind: ElementKind) -> np.ndarray:
    """Integer data as ``kind`` (GRAPH-TYPE-4): a value the kind cannot hold is a DTypeError."""
    if values.dtype.kind not in "iub":
        raise DTypeError(f"an {kind.name} tensor holds integers; got values of dtype {values.dtype}",
                         fix="pass integer data, convert floats with op.cast(x, '" + kind.name + "'), or use a float format")
    info = np.iinfo(kind.dtype)
    if values.size and values.dtype.kind != "b" and (values.min() < info.min or values.max() > info.max):
        bad = values.max() if values.max() > info.max else values.min()
        raise DTypeError(f"the value {bad} does not fit {kind.name} ([{info.min}, {info.max}])",
                         fix="use a wider integer kind (i32, index) or check the data")
    return values.astype(kind.dtype)


def _host_values(x) -> np.ndarray:
    """``np.asarray(x)``, refusing ragged nesting and non-numeric objects."""
    try:
        values = np.asarray(x)
    except ValueError:
        values = None
    if values is None or values.dtype == object:
        raise DTypeError(f"asarray() got ragged or non-numeric data ({type(x).__name__})",
                         fix="pass a rectangular array of numbers (every row the same length)")
    return values


def asarray(x, dtype=None, policy=None, *, seed=None, weak=None) -> Array:
    """An :class:`Array` holding ``x`` (an Array, NumPy array, nested list or scalar).

    ``dtype`` (a format, its name, or ``"i1"``/``"index"``/``"complex<f32>"``) or ``policy``
    (a :class:`~tessera_ref.numerics.Policy`, e.g. ``bf16 @accum(f32)``) choose the element;
    values are converted into the storage format with the policy's rounding and overflow
    (NUM-CVT; ``seed`` keys stochastic rounding). Without either, an Array is returned as is and a NumPy dtype decides (floats
    by their format, ints as ``index``, bools as ``i1``, complex as ``complex<f32>``); Python
    floats become f32, or the ``weak`` policy when one is given (the scalar rule above).
    """
    if isinstance(x, Tracer):
        raise TraceError("asarray() of a traced value: inside a traced function the values do not exist",
                         fix="use the traced value directly in op.* calls")
    if dtype is not None and policy is not None:
        raise DTypeError(f"asarray() got both dtype={dtype!r} and policy={policy!r}",
                         fix="pass policy= alone (it names the storage format too)")
    if policy is not None:
        element = as_policy(policy)
    elif dtype is not None:
        element = element_arg(dtype, "asarray's dtype")
    elif isinstance(x, Array):
        return x
    elif isinstance(x, (bool, np.bool_)):
        element = BOOL
    elif is_weak_scalar(x) and not isinstance(x, np.generic):
        if isinstance(weak, ElementKind):  # an int kind (GRAPH-TYPE-4): ints take it, floats stay f32
            element = weak if isinstance(x, numbers.Integral) else as_policy("f32")
        else:
            element = as_policy(weak if weak is not None else "f32")
    else:
        element = None  # the NumPy dtype decides
    values = x.data if isinstance(x, Array) else _host_values(x)
    if element is None:
        element = element_of_dtype(values.dtype)
    data = _convert(values, element, seed)
    if not data.flags.c_contiguous:
        data = data.copy()
    return Array(data, TensorType(data.shape, element))
