"""Misuse probes that used to end in a raw Python exception (issue 19, item 11): each is now
a TesseraError naming the user's line and a fix."""
from __future__ import annotations

import numpy as np
import pytest

import tessera_ref as tr
from tessera_ref import dist, kernel, sim
from tessera_ref.errors import (AutodiffError, CollectiveError, DTypeError, KernelError, ShapeError, SimError,
                                TraceError)

HERE = __file__


def _line_of(marker: str) -> int:
    with open(HERE) as f:
        return next(i for i, line in enumerate(f, 1) if marker in line and "_line_of" not in line)


def test_a_ragged_list_is_a_dtype_error():
    with pytest.raises(DTypeError, match="ragged") as info:
        tr.asarray([[1.0, 2.0], [3.0]])  # ragged-here
    assert info.value.location == f"{HERE}:{_line_of('# ragged-here')}"


def test_len_of_a_0d_tensor_is_a_shape_error_eagerly_and_traced():
    with pytest.raises(ShapeError, match=r"len\(\) of a 0-d tensor \(tensor<f32>\)"):
        len(tr.asarray(np.float32(1.0)))

    def f(x):
        return len(x)  # len-here

    with pytest.raises(ShapeError, match="0-d tensor") as info:
        tr.jit(f)(np.array(1.0, np.float32))
    assert info.value.location == f"{HERE}:{_line_of('# len-here')}"
    assert len(tr.asarray(np.zeros((3, 2), np.float32))) == 3


@pytest.mark.parametrize("transform", [tr.grad, tr.value_and_grad])
def test_a_transform_of_something_not_callable_is_refused_at_once(transform):
    with pytest.raises(AutodiffError, match=r"got 3 \(int\)"):
        transform(3)


def test_inspect_ir_on_the_kernel_decorator_points_to_a_kernel():
    with pytest.raises(KernelError, match="decorator itself") as info:
        kernel.inspect_ir("tile")
    assert "my_kernel.inspect_ir('tile')" in info.value.fix


def test_a_tracer_that_escaped_its_jit_cannot_be_used():
    kept = []

    def f(x):
        kept.append(x)
        return x * 2.0

    g = tr.jit(f)
    g(np.ones(2, np.float32))
    before = g.inspect_ir("graph", optimized=False)
    with pytest.raises(TraceError, match="after its trace ended"):
        kept[0] + 1.0
    assert g.inspect_ir("graph", optimized=False) == before  # nothing appended after the return


def test_a_sim_use_error_names_the_users_line_not_contextlib():
    with pytest.raises(SimError) as info:
        with sim.use("H100"):  # use-here
            pass
    assert info.value.location == f"{HERE}:{_line_of('# use-here')}"


def test_a_broadcast_root_off_the_axis_has_a_fix():
    mesh = dist.Mesh(("tp",), range(2), (2,))
    t = dist.tensor((4,), dist.ShardSpec(("row",), ("tp",)), mesh, "f32", data=np.arange(4, dtype=np.float32))
    with pytest.raises(CollectiveError, match="root=7") as info:
        dist.broadcast(t, "tp", root=7)
    assert info.value.fix and "0 and 1" in info.value.fix


def test_from_source_without_a_kernel_says_to_write_one():
    with pytest.raises(KernelError, match="0 @kernel") as info:
        kernel.from_source("x = 1")
    assert "@kernel" in info.value.fix and "name=" not in info.value.fix


def _public_functions(module, names):
    import inspect
    return [(name, getattr(module, name)) for name in names if inspect.isfunction(getattr(module, name))]


@pytest.mark.parametrize("name, fn", _public_functions(tr.op, tr.op.__all__) + _public_functions(dist, dist.__all__)
                         + _public_functions(tr.optim, tr.optim.__all__),
                         ids=lambda v: v if isinstance(v, str) else "")
def test_an_unknown_keyword_is_a_usage_error_naming_it(name, fn):
    from tessera_ref.errors import UsageError
    with pytest.raises(UsageError) as info:
        fn(no_such_parameter=1)  # keyword-here
    message = str(info.value)
    assert message.startswith(f"{fn.__name__}(") and "unknown keyword argument(s) 'no_such_parameter'" in message
    assert info.value.location == f"{HERE}:{_line_of('# keyword-here')}"
    assert isinstance(info.value, TypeError)  # code catching TypeError keeps working


def test_dist_collective_spelling_takes_the_same_checks():
    from tessera_ref.errors import UsageError
    mesh = dist.Mesh(axes=["tp"], devices=range(2))
    a = dist.tensor((4, 4), dist.ShardSpec(partition=(0,), mesh_axes=("tp",)), mesh, data=np.ones((4, 4)))
    with pytest.raises(UsageError, match=r"all_gather\(x, axis\): unknown keyword argument\(s\) 'dim'"):
        dist.collective.all_gather(a, axis="tp", dim=0)
    with pytest.raises(UsageError, match="missing a required argument: 'axis'"):
        dist.collective.reduce_scatter(a)
    assert dist.collective.all_gather(a, axis="tp").shape == (4, 4)


@pytest.mark.parametrize("axes", [(None, "tp"), ("tp", 3), ("tp", ())])
def test_a_mesh_axes_entry_that_names_no_axis_is_a_layout_error(axes):
    from tessera_ref.errors import LayoutError
    with pytest.raises(LayoutError, match=r"mesh_axes entry \d is .*a dimension left out of partition is not split"):
        dist.ShardSpec(("batch", "row"), axes)
