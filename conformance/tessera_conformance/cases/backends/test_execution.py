"""BACKEND-OP-1, BACKEND-RUN-1, BACKEND-LAUNCH-1, BACKEND-PROGRAM-1: what a backend receives
(one op, one function, one launch, one lowered program) and what it must return."""
import ml_dtypes
import numpy as np
import pytest

from tessera_ref import backends, dist, f32, jit, kernel, lowering, mut, op, symbols, tile
from tessera_ref.backends import Launch
from tessera_ref.errors import BackendError, TesseraError
from tessera_ref.ops.execute import call_of
from tessera_conformance import ORACLE, assert_bits, clause, eager, unsupported

from ..mesh._reference import dot_ref, sum_ref
from ._reference import Spy, scale, wide

S = dist.ShardSpec
n = symbols("n")


@kernel
def unguarded(x: f32[n], y: mut[f32[n]]):
    """Every lane copies one element, without a bounds guard."""
    i = tile.linear_id()
    y[i] = x[i]


def _calls(fn, *args):
    """The ``Call`` of every op of ``fn`` traced on ``args``, with the op's operand values as the
    oracle computes them (so each op can be fed to a backend on its own)."""
    module = jit(fn).trace(*args)
    block = module.body.first_op.regions[0].entry
    env = dict(zip(block.args, args))
    out = []
    oracle = backends.get(ORACLE)
    for operation in block:
        if operation is block.last_op:
            break
        call = call_of(operation)
        operands = [env[v] for v in operation.operands]
        out.append((call, operands))
        env.update(zip(operation.results, oracle.run_op(call, *operands)))
    return out


def _program_fn(x, w, b):
    return op.sum(op.matmul(x, w) + b, axis=1)


def _program_ref(x, w, b):
    return sum_ref(np.add(dot_ref(x, w), b, dtype=np.float32), 1)


# -- BACKEND-OP-1 ---------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", ["f32", "bf16"])
@clause("BACKEND-OP-1")
def test_run_op_returns_the_oracles_bits(backend, fmt):
    """Each op of a program fed to ``run_op`` alone: a tuple, one array per result, of the result
    type's storage dtype, with the oracle's bits (and NumPy's where IEEE fixes them)."""
    dtype = ml_dtypes.bfloat16 if fmt == "bf16" else np.float32
    rng = np.random.default_rng(150)
    x, w, b = wide(rng, (3, 5, 64)).astype(dtype), wide(rng, (64, 4)).astype(dtype), wide(rng, (3, 5, 4)).astype(dtype)
    be, oracle = backends.get(backend), backends.get(ORACLE)
    names = []
    for call, operands in _calls(lambda p, q, r: op.sum(op.exp(op.matmul(p, q) * r), axis=-1), x, w, b):
        try:
            got = be.run_op(call, *operands)
        except BackendError as exc:
            unsupported(backend, exc, call.primitive.name)
        want = oracle.run_op(call, *operands)
        assert isinstance(got, tuple) and len(got) == len(call.out_types)
        for g, t in zip(got, call.out_types):
            assert g.dtype == np.dtype(t.dtype) and g.shape == t.shape
        assert_bits(list(got), list(want), call.primitive.name)
        names.append(call.primitive.name)
        if call.primitive.name == "matmul" and fmt == "f32":
            assert_bits(got[0], dot_ref(*operands))  # batch axes broadcast, NUM-RED-1 per output
        if call.primitive.name == "mul" and fmt == "f32":
            assert_bits(got[0], np.multiply(*operands, dtype=np.float32))
    assert names == ["matmul", "mul", "exp", "sum"]


# -- BACKEND-RUN-1 --------------------------------------------------------------------------------

@clause("BACKEND-RUN-1")
def test_run_function_on_arrays(backend):
    """``run_function`` runs a traced function through the one loop: the results of its ops in
    program order (the independent reference's bits)."""
    rng = np.random.default_rng(151)
    x, w, b = wide(rng, (4, 96)), wide(rng, (96, 5)), wide(rng, (4, 5))
    func = jit(_program_fn).trace(x, w, b).body.first_op
    got = eager(backend, lambda: backends.get(backend).run_function(func, [x, w, b]))
    assert_bits(got, [_program_ref(x, w, b)])


@pytest.mark.parametrize("bad", ["dtype", "rank", "size", "count"])
@clause("BACKEND-RUN-1")
def test_run_function_checks_its_arguments(backend, bad):
    """Arguments are checked against the parameter types first: dtype, rank, static sizes."""
    x, w, b = np.ones((4, 8), np.float32), np.ones((8, 5), np.float32), np.ones(5, np.float32)
    func = jit(_program_fn).trace(x, w, b).body.first_op
    args = {"dtype": [x.astype(np.float64), w, b], "rank": [x[None], w, b], "size": [x[:3], w, b],
            "count": [x, w]}[bad]
    with pytest.raises(TesseraError):
        eager(backend, lambda: backends.get(backend).run_function(func, args))


