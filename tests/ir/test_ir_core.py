"""Values, operations, blocks, regions, modules and the builder."""
import pytest

from ir_testing import F32, finish, new_module, unary
from tessera_ref.ir import (
    Block,
    Builder,
    IndexType,
    IRError,
    Module,
    Operation,
    Region,
    TensorType,
    Value,
    func_op,
    verify,
)


def test_create_records_results_and_uses():
    block = Block([F32, F32])
    x, y = block.args
    op = Operation.create("test.add", [x, y], [F32], {"k": 1}, location="m.py:3")
    assert op.operands == (x, y) and op.result.type == F32
    assert op.result.op is op and op.result.index == 0 and op.result.defining_op is op
    assert x.uses == ((op, 0),) and y.uses == ((op, 1),) and x.users == [op]
    assert x.defining_op is None and x.block is block and (x.index, y.index) == (0, 1)
    twice = Operation.create("test.add", [x, x], [F32])
    assert x.uses == ((op, 0), (twice, 0), (twice, 1)) and x.users == [op, twice]
    assert repr(op) == "<Operation 'test.add' at m.py:3>"


def test_set_operand_and_replace_all_uses_keep_use_lists_right():
    block = Block([F32, F32])
    x, y = block.args
    op = Operation.create("test.add", [x, x], [F32])
    op.set_operand(1, y)
    assert op.operands == (x, y) and x.uses == ((op, 0),) and y.uses == ((op, 1),)
    x.replace_all_uses_with(y)
    assert op.operands == (y, y) and not x.has_uses and y.uses == ((op, 0), (op, 1))
    other = Operation.create("test.neg", [y], [F32])
    op.replace_all_uses_with([x])  # op has no users: nothing happens
    consumer = Operation.create("test.neg", [op.result], [F32])
    op.replace_all_uses_with(other.results)
    assert consumer.operands == (other.result,)
    with pytest.raises(IRError, match="has 1 results but 2 replacement values"):
        op.replace_all_uses_with([x, y])


def test_erase_refuses_used_results_and_drops_operand_uses():
    module, b, (x,) = new_module()
    n1 = unary(b, "test.neg", x, 2)
    n2 = unary(b, "test.neg", n1, 3)
    finish(b, n2)
    with pytest.raises(IRError, match=r"cannot erase 'test.neg' \(at test.py:2\): result #0 "
                                      r"\(tensor<4xf32>\) is still used by 'test.neg' \(at test.py:3\)"):
        n1.op.erase()
    n2.replace_all_uses_with(n1)
    n2.op.erase()
    assert n2.op.parent is None and n1.uses == ((module.lookup("f").regions[0].entry.last_op, 0),)
    assert [op.name for op in module.lookup("f").regions[0].entry] == ["test.neg", "tessera.return"]
    verify(module)


def test_erasing_a_region_op_drops_the_uses_made_inside_it():
    block = Block([F32])
    (x,) = block.args
    inner = Block()
    Builder(inner).create("test.neg", [x], [F32])
    holder = block.append(Operation.create("rand.holder", regions=[Region([inner])]))
    assert x.has_uses
    holder.erase()
    assert not x.has_uses and block.first_op is None


def test_block_insertion_iteration_and_detach():
    block = Block()
    a = block.append(Operation.create("rand.a"))
    c = block.append(Operation.create("rand.c"))
    b = block.insert_before(Operation.create("rand.b"), c)
    assert b.name == "rand.b" and b.parent is block
    d = block.insert_after(Operation.create("rand.d"), c)
    assert [op.name for op in block] == ["rand.a", "rand.b", "rand.c", "rand.d"]
    assert block.first_op is a and block.last_op is d
    for op in block:  # erasing the op being visited is allowed
        if op.name in ("rand.b", "rand.d"):
            op.erase()
    assert block.ops == [a, c]
    c.detach()
    assert block.ops == [a] and c.parent is None
    with pytest.raises(IRError, match="already in a block"):
        Block().append(a)
    with pytest.raises(IRError, match="is not an op of this block"):
        block.insert_before(Operation.create("rand.x"), c)
    with pytest.raises(IRError, match="cannot be nested"):
        block.append(Module())


