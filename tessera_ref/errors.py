"""The error hierarchy.

Every mistake a user can make raises a :class:`TesseraError` subclass whose message says
what is wrong (the types, shapes, values or axes involved), where in the *user's* code it
happened (``file:line``, the first stack frame outside ``tessera_ref``) and how to fix it.
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.util
import inspect
import os
import sys

_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__))
# Plumbing between the user's line and our code: `with` blocks of our context managers, and
# NumPy calling our protocol methods (np.sum(x) -> x.sum(...)).
_NUMPY = importlib.util.find_spec("numpy")
_PLUMBING = (os.path.abspath(contextlib.__file__),
             os.path.dirname(os.path.abspath(_NUMPY.origin)) + os.sep if _NUMPY and _NUMPY.origin else None)
_RUNNING = contextvars.ContextVar("tessera_ref_running_op", default=None)


@contextlib.contextmanager
def running_op_at(location: str | None):
    """Within the block :func:`user_location` is ``location``: the source line of the traced
    op an interpreter is running, which is where the user wrote it (errors and the simulated
    machine's records then name that line, not the call of the traced function)."""
    token = _RUNNING.set(location)
    try:
        yield
    finally:
        _RUNNING.reset(token)


def _is_plumbing(path: str) -> bool:
    return path == _PLUMBING[0] or (_PLUMBING[1] is not None and path.startswith(_PLUMBING[1]))


def user_location() -> str | None:
    """``"file:line"`` of the innermost stack frame that is not code of ``tessera_ref``.

    A frame belongs to the package when its file lies in the package directory (or is
    plumbing: the standard library's ``contextlib`` running our context managers, NumPy calling
    our protocol methods) or, for code
    generated at run time (dataclass ``__init__`` and the like), when its module is ours —
    except modules that declare ``__tessera_user_code__ = True`` (the bundled demo), which are
    user programs that happen to ship with the package. While an interpreter runs a traced op
    (:func:`running_op_at`) it is that op's location.
    """
    running = _RUNNING.get()
    if running is not None:
        return running
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename
        module = frame.f_globals.get("__name__", "")
        path = os.path.abspath(filename)
        ours = path.startswith(_PACKAGE_DIR + os.sep) or _is_plumbing(path) or (
            filename.startswith("<") and (module == "tessera_ref" or module.startswith("tessera_ref."))
        )
        if not ours or frame.f_globals.get("__tessera_user_code__"):
            return f"{filename}:{frame.f_lineno}"
        frame = frame.f_back
    return None


class TesseraError(Exception):
    """Base class of every error raised for a user mistake.

    ``TesseraError(what, fix=...)`` renders as ``"<what> [at file:line]. Fix: <fix>"``; the
    location is captured when the error is created, from the first frame outside the
    package, unless ``location`` is passed explicitly.
    """

    def __init__(self, what: str, *, fix: str | None = None, location: str | None = None):
        self.what = what
        self.fix = fix
        self.location = location if location is not None else user_location()
        super().__init__(self._render())

    def _render(self) -> str:
        text = self.what
        if self.location:
            text += f" [at {self.location}]"
        if self.fix:
            text += f". Fix: {self.fix}"
        return text


class UsageError(TesseraError, TypeError):
    """A public function called with arguments its signature does not take."""


def checked_signature(fn):
    """``fn``, except that a call whose arguments do not bind to its signature (an unknown
    keyword, a missing or extra argument) raises :class:`UsageError` naming the function, its
    signature and the user's line, instead of Python's bare ``TypeError``."""
    signature = inspect.signature(fn)

    @functools.wraps(fn)
    def call(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except TypeError:
            try:
                signature.bind(*args, **kwargs)
            except TypeError as wrong:
                reason = str(wrong)
                unknown = [k for k in kwargs if k not in signature.parameters]
                if unknown and not any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
                    reason = f"unknown keyword argument(s) {', '.join(map(repr, unknown))}"
                raise UsageError(f"{fn.__name__}{signature}: {reason}",
                                 fix=f"call {fn.__name__} with the parameters of its signature "
                                     f"(help({fn.__name__}) says what each means)") from None
            raise

    return call


class FormatError(TesseraError, ValueError):
    """An unknown number format, or an operation the format does not support."""


class ConversionError(TesseraError, ValueError):
    """A bad argument to a conversion: rounding mode, overflow mode, key, input dtype."""


class PolicyError(TesseraError, ValueError):
    """A malformed numerics policy or tensor annotation."""


class ScalingError(TesseraError, ValueError):
    """A bad block-scaling request (block size, axis, shape, format)."""


class RNGError(TesseraError, ValueError):
    """A bad random-number request (key, index, distribution parameter)."""


class ArithError(TesseraError, ValueError):
    """A bad argument to an arithmetic operation: op name, operand count, shapes, formats."""


class ShapeError(TesseraError, ValueError):
    """Operand shapes that do not fit an op (the message names every shape involved)."""


class DTypeError(TesseraError, TypeError):
    """Operand formats, policies or element kinds that do not fit an op (both types named)."""


class OpError(TesseraError, ValueError):
    """An unknown op, an unknown attribute, or an attribute value an op does not accept."""


class TraceError(TesseraError, RuntimeError):
    """A traced function used a traced value where a concrete one is needed, or let one escape."""


class MeshError(TesseraError, ValueError):
    """A malformed mesh, an axis or device that is not in the mesh."""


class LayoutError(TesseraError, ValueError):
    """A sharding layout that does not fit a tensor or mesh (uneven split, unknown partition name)."""


class CollectiveError(TesseraError, RuntimeError):
    """A collective that cannot run as asked: wrong axis, mismatched shapes across ranks,
    a recv with no matching send (which would hang on a GPU)."""


class AbstractValueError(TesseraError, RuntimeError):
    """Values were asked of an abstract tensor (one that carries types and layouts but no data)."""


class CollectiveWarning(UserWarning):
    """A collective that runs but is probably not what was meant (e.g. reducing a tensor that
    is not a pending partial sum over the axis); the message says what was done instead."""


class SimError(TesseraError, ValueError):
    """A request the simulated machine cannot take: an unknown hardware preset, a device that
    is not in the machine, an unknown collective or algorithm, a memory handle freed twice."""


class OutOfMemoryError(TesseraError, MemoryError):
    """An allocation that does not fit in a simulated device's HBM; the message names the
    tensor, the device, the bytes requested, live and available, and how to make it fit."""


class HostMemoryError(TesseraError, MemoryError):
    """A request too large for the host running the reference (an eager result bigger than
    its working-memory limit), refused before anything is allocated."""


class MemoryWarning(UserWarning):
    """A simulated device's live HBM crossed the guideline of 80% of its capacity (issued once
    per device); the message names the device, the bytes, the percentage and the tensor."""


class AutotuneWarning(UserWarning):
    """An autotuning space that explores nothing: a parameter whose values give the same
    kernel and launch (the kernel never reads it); the message names it and the kernel."""


class KernelError(TesseraError, ValueError):
    """A ``@kernel`` body or a Tile IR program is malformed (unsupported syntax, a type
    mismatch, a lane-varying loop bound); the message names the kernel's source line."""


class TileBoundsError(TesseraError, IndexError):
    """A tile kernel accessed global or shared memory out of bounds; the message names the
    buffer, the tile, the lanes, the indices and the kernel's source line."""


class TileRaceError(TesseraError, RuntimeError):
    """Two lanes of a tile accessed one shared-memory element within a barrier phase, at
    least one access a write (or a cp.async copy was read before its wait and barrier)."""


class TileUninitializedError(TesseraError, RuntimeError):
    """A tile kernel read shared memory that nothing had written."""


class TileBarrierError(TesseraError, RuntimeError):
    """A ``tbarrier()`` was reached by only some lanes of a tile (a divergent barrier)."""


class AutodiffError(TesseraError, ValueError):
    """A transform (``grad``, ``vjp``, ``jvp``) cannot differentiate what it was given: a
    non-scalar output for ``grad``, an integer argument, an op without a derivative rule."""


class EffectError(TesseraError, RuntimeError):
    """State or I/O (``dist.send``/``recv``, an op with side effects) inside differentiated code."""


class LoweringError(TesseraError, ValueError):
    """A program cannot be lowered to the next IR level (Graph -> Schedule -> Tile -> target):
    an op with no tile lowering, a schedule that does not fit the shapes, an unsupported
    format; the message names the op's source line, its types and the schedule."""


class AutotuneError(TesseraError, ValueError):
    """An autotuning sweep could not run: an empty space, or every configuration rejected
    (the message lists each configuration's reason)."""


class BackendError(TesseraError, RuntimeError):
    """An unknown or broken backend, or an executor that cannot run what it was given."""


class BackendFinding(BackendError):
    """A bug a backend's own checks found in what it ran (a race, an access past a buffer in a
    kernel it rendered): not a refusal — the conformance suite counts it as a failure
    (BACKEND-ERR-1)."""


class CacheError(TesseraError, RuntimeError):
    """A cache directory the library will not load code or records from (another user could
    write it) or cannot create; the message names the directory, its owner and mode."""


class CacheWarning(UserWarning):
    """A damaged or foreign cache entry or autotune record that was ignored and rebuilt, or a
    cache that could not be written; the message names the file and what was wrong."""


class PeerError(BackendError):
    """Another process of a multi-process program did not answer in time, or failed while this
    one waited for it; the message names the ranks (or the address) waited for. ``tessera-ref
    launch`` names such a rank as the cause only when no rank failed on its own (MESH-MP-5)."""


class OptimError(TesseraError, ValueError):
    """An optimizer (:mod:`tessera_ref.optim`) given a bad hyperparameter, parameters that are
    not floating-point tensors, or gradients or state whose tree does not match the parameters'
    (the message names the first mismatching path)."""


class CheckpointError(TesseraError, ValueError):
    """A checkpoint that cannot be saved or restored as asked: a corrupt (SHA-256 or CRC
    mismatch), missing, truncated or mismatched file, a manifest that fails validation, or a
    tree that does not match the checkpoint's; the message names the file and the tensor."""
