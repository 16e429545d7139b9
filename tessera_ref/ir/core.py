"""The IR data structures: values, operations, blocks, regions and the module.

The model is MLIR's:

- An :class:`Operation` has a ``name`` (``"tessera.graph.matmul"``), ``operands`` (values),
  ``results`` (values it defines), ``attributes`` (a dict of attribute values, MLIR's
  properties; see :mod:`tessera_ref.ir.attributes`), ``regions`` and a source
  ``location`` (``"file:line"`` of the user code that created it, or ``None``); an op read
  from text also has a ``text_location`` (``"source:line:column"`` there; not printed).
- A :class:`Region` is a list of blocks (:class:`Block`); a block has typed arguments and a
  sequence of ops. Tessera IR has structured control flow only: blocks do not branch to
  each other, so a value is visible after its definition in its own block and in the
  regions nested there (the verifier's dominance rule).
- A :class:`Value` is an :class:`OpResult` or a :class:`BlockArgument`; it knows its
  ``type`` (:mod:`tessera_ref.ir.types`), its uses and an optional ``name`` hint that the
  printer uses for its SSA name (``%q`` instead of ``%0``).
- A :class:`Module` is the top-level op ``"tessera.module"``: one region of one block
  holding functions and other symbol definitions.

Ops in a block form a doubly linked list, so inserting and erasing are O(1); the uses of
a value are an insertion-ordered dict user op -> number of its operands that are the
value, so adding and dropping a use are O(1).
"""
from __future__ import annotations

from .errors import MAX_NESTING, IRError, VerifyError, too_deep
from .types import Type

__all__ = ["Value", "OpResult", "BlockArgument", "Operation", "Block", "Region", "Module", "MODULE",
           "check_nesting"]

#: Name of the module op.
MODULE = "tessera.module"


class Value:
    """An SSA value: a ``type``, its uses, and an optional printing ``name`` hint.

    Abstract: every value is an :class:`OpResult` or a :class:`BlockArgument`.
    """

    __slots__ = ("type", "name", "_uses")

    def __init__(self, *args, **kwargs):
        raise IRError("Value is abstract", fix="values are op results (Operation.create) or block "
                                               "arguments (Block(arg_types))")

    @property
    def uses(self) -> tuple:
        """``(op, operand_index)`` pairs: users in the order they started using the value,
        operand indices ascending."""
        return tuple((op, i) for op in self._uses for i, v in enumerate(op.operands) if v is self)

    @property
    def users(self) -> list:
        """The distinct ops that use this value, in the order they started using it."""
        return list(self._uses)

    @property
    def has_uses(self) -> bool:
        return bool(self._uses)

    @property
    def defining_op(self) -> "Operation | None":
        """The op whose result this is; ``None`` for a block argument."""
        return None

    def replace_all_uses_with(self, new: "Value") -> None:
        """Make every use of this value use ``new`` instead."""
        if not isinstance(new, Value):
            raise IRError(f"replace_all_uses_with needs a Value, got {new!r}", fix="pass a Value")
        if new is self:
            return
        for op, index in self.uses:
            op.set_operand(index, new)


class OpResult(Value):
    """Result number ``index`` of ``op``."""

    __slots__ = ("op", "index")

    def __init__(self, type: Type, op: "Operation", index: int):
        if not isinstance(type, Type):
            raise IRError(f"result #{index} of '{op.name}' needs an IR type, got {type!r}",
                          fix="build types with TensorType, ScalarType, IndexType or FunctionType")
        self.type = type
        self.name = None
        self._uses = {}
        self.op = op
        self.index = index

    @property
    def defining_op(self) -> "Operation":
        return self.op

    def __repr__(self) -> str:
        return f"<OpResult #{self.index} of '{self.op.name}': {self.type}>"


class BlockArgument(Value):
    """Argument number ``index`` of ``block``."""

    __slots__ = ("block", "index")

    def __init__(self, type: Type, block: "Block", index: int, name: str | None = None):
        if not isinstance(type, Type):
            raise IRError(f"a block argument's type must be an IR type, got {type!r}",
                          fix="build types with TensorType, ScalarType, IndexType or FunctionType")
        self.type = type
        self.name = name
        self._uses = {}
        self.block = block
        self.index = index

    def __repr__(self) -> str:
        return f"<BlockArgument #{self.index}: {self.type}>"


