"""The pass manager and the generic passes: dead-code and common-subexpression elimination."""
import math

import pytest

from ir_testing import F32, finish, new_module, unary
from tessera_ref.ir import (
    Block,
    Builder,
    CommonSubexpressionElimination,
    DeadCodeElimination,
    IRError,
    Pass,
    PassManager,
    Region,
    TensorType,
    VerifyError,
    eliminate_common_subexpressions,
    eliminate_dead_code,
    func_op,
    return_op,
    verify,
)


def entry(module, name="f"):
    return module.lookup(name).regions[0].entry


def names(block):
    return [op.name for op in block]


# -- DCE ---------------------------------------------------------------------------------


def test_dce_removes_unused_pure_chains_in_one_pass():
    module, b, (x,) = new_module()
    dead = unary(b, "test.neg", unary(b, "test.neg", unary(b, "test.neg", x, 1), 2), 3)
    live = unary(b, "test.neg", x, 4)
    finish(b, live)
    assert eliminate_dead_code(module) == 3
    assert names(entry(module)) == ["test.neg", "tessera.return"] and dead.op.parent is None
    verify(module)


def test_dce_keeps_side_effects_and_what_they_use():
    module, b, (x,) = new_module()
    printed = unary(b, "test.neg", x, 1)
    b.create("test.print", [printed])
    finish(b, x)
    assert eliminate_dead_code(module) == 0
    assert names(entry(module)) == ["test.neg", "test.print", "tessera.return"]


def test_dce_keeps_functions_terminators_and_region_ops_with_nested_effects():
    module, b, (x,) = new_module()
    effectful, pure = Block(), Block()
    Builder(effectful).create("test.print", [x])
    Builder(pure).create("test.neg", [x], [F32])
    b.create("rand.loop", regions=[Region([effectful])])
    b.create("rand.loop", regions=[Region([pure])])
    finish(b, x)
    module.body.append(func_op("unused", [], [])).regions[0].entry.append(return_op())
    assert eliminate_dead_code(module) == 1  # the loop whose body is pure
    assert names(entry(module)) == ["rand.loop", "tessera.return"]
    assert module.lookup("unused") is not None


def test_dce_inside_a_kept_region_op():
    module, b, (x,) = new_module()
    body = Block()
    Builder(body).create("test.neg", [x], [F32])
    Builder(body).create("test.print", [x])
    loop = b.create("rand.loop", regions=[Region([body])])
    finish(b, x)
    assert eliminate_dead_code(module) == 1
    assert names(loop.regions[0].entry) == ["test.print"]


# -- CSE ---------------------------------------------------------------------------------


def test_cse_merges_identical_pure_ops_and_keeps_the_first_location():
    module, b, (x,) = new_module()
    a1 = b.create("test.add", [x, x], [F32], {"alpha": math.nan}, location="a.py:1").result
    a2 = b.create("test.add", [x, x], [F32], {"alpha": math.nan}, location="a.py:2").result
    finish(b, b.create("test.add", [a1, a2], [F32]).result)
    assert eliminate_common_subexpressions(module) == 1
    first, total, _ = entry(module).ops
    assert first.location == "a.py:1" and total.operands == (a1, a1)
    verify(module)


@pytest.mark.parametrize("second", [
    dict(attributes={"alpha": -0.0}),                # -0.0 differs from 0.0
    dict(result_types=[TensorType((4,), "bf16")]),   # other result type
    dict(name="test.print"),                         # side effects
    dict(operands="swapped"),                        # other operand order
])
def test_cse_does_not_merge_ops_that_differ(second):
    module, b, (x, y) = new_module(arg_types=(F32, F32))
    b.create("test.sub", [x, y], [F32], {"alpha": 0.0})
    spec = {"name": "test.sub", "operands": [x, y], "result_types": [F32], "attributes": {"alpha": 0.0}}
    spec.update(second)
    if spec["operands"] == "swapped":
        spec["operands"] = [y, x]
    b.create(spec["name"], spec["operands"], spec["result_types"], spec["attributes"])
    finish(b, x)
    assert eliminate_common_subexpressions(module) == 0