@clause("BACKEND-RUN-1")
def test_run_function_on_distributed_tensors(backend):
    """On DistTensors of one mesh each op runs by its sharding rule and collectives by the
    communicator — the eager sharded program's bits; the schedule of the same graph runs
    through the same loop with the same bits."""
    mesh = dist.Mesh(("dp", "tp"), range(6), (2, 3))
    rng = np.random.default_rng(152)
    x, w, b = wide(rng, (4, 96)), wide(rng, (96, 6)), wide(rng, (4, 6))
    X = dist.tensor(x.shape, S(("col",), ("tp",)), mesh, data=x)
    W = dist.tensor(w.shape, S(("row",), ("tp",)), mesh, data=w)
    B = dist.tensor(b.shape, None, mesh, data=b)
    func = jit(_program_fn).trace(X, W, B).body.first_op
    spy = Spy(backend)
    got = eager(spy, lambda: backends.get(spy).run_function(func, [X, W, B]))
    assert spy.counts["op:matmul"] >= 1 and spy.counts["reduce"] >= 1
    assert_bits(got, [eager(backend, lambda: _program_fn(X, W, B))])
    module = jit(_program_fn).trace(x, w, b)
    assert_bits(eager(backend, lambda: lowering.run_schedule(lowering.graph_to_schedule(module), x, w, b)),
                [eager(backend, lambda: backends.get(backend).run_function(module.body.first_op, [x, w, b]))[0]])


# -- BACKEND-LAUNCH-1 -----------------------------------------------------------------------------

@pytest.mark.parametrize("by", ["list", "dict"])
@clause("BACKEND-LAUNCH-1")
def test_launch_writes_mut_buffers_in_place(backend, by):
    """``launch(Launch(...))`` runs grid × lanes of the kernel on buffers (a list in parameter
    order or a dict by name): the ``mut`` buffer is written in place, the others are not."""
    x = wide(np.random.default_rng(153), (300,))
    y = np.zeros(300, np.float32)
    keep = x.copy()
    buffers = [x, y, 1.5] if by == "list" else {"x": x, "y": y, "alpha": 1.5}
    eager(backend, lambda: backends.get(backend).launch(
        Launch(scale.module, None, 3, 128, buffers, True, True, "H100", "raise")) or 0)  # a report or None
    assert_bits(y, np.multiply(x, np.float32(1.5), dtype=np.float32))
    assert_bits(x, keep)


@clause("BACKEND-LAUNCH-1")
def test_a_kernel_call_returns_the_backends_report(backend):
    """A ``@kernel`` call is a launch on the current backend; ``"interp"`` returns a TileReport
    with counters."""
    x, y = np.arange(256, dtype=np.float32), np.zeros(256, np.float32)
    with backends.use(backend):
        report = scale(x, y, 2.0, grid=2, lanes=128)
    assert_bits(y, 2 * x)
    if backend == ORACLE:
        assert type(report).__name__ == "TileReport" and report.counters.tiles == 2


@clause("BACKEND-LAUNCH-1")
def test_checks_are_honoured_or_reported(backend):
    """``checks=True`` on a kernel that reads past its buffer: the backend finds it — raised with
    ``on_error="raise"``; listed in the report with ``"collect"``, or raised there too by a
    backend that cannot collect — or its report says ``checks=False``. A report that does
    neither ignored the option silently."""
    x, y = np.arange(100, dtype=np.float32), np.zeros(100, np.float32)

    def launch(on_error):
        """The report, or the error raised (a plain BackendError is a refusal: unsupported)."""
        try:
            with backends.use(backend):
                return unguarded(x, y, grid=1, lanes=128, checks=True, on_error=on_error)
        except TesseraError as exc:
            if type(exc) is BackendError:
                unsupported(backend, exc, "the launch")
            return exc
    raised = isinstance(launch("raise"), TesseraError)
    report = launch("collect")
    if isinstance(report, TesseraError):  # found, and raised: this backend cannot collect
        assert raised, f"the read past the buffer was raised under on_error='collect' but not under 'raise': {report}"
        return
    if getattr(report, "checks", None) is False:
        return  # said so (BACKEND-LAUNCH-1)
    assert getattr(report, "findings", None), \
        f"the read past the buffer was neither found nor reported as unchecked: {backend}'s report {report!r}"
    assert backend != ORACLE or raised, "the oracle listed the read past the buffer but did not raise it"


# -- BACKEND-PROGRAM-1 ----------------------------------------------------------------------------

@clause("BACKEND-PROGRAM-1")
def test_run_program(backend):
    """``run_program`` runs the host steps and each kernel (by ``launch``) in order: the results
    and one report per launch."""
    rng = np.random.default_rng(154)
    x, w, b = wide(rng, (8, 64)), wide(rng, (64, 16)), wide(rng, (8, 16))
    be = backends.get(backend)
    program = be.lower(jit(_program_fn).trace(x, w, b))
    launches = sum(1 for _, plan in program.steps if plan is not None)
    spy = Spy(backend)
    results, reports = _on(spy, lambda: spy.run_program(program, [x, w, b]))
    assert spy.counts["launch"] == launches == len(reports) >= 2
    assert_bits(list(results), [_program_ref(x, w, b)])


def _on(backend, fn):
    """``fn()`` inside ``backends.use(backend)``; a BackendError marks the case unsupported."""
    try:
        with backends.use(backend):
            return fn()
    except BackendError as exc:
        unsupported(backend, exc)


@clause("BACKEND-PROGRAM-1")
def test_lowered_program_run_and_op_kernel_come_here(backend):
    """``LoweredProgram.run`` and ``@op.kernel`` calls run their kernels on the current backend."""
    rng = np.random.default_rng(155)
    x, w, b = wide(rng, (8, 64)), wide(rng, (64, 16)), wide(rng, (8, 16))
    program = lowering.lower(jit(_program_fn).trace(x, w, b))
    spy = Spy(backend)
    results, reports = _on(spy, lambda: program.run(x, w, b))
    assert spy.counts["launch"] == len(reports) >= 2
    assert_bits(results[0], _program_ref(x, w, b))

    @op.kernel
    def twice(v):
        return v + v

    before = spy.counts.copy()
    with backends.use(spy):
        got = np.asarray(twice(x))
    assert spy.ran(before)["launch"] == 1
    assert_bits(got, np.add(x, x, dtype=np.float32))
