"""The numeric environment settings (MESH-MP-8), checked in one place: every value that is not
a number, not finite or out of range is an error naming the variable, its value and the fix;
and no module of the package reads a numeric variable of the environment by itself."""
from __future__ import annotations

import ast
import math
from pathlib import Path

import pytest

import tessera_ref
from tessera_ref.dist.world import world
from tessera_ref.errors import BackendError, MeshError
from tessera_ref.settings import TIMEOUT_RANGE, comm_timeout, integer, port, seconds


@pytest.mark.parametrize("text, words", [
    ("nan", "is not a finite number of seconds"), ("inf", "is not a finite number of seconds"),
    ("-inf", "is not a finite number of seconds"), ("abc", "is not a number of seconds"),
    ("", "is not a number of seconds"), ("0", "out of range: under 1 s"), ("-1", "out of range: under 1 s"),
    ("0.001", "out of range: under 1 s"), ("1e12", "out of range: more than 604800 s"),
])
def test_a_bad_wait_names_the_variable_its_value_and_the_fix(text, words):
    with pytest.raises(BackendError) as caught:
        seconds("TESSERA_COMM_TIMEOUT", text)
    assert f"TESSERA_COMM_TIMEOUT={text!r} " in caught.value.what and words in caught.value.what
    assert caught.value.fix.startswith("set TESSERA_COMM_TIMEOUT to a number of seconds from 1 to 604800")


@pytest.mark.parametrize("env, want", [({}, 120.0), ({"TESSERA_COMM_TIMEOUT": ""}, 120.0),
                                       ({"TESSERA_COMM_TIMEOUT": "2.5"}, 2.5),
                                       ({"TESSERA_COMM_TIMEOUT": " 1 "}, 1.0),
                                       ({"TESSERA_COMM_TIMEOUT": "604800"}, 604800.0)])
def test_a_good_wait_is_its_number_and_unset_is_120_s(env, want):
    assert comm_timeout(env) == want
    assert TIMEOUT_RANGE[0] <= want <= TIMEOUT_RANGE[1] and math.isfinite(want)


@pytest.mark.parametrize("text, ok", [("0", True), ("7", True), (" 3 ", True), ("-1", False), ("1.5", False),
                                      ("x", False), ("", False), ("1e3", False)])
def test_integers_are_whole_numbers_in_range(text, ok):
    if ok:
        assert integer("LOCAL_RANK", text, 0) == int(text)
    else:
        with pytest.raises(BackendError, match="LOCAL_RANK="):
            integer("LOCAL_RANK", text, 0)


@pytest.mark.parametrize("text, ok", [("1", True), ("65535", True), ("0", False), ("65536", False),
                                      ("-5", False), ("29500.0", False)])
def test_ports_are_1_to_65535(text, ok):
    if ok:
        assert port("MASTER_PORT", text) == int(text)
    else:
        with pytest.raises(BackendError, match="set MASTER_PORT to a free TCP port"):
            port("MASTER_PORT", text)


@pytest.mark.parametrize("env, words", [
    ({"TESSERA_DEVICES_PER_PROCESS": "0"}, "TESSERA_DEVICES_PER_PROCESS='0' is out of range"),   # one process too
    ({"RANK": "-1", "WORLD_SIZE": "2"}, "RANK='-1' is out of range"),
    ({"RANK": "0", "WORLD_SIZE": "0"}, "WORLD_SIZE='0' is out of range"),
    ({"PMI_RANK": "0", "PMI_SIZE": "two"}, "PMI_SIZE='two' is not an integer"),
])
def test_the_world_variables_are_checked_as_mesh_errors(env, words):
    with pytest.raises(MeshError, match=words):
        world(env)


def test_no_module_reads_a_numeric_environment_variable_by_itself():
    """Every ``int(...)``/``float(...)`` of ``os.environ`` or an ``env`` mapping lives in
    ``tessera_ref.settings`` (an independent check by reading the source)."""
    package = Path(tessera_ref.__file__).parent
    found = []
    for path in package.rglob("*.py"):
        if path.name == "settings.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) in ("int", "float") and any(
                    "environ" in ast.unparse(a) or ast.unparse(a).startswith(("env[", "env.get(")) for a in node.args):
                found.append(f"{path.relative_to(package)}:{node.lineno}: {ast.unparse(node)}")
    assert found == []
