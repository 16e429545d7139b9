"""Random valid Graph IR programs for differential testing (NNSmith/Csmith-style).

:func:`programs` is a hypothesis strategy of :class:`Program`: a few inputs of random shapes
(rank 1–2; sizes 1–6, 30–70 — long enough that summation orders tell apart — or odd and prime
sizes that no power-of-two tile divides, and a contraction size past 2,048 now and then: a
long K) in one random policy, and a sequence of steps, each an op of the
registry applied to earlier values where its typing rules allow (same-shape elementwise
arithmetic, unary math, reductions over an axis, matmul of compatible matrices, transposes,
softmax, casts between policies). Input values mix ordinary numbers with the edge cases of
the format (±0, ±inf, NaN, subnormals, values near rounding ties). A program runs on two
backends and must give the same bits; hypothesis shrinks a disagreement to a minimal program,
which :meth:`Program.script` writes out as a standalone script that reproduces it.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from hypothesis import strategies as st

from tessera_ref import asarray, backends, dist, jit, op
from tessera_ref.errors import BackendError, BackendFinding, TesseraError
from tessera_ref.numerics import Policy

from .harness import numpy_of

__all__ = ["Program", "programs", "outcome", "compare", "POLICIES", "ODD", "LONG_K"]

#: The policies programs are written in, as ``Policy`` keyword arguments.
POLICIES = (dict(storage="f32"), dict(storage="bf16", accum="f32"), dict(storage="f16", accum="f32"),
            dict(storage="f32", reduction="exact"))
_UNARY = ("neg", "abs", "exp", "tanh", "sqrt", "log")
_BINARY = ("add", "sub", "mul", "div", "maximum", "minimum")
_REDUCE = ("sum", "mean", "max")
_AXES = ("a", "b", "c")
_SPECIAL = (0.0, -0.0, np.inf, -np.inf, np.nan, 1e-40, -3e-39, 1.0 + 2.0 ** -23, 65504.0, 3.0e38)


@dataclass(frozen=True)
class Step:
    """One op: its name, the indices of its operands among the values so far, its keywords."""

    op: str
    args: tuple
    kwargs: tuple = ()

    def source(self) -> str:
        args = [f"v[{i}]" for i in self.args] + [f"{k}={v!r}" for k, v in self.kwargs]
        return f"op.{self.op}({', '.join(args)})"


@dataclass(frozen=True)
class Program:
    """Inputs (NumPy float64 values and a policy) and steps; the result is the last value."""

    policy: dict
    inputs: tuple
    steps: tuple
    mesh: tuple = ()      # the simulated mesh's shape (axes a, b, ...); () for one device
    layouts: tuple = ()   # per input: (partition, mesh_axes) of its ShardSpec, or None (replicated)

    def arrays(self) -> list:
        arrays = [asarray(x, policy=Policy(**self.policy)) for x in self.inputs]
        if not self.mesh:
            return arrays
        mesh = dist.Mesh(_AXES[:len(self.mesh)], range(int(np.prod(self.mesh))), self.mesh)
        return [dist.tensor(a.shape, dist.ShardSpec(*lay) if lay else None, mesh, dtype=a.type.policy, data=a.data)
                for a, lay in zip(arrays, self.layouts)]

    def __call__(self, *values):
        v = list(values)
        for step in self.steps:
            v.append(getattr(op, step.op)(*(v[i] for i in step.args), **dict(step.kwargs)))
        return v[-1]

    def script(self, backend: str, oracle: str) -> str:
        """A standalone script that runs this program on ``backend`` and ``oracle`` and prints
        whether their bits agree."""
        lines = ["# A program on which two Tessera backends disagree (written by the conformance fuzzer).",
                 "import numpy as np", "from tessera_ref import asarray, dist, jit, op",
                 "from tessera_ref.numerics import Policy", "",
                 "inf, nan = float('inf'), float('nan')  # as repr() writes the special input values",
                 f"POLICY = Policy(**{self.policy!r})",
                 "inputs = [asarray(np.array(x, dtype=np.float64), policy=POLICY) for x in ["]
        lines += [f"    {np.asarray(x).tolist()!r}," for x in self.inputs]
        lines += ["]]"]
        if self.mesh:
            lines += [f"mesh = dist.Mesh({_AXES[:len(self.mesh)]!r}, range({int(np.prod(self.mesh))}), {self.mesh!r})",
                      f"layouts = {self.layouts!r}",
                      "inputs = [dist.tensor(a.shape, dist.ShardSpec(*lay) if lay else None, mesh, dtype=a.type.policy,",
                      "                      data=a.data) for a, lay in zip(inputs, layouts)]"]
        lines += ["", "", "def program(*v):", "    v = list(v)"]
        lines += [f"    v.append({s.source()})" for s in self.steps]
        lines += ["    return v[-1]", "", "",
                  f"got = np.asarray(jit(program, backend={backend!r})(*inputs))",
                  f"want = np.asarray(jit(program, backend={oracle!r})(*inputs))",
                  "print('same bits' if got.tobytes() == want.tobytes() else 'DIFFERENT bits')",
                  "print('got ', got)", "print('want', want)", ""]
        return "\n".join(lines)


#: Odd and prime sizes (no power-of-two tile divides them) and contraction sizes past 2,048.
ODD = (7, 13, 31, 67, 127, 129)
LONG_K = (2048, 2053, 2055)
#: Inputs up to this many elements are drawn element by element (shrinkable); larger ones from
#: a drawn seed, with drawn special values at drawn positions.
_DRAWN = 256


def _values(draw, shape):
    size = int(np.prod(shape))
    normal = st.floats(-8, 8, allow_nan=False, width=32)
    if size <= _DRAWN:
        element = st.one_of(normal, normal, normal, st.sampled_from(_SPECIAL))
        return np.array(draw(st.lists(element, min_size=size, max_size=size)), dtype=np.float64).reshape(shape)
    rng = np.random.default_rng(draw(st.integers(0, 2 ** 32 - 1)))
    out = (rng.uniform(-8, 8, size).astype(np.float32)).astype(np.float64)
    for at, value in draw(st.lists(st.tuples(st.integers(0, size - 1), st.sampled_from(_SPECIAL)), max_size=8)):
        out[at] = value
    return out.reshape(shape)


def _layout(draw, shape, mesh):
    """A random layout of ``shape`` on ``mesh``: replicated, or one dimension split over one
    axis whose size divides it."""
    options = [None] + [((("row", "col")[d] if len(shape) == 2 else "row",), (_AXES[i],))
                        for d in range(len(shape)) for i, p in enumerate(mesh) if shape[d] % p == 0]
    return draw(st.sampled_from(options))


@st.composite
def programs(draw, max_steps: int = 6, meshes: bool = False, odd: bool = False):
    """A random valid program (see the module docstring); with ``meshes``, its inputs are laid
    out on a random simulated mesh (1–3 axes of 2–3 devices) by random layouts, with small
    sizes (2–6: a mesh program costs a sharding plan per op); with ``odd``, every size is odd
    or prime and the contraction size is one of them or a long K."""
    policy = draw(st.sampled_from(POLICIES))
    if meshes:
        sizes = contraction = st.sampled_from([2, 3, 4, 6])
    elif odd:
        sizes, contraction = st.sampled_from(ODD), st.sampled_from(ODD + LONG_K)
    else:
        sizes = st.one_of(st.integers(1, 6), st.integers(30, 70), st.sampled_from(ODD))
        contraction = st.one_of(sizes, sizes, sizes, st.sampled_from(LONG_K))
    m, n, k = draw(sizes), draw(contraction), draw(sizes)  # [m, n] @ [n, k]
    if n >= LONG_K[0]:  # a long K: short rows and columns keep the program cheap
        m, k = min(m, 7), min(k, 7)
    shapes = draw(st.lists(st.sampled_from([(m, n), (m, n), (n, k), (n,)]), min_size=1, max_size=3))
    inputs = tuple(_values(draw, s) for s in shapes)
    mesh = tuple(draw(st.lists(st.integers(2, 3), min_size=1, max_size=3))) if meshes else ()
    layouts = tuple(_layout(draw, s, mesh) for s in shapes) if meshes else ()
    values = list(shapes)
    steps = []
    for _ in range(draw(st.integers(1, max_steps))):
        i = draw(st.integers(0, len(values) - 1))
        shape = values[i]
        same = [j for j, s in enumerate(values) if s == shape]
        choices = ["unary", "binary", "reduce", "transpose" if len(shape) == 2 else "unary"]
        if len(shape) == 2 and any(len(s) == 2 and s[0] == shape[1] for s in values):
            choices.append("matmul")
        if len(shape) == 2:
            choices.append("softmax")
        kind = draw(st.sampled_from(choices))
        if kind == "unary":
            step, out = Step(draw(st.sampled_from(_UNARY)), (i,)), shape
        elif kind == "binary":
            step, out = Step(draw(st.sampled_from(_BINARY)), (i, draw(st.sampled_from(same)))), shape
        elif kind == "reduce":
            axis = draw(st.integers(0, len(shape) - 1))
            step = Step(draw(st.sampled_from(_REDUCE)), (i,), (("axis", axis),))
            out = shape[:axis] + shape[axis + 1:] or ()
        elif kind == "transpose":
            step, out = Step("transpose", (i,), (("perm", (1, 0)),)), shape[::-1]
        elif kind == "softmax":
            step, out = Step("softmax", (i,), (("axis", -1),)), shape
        else:
            j = draw(st.sampled_from([j for j, s in enumerate(values) if len(s) == 2 and s[0] == shape[1]]))
            step, out = Step("matmul", (i, j)), (shape[0], values[j][1])
        steps.append(step)
        values.append(out)
        if out == ():
            break
    return Program(policy, inputs, tuple(steps), mesh, layouts)


def outcome(program: Program, backend, traced: bool):
    """The result's bytes, or the name of the TesseraError the program raised (with the message
    of a finding of the backend's own checks: a bug, not a refusal). A BackendError refusing
    the program is raised."""
    inputs = program.arrays()
    try:
        if traced:
            return numpy_of(jit(program, backend=backend)(*inputs)).tobytes()
        with backends.use(backend):
            return numpy_of(program(*inputs)).tobytes()
    except BackendFinding as exc:
        return f"{type(exc).__name__}: {exc.what}"
    except BackendError:
        raise
    except TesseraError as exc:
        return type(exc).__name__


def compare(program: Program, backend, oracle: str, where: str, fuzz_dir) -> None:
    """``program`` on ``backend`` (traced) and on ``oracle`` (traced; eagerly when ``backend``
    is the oracle) must agree: a program the backend refuses is rejected (hypothesis draws
    another); a disagreement is written to ``fuzz_dir/<backend>-<where>-disagreement.py`` —
    shrunk by hypothesis, the last one written is the minimal program — and fails."""
    from hypothesis import reject
    try:
        got = outcome(program, backend, traced=True)
    except BackendError:
        reject()
    want = outcome(program, oracle, traced=backend != oracle)
    if got != want:
        fuzz_dir.mkdir(parents=True, exist_ok=True)
        path = fuzz_dir / f"{backend}-{where}-disagreement.py"
        path.write_text(program.script(str(backend), oracle))
        detail = got if isinstance(got, str) else "other bits"
        raise AssertionError(f"{backend} and {oracle} disagree on a random program ({detail}; shrunk reproducer: "
                             f"python {path})")
