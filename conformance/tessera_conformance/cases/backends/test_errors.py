"""BACKEND-ERR-1: a backend raises the interpreter's error for the same user mistake, at the
user's line; what only it can fail at is a BackendError naming it, the op, the line and the fix;
a failure changes nothing."""
import numpy as np
import pytest

from tessera_ref import backends, dist, jit, op
from tessera_ref.errors import BackendError, ShapeError
from tessera_conformance import clause

from ._reference import wide

S = dist.ShardSpec
HERE = __file__


def _mistakes():
    a, b = np.ones((3, 4), np.float32), np.ones((5, 6), np.float32)
    mesh = dist.Mesh(("tp",), range(2), (2,))
    A = dist.tensor((4, 4), S(("row",), ("tp",)), mesh, data=np.ones((4, 4), np.float32))
    return {"eager matmul": lambda: op.matmul(a, b),
            "eager add": lambda: op.add(a, b),
            "jit": lambda: jit(lambda p, q: op.exp(p) @ q)(a, b),
            "sharded": lambda: op.matmul(A, dist.tensor((3, 2), None, mesh, data=np.ones((3, 2), np.float32)))}


@pytest.mark.parametrize("mistake", list(_mistakes()))
@clause("BACKEND-ERR-1")
def test_a_shape_mistake_is_a_shape_error_at_the_users_line(backend, mistake):
    """The same ShapeError as on the oracle, attributed to this file."""
    with pytest.raises(ShapeError) as oracle:
        _mistakes()[mistake]()
    with pytest.raises(ShapeError) as info:
        with backends.use(backend):
            _mistakes()[mistake]()
    assert HERE in (info.value.location or "")
    assert type(info.value) is type(oracle.value)


@clause("BACKEND-ERR-1")
def test_what_a_backend_refuses_is_a_backend_error_that_names_it(backend):
    """If the backend refuses an op (a format or shape it cannot run), the BackendError names
    the backend, the op, the user's line and a fix; the oracle runs the same program."""
    x = wide(np.random.default_rng(160), (6, 5))
    y = wide(np.random.default_rng(161), (5,))
    programs = [lambda: op.add(x, y), lambda: op.exp(x), lambda: op.matmul(x, x.T),
                lambda: op.sum(op.cast(x, "fp8_e4m3"), axis=0)]
    for program in programs:
        program()  # the oracle runs it
        try:
            with backends.use(backend):
                program()
        except BackendError as exc:
            text = str(exc)
            assert backend in text and HERE in (exc.location or "") and exc.fix
            assert any(name in text for name in ("add", "exp", "matmul", "sum", "cast"))


@clause("BACKEND-ERR-1")
def test_a_failure_changes_nothing(backend):
    """After failures the caller's arrays are unchanged and the backend gives the bits it gave
    before them; a successful run writes none of its inputs either."""
    rng = np.random.default_rng(162)
    a, b = wide(rng, (4, 8)), wide(rng, (8, 3))
    keep_a, keep_b = a.copy(), b.copy()
    f = jit(lambda p, q: op.softmax(op.matmul(p, q), axis=-1))
    with backends.use(backend):
        first = np.asarray(f(a, b))
        for bad in (lambda: f(a, b[:5]), lambda: op.matmul(a, a)):
            with pytest.raises(ShapeError):
                bad()
        got = np.asarray(f(a, b))
    assert np.array_equal(a.view(np.uint32), keep_a.view(np.uint32))
    assert np.array_equal(b.view(np.uint32), keep_b.view(np.uint32))
    assert np.array_equal(got.view(np.uint32), first.view(np.uint32))