class Operation:
    """One operation. Build with :meth:`create` (or the constructor, same arguments).

    ``operands`` and ``results`` are tuples: change an operand with :meth:`set_operand` so
    that use lists stay right. ``attributes`` is a plain dict (a copy of the one given) that
    may be edited in place.
    ``parent`` is the block holding the op (``None`` while detached).
    """

    __slots__ = ("name", "operands", "results", "attributes", "regions", "location", "text_location", "parent",
                 "_prev", "_next", "__weakref__")  # weak references: the runtime's compiled programs per function

    def __init__(self, name: str, operands=(), result_types=(), attributes: dict | None = None,
                 regions=(), location: str | None = None):
        if type(name) is not str or not name:
            raise IRError(f"an op name must be a non-empty str, got {name!r}",
                          fix='name ops "dialect.op", e.g. "tessera.graph.matmul"')
        operands = tuple(operands)
        for value in operands:
            if not isinstance(value, Value):
                raise IRError(f"operand of '{name}' is not a Value: {value!r}",
                              fix="pass the results of other ops or block arguments")
        if location is not None and type(location) is not str:
            raise IRError(f"an op location is a 'file:line' str or None, got {location!r}",
                          fix="capture it with tessera_ref.errors.user_location()")
        if attributes is not None and not isinstance(attributes, dict):
            raise IRError(f"the attributes of '{name}' are a dict, got {attributes!r}",
                          fix="pass {'name': value, ...}")
        self.name = name
        self.results = tuple([OpResult(t, self, i) for i, t in enumerate(result_types)])
        if regions:
            regions = tuple(regions)
            for region in regions:
                if not isinstance(region, Region) or region.parent is not None:
                    raise IRError(f"'{name}' needs fresh Regions (not yet owned by an op), got {region!r}",
                                  fix="build a new Region for each op")
            for region in regions:
                region.parent = self
        else:
            regions = ()
        for value in operands:
            uses = value._uses
            uses[self] = uses.get(self, 0) + 1
        self.operands = operands
        self.attributes = {} if attributes is None else dict(attributes)
        self.regions = regions
        self.location = location
        self.text_location = None
        self.parent = None
        self._prev = None
        self._next = None

    @classmethod
    def create(cls, name: str, operands=(), result_types=(), attributes: dict | None = None,
               regions=(), location: str | None = None) -> "Operation":
        """A new detached op. ``regions`` are new Region objects; the op takes ownership."""
        return cls(name, operands, result_types, attributes, regions, location)

    # -- navigation -------------------------------------------------------------------
    @property
    def result(self) -> OpResult:
        """The only result (an error unless the op has exactly one)."""
        if len(self.results) != 1:
            raise IRError(f"'{self.name}' has {len(self.results)} results, not one",
                          fix="index op.results instead")
        return self.results[0]

    @property
    def parent_op(self) -> "Operation | None":
        """The op whose region holds this op's block."""
        block = self.parent
        region = block.parent if block is not None else None
        return region.parent if region is not None else None

    def walk(self):
        """Yield this op and every op nested in its regions, in pre-order (text order).

        The IR must not change during the walk; to change it, collect the ops first
        (``list(op.walk())``).
        """
        yield self
        for region in self.regions:
            for block in region.blocks:
                op = block._first
                while op is not None:
                    following = op._next
                    yield from op.walk()
                    op = following

    # -- mutation ---------------------------------------------------------------------
    def set_operand(self, index: int, value: Value) -> None:
        """Use ``value`` as operand number ``index``."""
        if not isinstance(value, Value):
            raise IRError(f"operand of '{self.name}' is not a Value: {value!r}",
                          fix="pass the results of other ops or block arguments")
        operands = list(self.operands)
        uses = operands[index]._uses
        if uses[self] == 1:
            del uses[self]
        else:
            uses[self] -= 1
        operands[index] = value
        value._uses[self] = value._uses.get(self, 0) + 1
        self.operands = tuple(operands)

    def replace_all_uses_with(self, values) -> None:
        """Replace every use of each result by the matching value of ``values``."""
        values = tuple(values)
        if len(values) != len(self.results):
            raise IRError(f"'{self.name}' has {len(self.results)} results but {len(values)} "
                          "replacement values were given", fix="give one value per result")
        for old, new in zip(self.results, values):
            old.replace_all_uses_with(new)

    def detach(self) -> "Operation":
        """Take the op out of its block (it keeps its operands); returns the op."""
        if self.parent is not None:
            self.parent._unlink(self)
        return self

    def erase(self) -> None:
        """Detach the op and drop its operands and those of every nested op.

        Its results must be unused (replace them first).
        """
        for result in self.results:
            if result._uses:
                user = next(iter(result._uses))
                raise IRError(
                    f"cannot erase '{self.name}' (at {self.where}): "
                    f"result #{result.index} ({result.type}) is still used by '{user.name}' (at {user.where})",
                    fix="replace the uses (replace_all_uses_with) or erase the users first")
        self.detach()
        self._drop_references()

    def _drop_references(self) -> None:
        for value in self.operands:
            value._uses.pop(self, None)
        self.operands = ()
        for region in self.regions:
            for block in region.blocks:
                for op in block:
                    op._drop_references()

    def clone(self, mapping: dict | None = None) -> "Operation":
        """A detached deep copy. Operands found in ``mapping`` are replaced by their image;
        ``mapping`` is extended with old results and block arguments -> new ones."""
        check_nesting(self)
        return self._clone({} if mapping is None else mapping)

    def _clone(self, mapping: dict) -> "Operation":
        regions = [region._clone(mapping) for region in self.regions]
        new = Operation.__new__(type(self))
        Operation.__init__(new, self.name, [mapping.get(v, v) for v in self.operands],
                           [r.type for r in self.results], self.attributes, regions,
                           self.location)
        new.text_location = self.text_location
        for old, res in zip(self.results, new.results):
            res.name = old.name
            mapping[old] = res
        return new

    # -- diagnostics ------------------------------------------------------------------
    @property
    def where(self) -> str:
        """Where the op came from, for messages: its ``location``, else ``text_location``
        (``"source:line:column"`` of the text it was parsed from), else ``"unknown location"``."""
        return self.location or self.text_location or "unknown location"

    def emit_error(self, what: str, fix: str | None = None) -> VerifyError:
        """A :class:`VerifyError` about this op (carrying its name and :attr:`where`), to raise."""
        return VerifyError(what, op_name=self.name, location=self.where, fix=fix)

    def __str__(self) -> str:
        from .printer import print_op

        return print_op(self)

    def __repr__(self) -> str:
        return f"<Operation '{self.name}' at {self.where}>"


