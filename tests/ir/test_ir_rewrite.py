"""Rewrite patterns, the pattern rewriter and the greedy driver."""
import pytest

from ir_testing import F32, finish, new_module, unary
from tessera_ref.ir import (
    RewriteError,
    RewritePattern,
    TensorType,
    apply_patterns_greedily,
    verify,
)


class DoubleNegation(RewritePattern):
    """neg(neg(x)) -> x"""

    root = "test.neg"

    def match_and_rewrite(self, op, rewriter):
        inner = op.operands[0].defining_op
        if inner is None or inner.name != "test.neg":
            return False
        rewriter.replace_op(op, inner.operands)
        return True


class AddSelfToDouble(RewritePattern):
    """add(v, v) -> double(v)"""

    root = "test.add"

    def match_and_rewrite(self, op, rewriter):
        a, b = op.operands
        if a is not b:
            return False
        rewriter.replace_op(op, rewriter.create("rand.double", [a], [a.type], location=op.location))
        return True


class DoubleDoubleToQuad(RewritePattern):
    """double(double(v)) -> quad(v)"""

    root = "rand.double"

    def match_and_rewrite(self, op, rewriter):
        inner = op.operands[0].defining_op
        if inner is None or inner.name != "rand.double":
            return False
        rewriter.replace_op(op, rewriter.create("rand.quad", inner.operands, [op.result.type]))
        return True


def body_names(module):
    return [op.name for op in module.lookup("f").regions[0].entry]


def test_double_negation_reaches_a_fixpoint():
    module, b, (x,) = new_module()
    value = x
    for line in range(5):
        value = unary(b, "test.neg", value, line)
    finish(b, value)
    applied = apply_patterns_greedily(module, [DoubleNegation()])
    assert body_names(module) == ["test.neg", "tessera.return"]
    ret = module.lookup("f").regions[0].entry.last_op
    assert ret.operands[0].defining_op.operands == (x,)
    assert applied == 2
    verify(module)


def test_even_number_of_negations_disappears():
    module, b, (x,) = new_module()
    value = x
    for line in range(6):
        value = unary(b, "test.neg", value, line)
    finish(b, value)
    apply_patterns_greedily(module, [DoubleNegation()])
    assert body_names(module) == ["tessera.return"]
    assert module.lookup("f").regions[0].entry.last_op.operands == (x,)


def test_ops_created_by_a_rewrite_are_visited_again():
    module, b, (x,) = new_module()
    a = b.create("test.add", [x, x], [F32], location="m.py:1").result
    c = b.create("test.add", [a, a], [F32], location="m.py:2").result
    finish(b, c)
    applied = apply_patterns_greedily(module, [AddSelfToDouble(), DoubleDoubleToQuad()])
    assert body_names(module) == ["rand.quad", "tessera.return"]
    assert module.lookup("f").regions[0].entry.first_op.operands == (x,)
    assert applied == 3
    verify(module)


def test_rewriter_inserts_before_the_matched_op_and_keeps_its_location():
    module, b, (x,) = new_module()
    finish(b, b.create("test.add", [x, x], [F32], location="m.py:7").result)
    apply_patterns_greedily(module, [AddSelfToDouble()])
    double = module.lookup("f").regions[0].entry.first_op
    assert double.name == "rand.double" and double.location == "m.py:7"


def test_higher_benefit_wins_and_root_none_matches_every_op():
    seen = []

    class Spy(RewritePattern):
        benefit = 5

        def match_and_rewrite(self, op, rewriter):
            seen.append(op.name)
            return False

    module, b, (x,) = new_module()
    finish(b, unary(b, "test.neg", unary(b, "test.neg", x, 1), 2))
    apply_patterns_greedily(module, [DoubleNegation(), Spy()])
    assert seen[:3] == ["tessera.func", "test.neg", "test.neg"]  # Spy runs first (higher benefit)
    assert body_names(module) == ["tessera.return"]


def test_driver_erases_dead_pure_ops_but_keeps_side_effects():
    module, b, (x,) = new_module()
    unary(b, "test.neg", x, 1)                     # dead: pure and unused
    b.create("test.print", [x], location="p.py:1")  # side effect: kept
    finish(b, x)
    assert apply_patterns_greedily(module, []) == 0
    assert body_names(module) == ["test.print", "tessera.return"]


