"""The package's layers (DESIGN §4): every import of ``tessera_ref`` — at module level and
inside functions — goes to a lower layer or stays inside its own unit; none goes up, none
sideways to another unit of its layer. No ``importlib`` tricks and no class-name comparisons
stand in for an import. The checker reads the source with :mod:`ast`; it imports nothing.
"""
from __future__ import annotations

import ast
import textwrap
from pathlib import Path

import tessera_ref

#: The layers, lowest first; each is a list of units. A unit is a module or package of
#: ``tessera_ref`` (relative dotted name) with everything under it, or a tuple of those that
#: form one unit; imports inside a unit are free. ``backends.*`` is one unit per executor under
#: ``backends/`` (cuda, mpi, …); ``backends`` itself is the interfaces (``__init__``, ``base``) and
#: what every executor's communicator builds on (``p2p``: the collectives over any transport);
#: ``runtime`` (programs compiled once on a device) sits above them and below the executors.
#: ``gpucheck`` (``tessera-ref gpu-check``) drives the executors and the interpreter against each
#: other, so it sits above them. The top is the application: the ``cli`` package and the top-level modules (``__init__``:
#: the package ``tessera_ref`` itself) — one unit, as the command runs the demo and user files.
LAYERS = [
    ["errors", "context", "counters"],
    ["cache", "settings"],
    ["numerics"],
    ["sim"],
    ["ir"],
    ["ops"],
    ["dist"],
    ["frontend"],
    ["autodiff"],
    ["optim"],
    ["lowering"],
    [("backends", "backends.base", "backends.registry", "backends.p2p")],
    ["runtime"],
    ["checkpoint"],
    ["interp", "backends.*"],
    ["gpucheck"],
    [("cli", "__init__", "__main__", "op", "graph", "demo", "runner")],
]

PACKAGE = Path(tessera_ref.__file__).parent


def unit_of(module: str, layers) -> tuple[int, object, str] | None:
    """``(layer, unit, member)`` of ``module`` (dotted, relative to the package; ``""`` is its
    ``__init__``): ``member`` is the most specific name in ``layers`` that holds it
    (``backends.*`` is each sub-package of ``backends`` not named elsewhere). ``None`` when none does."""
    parts = module.split(".") if module else ["__init__"]
    best = None
    for level, units in enumerate(layers):
        for unit in units:
            for member in (unit if isinstance(unit, tuple) else (unit,)):
                if member == "backends.*":
                    if parts[0] == "backends" and len(parts) > 1:
                        name = f"backends.{parts[1]}"
                        found = (2, level, name, name)
                    else:
                        continue
                elif parts[:member.count(".") + 1] == member.split("."):
                    found = (member.count(".") + 1 + 0.5, level, unit, member)  # a named member beats backends.*
                else:
                    continue
                if best is None or found[0] > best[0]:
                    best = found
    return None if best is None else best[1:]


def modules_of(root: Path) -> dict[str, Path]:
    """Every module of the package at ``root``, by relative dotted name (``""`` for its ``__init__``)."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports_of(module: str, tree: ast.Module, package: str, modules) -> list[tuple[int, str]]:
    """``(line, imported module)`` for every import of ``package`` in ``tree``, the source of
    ``module`` (a key of ``modules``), relative names resolved; ``from X import name`` imports
    the submodule ``X.name`` when there is one."""
    here = module.split(".") if module else []
    if not str(modules[module]).endswith("__init__.py"):
        here = here[:-1]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = here[:len(here) - node.level + 1] + (node.module.split(".") if node.module else [])
                base = ".".join([package, *base])
            else:
                base = node.module
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}"[len(package) + 1:] in modules else base
                       for a in node.names]
        else:
            continue
        for target in targets:
            if target == package or target.startswith(package + "."):
                found.add((node.lineno, target[len(package) + 1:]))
    return sorted(found)


def dodges(tree: ast.Module, package: str) -> list[tuple[int, str]]:
    """``(line, what)`` for the import tricks in ``tree``: ``__import__``, ``import_module`` of
    a ``package`` module named in a string, a class's ``__name__`` compared with a string."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "attr", getattr(node.func, "id", None))
            if name == "__import__" or name == "import_module" and any(
                    isinstance(c, ast.Constant) and isinstance(c.value, str) and c.value.startswith((package, "."))
                    for arg in node.args for c in ast.walk(arg)):
                found.append((node.lineno, f"{name}() instead of an import statement"))
        elif isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(isinstance(s, ast.Attribute) and s.attr == "__name__" for s in sides) and any(
                    isinstance(c, ast.Constant) and isinstance(c.value, str) for s in sides for c in ast.walk(s)):
                found.append((node.lineno, "a class name compared with a string"))
    return sorted(found)