class Block:
    """Typed arguments and a sequence of ops. Iterating yields the ops in order (an op
    may be erased or moved while it is being visited)."""

    __slots__ = ("args", "parent", "_first", "_last")

    def __init__(self, arg_types=()):
        self.args = tuple([BlockArgument(t, self, i) for i, t in enumerate(arg_types)])
        self.parent: Region | None = None
        self._first: Operation | None = None
        self._last: Operation | None = None

    def add_argument(self, type: Type, name: str | None = None) -> BlockArgument:
        """Append an argument of ``type``; returns it."""
        arg = BlockArgument(type, self, len(self.args), name)
        self.args = self.args + (arg,)
        return arg

    def __iter__(self):
        op = self._first
        while op is not None:
            following = op._next
            yield op
            op = following

    @property
    def ops(self) -> list:
        """The ops, as a new list."""
        return list(self)

    @property
    def first_op(self) -> Operation | None:
        return self._first

    @property
    def last_op(self) -> Operation | None:
        return self._last

    @property
    def parent_op(self) -> Operation | None:
        return self.parent.parent if self.parent is not None else None

    def append(self, op: Operation) -> Operation:
        """Add ``op`` at the end; returns it."""
        return self._link(op, None)

    def insert_before(self, op: Operation, anchor: Operation) -> Operation:
        """Insert ``op`` just before ``anchor`` (an op of this block); returns it."""
        self._check_anchor(anchor)
        return self._link(op, anchor)

    def insert_after(self, op: Operation, anchor: Operation) -> Operation:
        """Insert ``op`` just after ``anchor`` (an op of this block); returns it."""
        self._check_anchor(anchor)
        return self._link(op, anchor._next)

    def _check_anchor(self, anchor: Operation) -> None:
        if not isinstance(anchor, Operation) or anchor.parent is not self:
            raise IRError(f"insertion anchor {anchor!r} is not an op of this block",
                          fix="insert relative to an op of the same block")

    def _link(self, op: Operation, before: Operation | None) -> Operation:
        if not isinstance(op, Operation):
            raise IRError(f"only ops go into a block, got {op!r}", fix="create an Operation")
        if op.parent is not None:
            raise IRError(f"'{op.name}' is already in a block", fix="detach() it first")
        if isinstance(op, Module):
            raise IRError("a module is a top-level op and cannot be nested",
                          fix="move its functions into the outer module")
        prev = self._last if before is None else before._prev
        op._prev, op._next, op.parent = prev, before, self
        if prev is None:
            self._first = op
        else:
            prev._next = op
        if before is None:
            self._last = op
        else:
            before._prev = op
        return op

    def _unlink(self, op: Operation) -> None:
        prev, following = op._prev, op._next
        if prev is None:
            self._first = following
        else:
            prev._next = following
        if following is None:
            self._last = prev
        else:
            following._prev = prev
        op._prev = op._next = op.parent = None

    def _clone(self, mapping: dict) -> "Block":
        new = Block([a.type for a in self.args])
        for old, arg in zip(self.args, new.args):
            arg.name = old.name
            mapping[old] = arg
        for op in self:
            new.append(op._clone(mapping))
        return new