def test_cse_reuses_an_outer_op_inside_a_region_but_not_the_reverse():
    module, b, (x,) = new_module()
    outer = unary(b, "test.neg", x, 1)
    body = Block()
    inner = Builder(body).create("test.neg", [x], [F32]).result
    Builder(body).create("test.print", [inner])
    inner_only = Builder(body).create("test.sub", [x, x], [F32]).result
    Builder(body).create("test.print", [inner_only])
    b.create("rand.loop", regions=[Region([body])])
    after = b.create("test.sub", [x, x], [F32]).result
    finish(b, b.create("test.add", [outer, after], [F32]).result)
    assert eliminate_common_subexpressions(module) == 1
    assert names(body) == ["test.print", "test.sub", "test.print"]
    assert body.first_op.operands == (outer,)
    verify(module)


def test_cse_does_not_cross_isolated_functions():
    module, b, (x,) = new_module()
    b.create("rand.const", [], [F32], {"v": 1})
    finish(b, x)
    g = module.body.append(func_op("g", [], [F32]))
    const = Builder(g.regions[0].entry).create("rand.const", [], [F32], {"v": 1})
    g.regions[0].entry.append(return_op([const.result]))
    assert eliminate_common_subexpressions(module) == 0
    verify(module)


def test_cse_reports_attributes_it_cannot_compare():
    module, b, (x,) = new_module()
    b.create("rand.bad", [x], [F32], {"k": object()}, location="bad.py:1")
    finish(b, x)
    with pytest.raises(VerifyError, match=r"cannot compare attributes.*\[at bad.py:1\]"):
        eliminate_common_subexpressions(module)


# -- the pass manager --------------------------------------------------------------------


def test_pass_manager_runs_passes_in_order_with_statistics_and_timings():
    module, b, (x,) = new_module()
    a1 = unary(b, "test.neg", x, 1)
    a2 = unary(b, "test.neg", x, 2)
    finish(b, b.create("test.add", [a1, a2], [F32]).result)
    report = PassManager([CommonSubexpressionElimination(), DeadCodeElimination()]).run(module)
    assert [(r.name, r.statistics) for r in report.records] == [("cse", {"erased": 1}), ("dce", {"erased": 0})]
    assert all(r.seconds >= 0 for r in report.records) and report.verify_seconds > 0
    text = str(report)
    assert text.splitlines()[0].split() == ["pass", "ms", "statistics"]
    assert "cse" in text and "erased=1" in text and "(verification)" in text
    again = PassManager().add(CommonSubexpressionElimination()).run(module)
    assert again.records[0].statistics == {"erased": 0}  # statistics are per run


def test_pass_manager_names_the_pass_that_broke_the_module():
    class Breaks(Pass):
        name = "breaks-things"

        def run(self, module):
            entry(module).last_op.erase()  # the function loses its return

    module, b, (x,) = new_module()
    finish(b, x)
    with pytest.raises(VerifyError, match=r"the body must end with 'tessera.return', ends with nothing "
                                          r"\(after pass 'breaks-things'\) \[at test.py:1\]"):
        PassManager([Breaks()]).run(module)
    module, b, (x,) = new_module()
    finish(b, x)
    entry(module).last_op.erase()
    PassManager([DeadCodeElimination()], verify_each=False).run(module)  # no verification asked
    with pytest.raises(VerifyError, match=r"\(before the first pass\)"):
        PassManager([DeadCodeElimination()]).run(module)


def test_pass_manager_takes_passes_only():
    with pytest.raises(IRError, match="is not a Pass"):
        PassManager([DeadCodeElimination])
    with pytest.raises(NotImplementedError):
        Pass().run(None)
