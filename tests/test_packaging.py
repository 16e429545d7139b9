"""Packaging (issue 19, item 5): the dependencies are what the package imports, the license
file and SPDX expression are there, the package is typed, the sdist carries tests, docs and
examples, and ``python -m tessera_ref`` runs."""
from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _imported_top_level_modules(package: pathlib.Path) -> set:
    names = set()
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names


def _requirement_names(requirements) -> set:
    return {r.split(";")[0].split(">")[0].split("=")[0].split("<")[0].strip().lower() for r in requirements}


def test_scipy_is_a_test_dependency_only_because_no_package_module_imports_it():
    assert "scipy" not in _imported_top_level_modules(ROOT / "tessera_ref")
    assert "scipy" not in _requirement_names(PROJECT["dependencies"])
    assert "scipy" in _requirement_names(PROJECT["optional-dependencies"]["test"])


def test_every_third_party_import_of_the_package_is_a_dependency_or_optional():
    imported = _imported_top_level_modules(ROOT / "tessera_ref") - set(sys.stdlib_module_names) - {"tessera_ref"}
    # imported lazily for optional features: cupy and its cupy_backends (GPU backend), pytest (the
    # conformance extra), matplotlib (the plot extra), mpi4py (the mpi extra), torch (a baseline of
    # the GPU check's speed stage, when installed: the bench extra)
    declared = _requirement_names(PROJECT["dependencies"]) | {"cupy", "cupy_backends", "pytest", "tessera_conformance",
                                                              "matplotlib", "mpi4py", "torch"}
    assert imported <= declared, imported - declared


def test_mpi4py_and_the_mpi_runtime_are_the_mpi_extra_and_test_dependencies():
    for extra in ("mpi", "test"):  # the multi-process tests run real ranks in CI
        assert {"mpi4py", "mpich"} <= _requirement_names(PROJECT["optional-dependencies"][extra])
    assert "mpi4py" not in _requirement_names(PROJECT["dependencies"])


def test_matplotlib_is_the_plot_extra_and_a_test_dependency():
    assert "matplotlib" not in _requirement_names(PROJECT["dependencies"])
    assert "matplotlib" in _requirement_names(PROJECT["optional-dependencies"]["plot"])
    assert "matplotlib" in _requirement_names(PROJECT["optional-dependencies"]["test"])  # plot tests run in CI


def test_the_license_file_and_spdx_expression():
    assert PROJECT["license"] == "Apache-2.0" and PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License") and "Version 2.0, January 2004" in text


def test_the_package_is_typed():
    assert (ROOT / "tessera_ref" / "py.typed").exists()
    data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "py.typed" in data["tessera_ref"]


def test_the_sdist_manifest_carries_tests_docs_and_examples():
    lines = (ROOT / "MANIFEST.in").read_text().splitlines()
    for folder in ("tests", "docs", "examples"):
        assert f"graft {folder}" in lines
    assert any(line.startswith("include LICENSE") for line in lines)


def test_python_dash_m_tessera_ref_runs_the_command():
    done = subprocess.run([sys.executable, "-m", "tessera_ref", "--version"], capture_output=True, text=True,
                          cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0 and "tessera" in done.stdout.lower()
