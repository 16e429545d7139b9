"""LOWER-FAMILY-1: the kernel families are registered objects, each complete, and the
lowering's errors list them from the registry."""
import numpy as np
import pytest

import tessera_ref as t
from tessera_ref import op
from tessera_ref.errors import LoweringError
from tessera_ref.ir import schedule as S
from tessera_ref.lowering import lower
from tessera_ref.lowering.family import FAMILIES, KernelFamily, register_family
from tessera_ref.ops import PRIMITIVES


def test_every_family_is_complete():
    assert list(FAMILIES) == ["matmul", "rows", "elementwise", "attention", "random"]
    for family in FAMILIES.values():
        assert set(family.defaults) == set(S.SCHEDULE_ATTRS) - {"op"}, family
        assert set(family.uses) <= set(family.defaults), family
        assert all(callable(f) for f in (family.fit, family.template, family.cost)), family
        assert family.ops() and family.scope


def test_a_primitive_joins_one_family_and_a_family_registers_once():
    matmul = FAMILIES["matmul"]
    other = KernelFamily("other", matmul.defaults, matmul.uses, matmul.fit, matmul.template, matmul.cost,
                         matmul.staged, matmul.scope)
    with pytest.raises(LoweringError, match="matmul cannot join the other family: it is in the matmul family"):
        register_family(other, [PRIMITIVES["matmul"]])
    with pytest.raises(LoweringError, match="'matmul' is already registered"):
        register_family(matmul, [])
    assert "other" not in FAMILIES and PRIMITIVES["matmul"].kernel_family is matmul


def test_the_no_lowering_error_lists_the_registered_families():
    g = t.jit(lambda x: op.transpose(x, (1, 0)))
    x = np.ones((4, 8), np.float32)
    g(x)
    with pytest.raises(LoweringError, match="'tessera.graph.transpose' has no tile lowering") as info:
        lower(g.trace(x))
    for family in FAMILIES.values():
        assert f"{family.name}: {', '.join(family.ops())} ({family.scope})" in info.value.fix