class Region:
    """A list of blocks owned by an op."""

    __slots__ = ("blocks", "parent")

    def __init__(self, blocks=()):
        self.blocks: list[Block] = []
        self.parent: Operation | None = None
        for block in blocks:
            self.append(block)

    def append(self, block: Block) -> Block:
        """Add ``block`` at the end; returns it."""
        if not isinstance(block, Block) or block.parent is not None:
            raise IRError(f"a region takes fresh Blocks (not yet in a region), got {block!r}",
                          fix="build a new Block")
        block.parent = self
        self.blocks.append(block)
        return block

    @property
    def entry(self) -> Block:
        """The first block."""
        if not self.blocks:
            raise IRError("the region has no blocks", fix="append a Block first")
        return self.blocks[0]

    def _clone(self, mapping: dict) -> "Region":
        return Region([block._clone(mapping) for block in self.blocks])


class Module(Operation):
    """The top-level ``"tessera.module"`` op: one region of one block (``body``) holding
    functions and other ops that define symbols (ops with a ``sym_name`` attribute).

    ``str(module)`` is its text; :func:`tessera_ref.ir.parse_module` reads it back.
    """

    __slots__ = ()

    def __init__(self, body: Region | None = None, attributes: dict | None = None,
                 location: str | None = None):
        super().__init__(MODULE, (), (), attributes, [Region([Block()]) if body is None else body],
                         location)

    @property
    def body(self) -> Block:
        return self.regions[0].entry

    def lookup(self, sym_name: str) -> Operation | None:
        """The op of the body whose ``sym_name`` attribute is ``sym_name``, if any."""
        for op in self.body:
            if op.attributes.get("sym_name") == sym_name:
                return op
        return None


def check_nesting(op: Operation) -> None:
    """Raise :class:`IRError` when regions nest more than :data:`MAX_NESTING` deep in ``op``
    (found without recursion, so any depth is reported rather than overflowing the stack)."""
    stack = [(op, 0)]
    while stack:
        current, depth = stack.pop()
        if current.regions and depth >= MAX_NESTING:
            raise IRError(too_deep(f"regions of '{current.name}' (at {current.where}) are"),
                          fix="flatten the program: move deep bodies into functions of their own")
        for region in current.regions:
            for block in region.blocks:
                stack.extend((nested, depth + 1) for nested in block)