def test_patterns_that_undo_each_other_raise_after_the_iteration_bound():
    class NegToFlip(RewritePattern):
        root = "test.neg"

        def match_and_rewrite(self, op, rewriter):
            rewriter.replace_op(op, rewriter.create("rand.flip", op.operands, [op.result.type]))
            return True

    class FlipToNeg(RewritePattern):
        root = "rand.flip"

        def match_and_rewrite(self, op, rewriter):
            rewriter.replace_op(op, rewriter.create("test.neg", op.operands, [op.result.type]))
            return True

    module, b, (x,) = new_module()
    finish(b, unary(b, "test.neg", x, 1))
    with pytest.raises(RewriteError, match="did not reach a fixpoint in 4 iterations; in the last one "
                                           "(NegToFlip|FlipToNeg) fired 1 time"):
        apply_patterns_greedily(module, [NegToFlip(), FlipToNeg()], max_iterations=4)
    verify(module)  # every step left valid IR


def test_a_pattern_that_claims_changes_it_did_not_make_is_caught():
    class Liar(RewritePattern):
        root = "test.neg"

        def match_and_rewrite(self, op, rewriter):
            return True

    module, b, (x,) = new_module()
    finish(b, unary(b, "test.neg", x, 1))
    with pytest.raises(RewriteError, match="Liar fired 1 time"):
        apply_patterns_greedily(module, [Liar()])


def test_replacing_with_a_value_of_another_type_names_pattern_op_and_types():
    class Retype(RewritePattern):
        root = "test.neg"

        def match_and_rewrite(self, op, rewriter):
            other = rewriter.create("rand.cast", op.operands, [TensorType((4,), "bf16")])
            rewriter.replace_op(op, other)
            return True

    module, b, (x,) = new_module()
    finish(b, unary(b, "test.neg", x, 3))
    with pytest.raises(RewriteError, match=r"pattern Retype on 'test.neg' \(at test.py:3\): result #0 of "
                                           r"'test.neg' has type tensor<4xf32> but its replacement has type "
                                           r"tensor<4xbf16>"):
        apply_patterns_greedily(module, [Retype()])


def test_erasing_a_used_op_through_the_rewriter_is_an_error():
    class EraseProducer(RewritePattern):
        root = "test.neg"

        def match_and_rewrite(self, op, rewriter):
            rewriter.erase_op(op)
            return True

    module, b, (x,) = new_module()
    finish(b, unary(b, "test.neg", x, 3))
    with pytest.raises(RewriteError, match=r"cannot erase 'test.neg': result #0 \(tensor<4xf32>\) is still used "
                                           r"by 'tessera.return' \(at test.py:99\)"):
        apply_patterns_greedily(module, [EraseProducer()])


def test_replace_op_checks_the_number_of_values():
    class Wrong(RewritePattern):
        root = "test.neg"

        def match_and_rewrite(self, op, rewriter):
            rewriter.replace_op(op, [])
            return True

    module, b, (x,) = new_module()
    finish(b, unary(b, "test.neg", x, 3))
    with pytest.raises(RewriteError, match="has 1 result\\(s\\) but 0 replacement value\\(s\\)"):
        apply_patterns_greedily(module, [Wrong()])


def test_driver_arguments_are_checked():
    module, _, _ = new_module()
    with pytest.raises(RewriteError, match="is not a RewritePattern"):
        apply_patterns_greedily(module, [object()])
    with pytest.raises(RewriteError, match="max_iterations must be >= 1"):
        apply_patterns_greedily(module, [], max_iterations=0)
    with pytest.raises(NotImplementedError):
        RewritePattern().match_and_rewrite(module, None)


def test_a_dead_chain_longer_than_the_iteration_limit_goes_in_one_step():
    """An unused chain of 14 ops (more than max_iterations) is erased, not a RewriteError."""
    import numpy as np

    import tessera_ref as tr
    from tessera_ref import op

    def f(x):
        y = x
        for _ in range(14):
            y = op.exp(y)
        return x * 2.0

    g = tr.jit(f)
    assert np.array_equal(np.asarray(g(np.ones(2, np.float32))), np.full(2, 2.0, np.float32))
    assert "exp" not in g.inspect_ir("graph")
