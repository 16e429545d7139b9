"""The verifier: dominance, structure, terminators, builtin ops and registered hooks."""
import pytest

from ir_testing import F32, finish, new_module, unary
from tessera_ref.ir import (
    Block,
    Builder,
    IRError,
    Operation,
    Region,
    TensorType,
    VerifyError,
    func_op,
    parse_module,
    register_op,
    return_op,
    verify,
)
from tessera_ref.ir.registry import OPS, OpInfo

BF16 = TensorType((4,), "bf16")


def verify_error(module) -> VerifyError:
    with pytest.raises(VerifyError) as info:
        verify(module)
    return info.value


def test_a_well_formed_module_verifies():
    module, b, (x,) = new_module()
    finish(b, unary(b, "test.neg", x, 2))
    verify(module)


def test_use_before_definition_names_both_ops_and_the_location():
    module, b, (x,) = new_module()
    first = unary(b, "test.neg", x, 2)
    second = unary(b, "test.neg", first, 3)
    finish(b, second)
    second.op.detach()
    b.set_insertion_point_before(first.op)
    b.insert(second.op)  # now the user comes before its operand's definition
    err = verify_error(module)
    assert err.op_name == "test.neg" and err.location == "test.py:3"
    assert err.detail == ("operand #0 (tensor<4xf32>) is result #0 of 'test.neg' (at test.py:2), "
                          "which is used before its definition")
    assert str(err).startswith("'test.neg' op: operand #0 (tensor<4xf32>) is result #0")
    assert "[at test.py:3]" in str(err)


def test_value_of_an_erased_op_is_reported_as_not_in_the_ir():
    module, b, (x,) = new_module()
    loose = Operation.create("test.neg", [x], [F32], location="gone.py:1")
    finish(b, unary(b, "test.neg", loose.result, 4))
    err = verify_error(module)
    assert "result #0 of 'test.neg' (at gone.py:1), which is not in the IR" in err.detail
    assert err.location == "test.py:4"


def test_values_do_not_cross_isolated_functions():
    module, b, (x,) = new_module()
    finish(b, x)
    other = module.body.append(func_op("g", [], [F32], location="g.py:1"))
    other.regions[0].entry.append(return_op([x], location="g.py:2"))
    err = verify_error(module)
    assert err.op_name == "tessera.return" and err.location == "g.py:2"
    assert "argument #0 of a block of 'tessera.func' (at test.py:1), which is not visible here" in err.detail

    other.regions[0].entry.first_op.erase()
    constant = Builder(module.body, before=other).create("rand.const", [], [F32], location="c.py:1")
    other.regions[0].entry.append(return_op([constant.result], location="g.py:3"))
    err = verify_error(module)
    assert err.location == "g.py:3" and err.detail == (
        "operand #0 (tensor<4xf32>) is result #0 of 'rand.const' (at c.py:1), defined outside the isolated "
        "op 'tessera.func'")


def test_values_of_a_region_are_not_visible_after_it_or_in_sibling_blocks():
    module, b, (x,) = new_module()
    inner = Block()
    hidden = Builder(inner).create("test.neg", [x], [F32], location="in.py:1").result
    b.create("rand.holder", regions=[Region([inner])])
    finish(b, hidden)
    err = verify_error(module)
    assert "which is not visible here" in err.detail and err.op_name == "tessera.return"

    block_a, block_b = Block([F32]), Block()
    Builder(block_b).create("rand.use", [block_a.args[0]], location="b.py:1")
    holder = Operation.create("rand.two_blocks", regions=[Region([block_a, block_b])])
    err = verify_error(holder)
    assert "argument #0 of a block of 'rand.two_blocks'" in err.detail and err.location == "b.py:1"


def test_an_op_cannot_use_its_own_result_inside_its_region():
    block = Block()
    body = Block()
    loop = block.append(Operation.create("rand.loop", [], [F32], regions=[Region([body])]))
    Builder(body).create("rand.use", [loop.result], location="l.py:2")
    err = verify_error(Operation.create("rand.top", regions=[Region([block])]))
    assert err.location == "l.py:2" and "not visible here" in err.detail


def test_registered_hook_reports_type_mismatch_with_types_and_location():
    module, b, (x, y) = new_module(arg_types=(F32, BF16))
    finish(b, b.create("test.add", [x, y], [F32], location="model.py:42").result)
    err = verify_error(module)
    assert err.op_name == "test.add" and err.location == "model.py:42"
    assert err.detail == "operands and result must have one type, got tensor<4xf32>, tensor<4xbf16>, tensor<4xf32>"
    assert err.fix == "convert the operands to a common type first"


def test_hook_errors_survive_a_text_round_trip_with_their_location():
    module, b, (x, y) = new_module(arg_types=(F32, BF16))
    finish(b, b.create("test.add", [x, y], [F32], location="model.py:42").result)
    err = verify_error(parse_module(str(module)))
    assert err.location == "model.py:42" and err.op_name == "test.add"


