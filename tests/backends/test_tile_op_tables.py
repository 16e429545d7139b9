"""DESIGN §9: every Tile IR op has an interpreter handler and a CUDA renderer rule, or a
stated reason why it has none; both executors' tables are keyed by the Tile IR op names."""
import pytest

from tessera_ref.backends.cuda.render import NO_RULE, RULES, emit_cuda
from tessera_ref.errors import LoweringError
from tessera_ref.interp.tile.executor import HANDLERS, NO_HANDLER
from tessera_ref.ir import OPS
from tessera_ref.ir import tile as T

TILE_OPS = {name for name in OPS if name.startswith(f"{T.DIALECT}.")}


@pytest.mark.parametrize("table,refused", [(HANDLERS, NO_HANDLER), (RULES, NO_RULE)], ids=["interp", "cuda"])
def test_every_tile_op_has_an_entry_or_a_stated_reason(table, refused):
    assert len(TILE_OPS) > 20 and T.YIELD in TILE_OPS
    assert not set(table) & set(refused)
    assert set(table) | set(refused) == TILE_OPS
    assert all(isinstance(why, str) and why for why in refused.values())


def test_an_op_without_a_rule_is_refused_with_its_reason():
    kb = T.KernelBuilder("k", [("x", T.buffer((8, 8), "f32")), ("y", T.buffer((8, 1), "f32"), True)])
    x, y = kb.params
    kb.frag_store(y, kb.reduce(kb.frag_load(x), "sum", 1))
    with pytest.raises(LoweringError, match="no rule for 'tessera.tile.reduce': a fragment reduction"):
        emit_cuda(kb.finish())