def test_clone_copies_regions_and_remaps_values():
    block = Block([F32])
    (x,) = block.args
    body = Block([IndexType()])
    body.args[0].name = "i"
    inner = Builder(body).create("test.add", [x, x], [F32], {"k": [1, 2]}, location="m.py:9")
    loop = block.append(Operation.create("rand.loop", [x], [F32], {"n": 4}, [Region([body])], "m.py:8"))
    loop.result.name = "r"
    y = Block([F32]).args[0]
    mapping = {x: y}
    copy = loop.clone(mapping)
    assert copy is not loop and copy.parent is None and copy.operands == (y,)
    assert copy.attributes == loop.attributes and copy.attributes is not loop.attributes
    assert copy.location == "m.py:8" and copy.result.name == "r" and mapping[loop.result] is copy.result
    new_body = copy.regions[0].entry
    assert new_body is not body and new_body.args[0].name == "i" and mapping[body.args[0]] is new_body.args[0]
    new_inner = new_body.first_op
    assert new_inner.operands == (y, y) and mapping[inner.result] is new_inner.result
    assert str(loop.clone()) == str(loop)
    assert type(Module().clone()) is Module


def test_walk_is_pre_order():
    module, b, (x,) = new_module()
    inner = Block()
    Builder(inner).create("rand.inner")
    b.create("rand.outer", regions=[Region([inner])])
    finish(b)
    assert [op.name for op in module.walk()] == [
        "tessera.module", "tessera.func", "rand.outer", "rand.inner", "tessera.return"]


def test_parent_navigation():
    module, b, (x,) = new_module()
    n = unary(b, "test.neg", x, 2)
    func = module.lookup("f")
    assert n.op.parent_op is func and func.parent_op is module and module.parent_op is None
    assert n.op.parent.parent_op is func and func.regions[0].parent is func
    assert module.lookup("missing") is None


def test_builder_insertion_points():
    block = Block()
    b = Builder(block)
    first = b.create("rand.first")
    last = b.create("rand.last")
    b.set_insertion_point_before(last)
    b.create("rand.before_last")
    b.set_insertion_point_after(first)
    b.create("rand.after_first")
    b.set_insertion_point_to_end(block)
    b.create("rand.end")
    assert [op.name for op in block] == ["rand.first", "rand.after_first", "rand.before_last", "rand.last",
                                         "rand.end"]
    with pytest.raises(IRError, match="no insertion point"):
        Builder().create("rand.x")
    with pytest.raises(IRError, match="not in a block"):
        b.set_insertion_point_before(Operation.create("rand.loose"))
    b.set_insertion_point_before(last)
    last.detach()
    with pytest.raises(IRError, match="left its block"):
        b.create("rand.x")


@pytest.mark.parametrize("make, message", [
    (lambda: Operation.create("", []), "op name must be a non-empty str"),
    (lambda: Operation.create("rand.x", [1]), "operand of 'rand.x' is not a Value: 1"),
    (lambda: Operation.create("rand.x", [], ["f32"]), "result #0 of 'rand.x' needs an IR type"),
    (lambda: Operation.create("rand.x", location=12), "location is a 'file:line' str"),
    (lambda: Operation.create("rand.x", attributes=[("k", 1)]), "the attributes of 'rand.x' are a dict"),
    (lambda: Block(["f32"]), "a block argument's type must be an IR type"),
    (lambda: Value(F32), "Value is abstract"),
    (lambda: Region([Block()]).blocks[0].parent.append(Region([Block()]).blocks[0]), "fresh Blocks"),
    (lambda: Region().entry, "the region has no blocks"),
    (lambda: Operation.create("rand.x", [], [F32, F32]).result, "has 2 results, not one"),
    (lambda: func_op("f", ["f32"], []), "a function type holds types"),
])
def test_malformed_construction_is_an_ir_error(make, message):
    with pytest.raises(IRError, match=message):
        make()


def test_a_region_belongs_to_one_op_and_bad_input_changes_nothing():
    x = Block([F32]).args[0]
    region = Region([Block()])
    Operation.create("rand.a", regions=[region])
    with pytest.raises(IRError, match="fresh Regions"):
        Operation.create("rand.b", [x], [], None, [region])
    assert not x.has_uses  # the failed op registered no use
    with pytest.raises(IRError, match="not a Value"):
        Operation.create("rand.c", [x, "y"])
    assert not x.has_uses


def test_module_structure():
    module = Module(location="m.py:1")
    assert module.name == "tessera.module" and module.body.first_op is None
    func = module.body.append(func_op("g", [TensorType(("B",), "f32")], []))
    assert module.lookup("g") is func and func.regions[0].entry.args[0].type.shape == ("B",)