def test_ir_read_from_text_without_locations_is_verified_at_its_text_line_and_column():
    """Issue 31: IR parsed from text verified "at unknown location" though the parser knew the
    line and column; every parsed op keeps them (not printed, kept by clone), and a loc() wins."""
    module, b, (x, y) = new_module(arg_types=(F32, BF16))
    finish(b, b.create("test.add", [x, y], [F32]).result)
    text = str(module)
    parsed = parse_module(text, "model.mlir")
    line = next(i for i, t in enumerate(text.splitlines(), 1) if '"test.add"' in t)
    column = text.splitlines()[line - 1].index("%") + 1
    err = verify_error(parsed)
    assert err.location == f"model.mlir:{line}:{column}" and str(err).endswith(
        f"[at model.mlir:{line}:{column}]. Fix: convert the operands to a common type first")
    assert verify_error(parsed.clone()).location == err.location and str(parsed) == text
    with_loc = parse_module(text.replace('-> tensor<4xf32>\n', '-> tensor<4xf32> loc("model.py":7:0)\n', 1))
    assert verify_error(with_loc).location == "model.py:7"
    assert repr(next(op for op in parsed.walk() if op.name == "test.add")) == \
        f"<Operation 'test.add' at model.mlir:{line}:{column}>"


def test_terminator_must_be_last():
    module, b, (x,) = new_module()
    finish(b, x)
    b.create("test.neg", [x], [F32], location="late.py:1")
    err = verify_error(module)
    assert err.op_name == "tessera.return" and "is a terminator but is not the last op" in err.detail


def test_builtin_function_rules():
    module, b, (x,) = new_module()
    b.insert(return_op([], location="r.py:1"))
    err = verify_error(module)
    assert err.detail == "returns () but @f is declared to return (tensor<4xf32>)"

    module, b, (x,) = new_module()
    b.create("test.neg", [x], [F32])
    err = verify_error(module)
    assert err.op_name == "tessera.func" and "the body must end with 'tessera.return', ends with 'test.neg'" in err.detail

    module, b, (x,) = new_module()
    finish(b, x)
    module.lookup("f").regions[0].entry.add_argument(F32)
    err = verify_error(module)
    assert "entry block argument types (tensor<4xf32>, tensor<4xf32>) differ from the function's input " \
           "types (tensor<4xf32>)" in err.detail

    module, b, (x,) = new_module()
    finish(b, x)
    module.body.append(func_op("f", [], [], location="dup.py:7")).regions[0].entry.append(return_op())
    err = verify_error(module)
    assert err.detail == "redefines symbol 'f' (first defined at test.py:1)" and err.location == "dup.py:7"

    module, b, (x,) = new_module()
    finish(b, x)
    module.lookup("f").attributes["function_type"] = "()"
    assert "needs a FunctionType attribute 'function_type'" in verify_error(module).detail

    stray = Block()
    stray.append(return_op())
    err = verify_error(Operation.create("rand.holder", regions=[Region([stray])]))
    assert err.detail == "must be in the body of a 'tessera.func', is in 'rand.holder'"


def test_tampering_with_operands_directly_is_caught():
    module, b, (x,) = new_module()
    n = unary(b, "test.neg", x, 2)
    finish(b, n)
    n.op.operands = (n,)  # bypasses set_operand: the use list no longer agrees
    err = verify_error(module)
    assert "is not recorded as a use of its value" in err.detail


def test_hooks_run_after_the_ops_they_contain(monkeypatch):
    seen = []
    monkeypatch.setitem(OPS, "rand.outer", OpInfo("rand.outer", verify=lambda op: seen.append(op.name)))
    monkeypatch.setitem(OPS, "rand.inner", OpInfo("rand.inner", verify=lambda op: seen.append(op.name)))
    inner = Block()
    Builder(inner).create("rand.inner")
    verify(Operation.create("rand.outer", regions=[Region([inner])]))
    assert seen == ["rand.inner", "rand.outer"]


def test_register_op_validates_and_refuses_duplicates(monkeypatch):
    monkeypatch.setattr("tessera_ref.ir.registry.OPS", dict(OPS))
    info = register_op("rand.fresh", side_effects=True)
    assert info.side_effects and not info.terminator
    with pytest.raises(IRError, match="already registered"):
        register_op("rand.fresh")
    with pytest.raises(IRError, match="'dialect.op' strings"):
        register_op("nodot")
    with pytest.raises(IRError, match="must be callable"):
        register_op("rand.bad_hook", verify=3)


def test_verify_takes_an_op():
    with pytest.raises(IRError, match="verify\\(\\) takes an Operation"):
        verify("module")