def violations(root: Path, package: str, layers) -> list[str]:
    """``file:line  importer -> imported`` for every upward or sideways import (and unknown
    unit or import trick) in the package at ``root``."""
    modules = modules_of(root)
    out = []
    for module, path in modules.items():
        where = path.relative_to(root.parent)
        mine = unit_of(module, layers)
        if mine is None:
            out.append(f"{where}:1  {module or package} is in no layer: add it to LAYERS")
            continue
        tree = ast.parse(path.read_text(), str(path))
        found = dodges(tree, package)
        for line, target in imports_of(module, tree, package, modules):
            theirs = unit_of(target, layers)
            if theirs is None:
                found.append((line, f"{mine[2]} -> {target} (in no layer)"))
            elif theirs[1] != mine[1] and theirs[0] >= mine[0]:
                kind = "sideways" if theirs[0] == mine[0] else "upward"
                found.append((line, f"{mine[2]} -> {theirs[2]}  ({kind}: {package}.{target})"))
        out += [f"{where}:{line}  {what}" for line, what in sorted(found)]
    return out


def test_imports_flow_downward():
    found = violations(PACKAGE, "tessera_ref", LAYERS)
    assert not found, "imports against the layering (DESIGN §4):\n" + "\n".join(found)


def test_every_unit_of_the_table_exists():
    modules = modules_of(PACKAGE)
    for units in LAYERS:
        for unit in units:
            for member in (unit if isinstance(unit, tuple) else (unit,)):
                name = {"backends.*": "backends", "__init__": ""}.get(member, member)
                assert name in modules, f"LAYERS names {member!r}, which is no module of tessera_ref"


def _fake_package(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        path = root / "fake" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return root / "fake"


FAKE_LAYERS = [["base"], ["low", "side"], ["high"]]


def test_the_checker_reports_a_planted_upward_import(tmp_path):
    root = _fake_package(tmp_path, {
        "__init__.py": "",
        "base.py": "",
        "low/__init__.py": "from . import impl\nfrom .. import base\n",
        "low/impl.py": "import os\nfrom ..base import x\n\ndef f():\n    from ..high import y\n",
        "side.py": "from fake.low import impl\n",
        "high.py": "from . import low, base\n",
    })
    found = violations(root, "fake", FAKE_LAYERS + [["__init__"]])
    assert found == ["fake/low/impl.py:5  low -> high  (upward: fake.high)",
                     "fake/side.py:1  side -> low  (sideways: fake.low.impl)"]


def test_relative_imports_and_submodules_are_resolved(tmp_path):
    root = _fake_package(tmp_path, {
        "__init__.py": "from . import low\n",
        "base.py": "",
        "low/__init__.py": "from . import impl\nfrom .. import base\nfrom .impl import x\nimport fake.high as h\n",
        "low/impl.py": "from . import x\nfrom .. import low, base\n",
        "high.py": "",
    })
    modules = modules_of(root)
    assert sorted(modules) == ["", "base", "high", "low", "low.impl"]

    def imports(name):
        return imports_of(name, ast.parse(modules[name].read_text()), "fake", modules)
    assert imports("") == [(1, "low")]
    assert imports("low") == [(1, "low.impl"), (2, "base"), (3, "low.impl"), (4, "high")]
    assert imports("low.impl") == [(1, "low"), (2, "base"), (2, "low")]


def test_the_checker_reports_tricks_and_unknown_modules(tmp_path):
    root = _fake_package(tmp_path, {
        "base.py": 'import importlib\nm = importlib.import_module("fake.high")\nn = __import__("json")\n',
        "low.py": 'def is_it(x):\n    return type(x).__name__ == "High"\n',
        "high.py": 'if __name__ == "__main__":\n    pass\n',
        "stray.py": "",
    })
    found = violations(root, "fake", FAKE_LAYERS)
    assert found == ["fake/base.py:2  import_module() instead of an import statement",
                     "fake/base.py:3  __import__() instead of an import statement",
                     "fake/low.py:2  a class name compared with a string",
                     "fake/stray.py:1  stray is in no layer: add it to LAYERS"]
