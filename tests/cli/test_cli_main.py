"""The ``tessera-ref`` command as a whole (tessera_ref/cli/__init__.py): its entry points."""
import importlib
import subprocess
import sys
import tomllib
from pathlib import Path

from tessera_ref import __version__
from tessera_ref.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _run(module, *args):
    return subprocess.run([sys.executable, "-m", module, *args], capture_output=True, text=True)


def test_version_and_help():
    out = _run("tessera_ref.cli", "--version")
    assert out.returncode == 0 and out.stdout.strip() == f"tessera-ref {__version__}"
    out = _run("tessera_ref.cli", "--help")
    assert out.returncode == 0
    for command in ["formats", "ops", "run", "demo", "sim", "backends"]:
        assert f"    {command} " in out.stdout


def test_python_dash_m_tessera_ref_is_the_command():
    for args in [("--version",), ("formats", "--json"), ("sim", "--presets")]:
        package, command = _run("tessera_ref", *args), _run("tessera_ref.cli", *args)
        assert package.returncode == 0, package.stderr
        assert (package.stdout, package.stderr) == (command.stdout, command.stderr)


def test_the_console_script_is_main():
    target = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]["tessera-ref"]
    module, _, name = target.partition(":")
    assert getattr(importlib.import_module(module), name) is main


def test_no_command_prints_the_help(capsys):
    assert main([]) == 0
    assert capsys.readouterr().out.startswith("usage: tessera-ref")

