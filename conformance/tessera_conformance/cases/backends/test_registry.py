"""BACKEND-REG-1: the registry — built-in and entry-point backends, loaded on first use, one
shared instance per name, errors that name what to do, ``tessera-ref backends``."""
import re
import sys

import numpy as np
import pytest

from tessera_ref import backends, op
from tessera_ref.cli import main as cli_main
from tessera_ref.errors import BackendError
from tessera_conformance import ORACLE, assert_bits, clause, eager

from ._reference import Spy


def _slug(backend: str) -> str:
    return re.sub(r"\W", "_", backend)


def _distribution(root, module: str, entry: str, target: str, source: str):
    """A directory that, on sys.path, is an installed distribution declaring ``entry = target``
    in the group ``tessera_ref.backends``, with the module ``module`` written from ``source``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{module}.py").write_text(source)
    info = root / f"{module}-0.1.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[tessera_ref.backends]\n{entry} = {target}\n")
    return root


@clause("BACKEND-REG-1")
def test_the_backend_under_test_and_interp_are_listed(backend):
    """``available()`` lists ``"interp"`` and the backend under test; ``get`` returns one shared
    instance per name; a Backend object is returned as is."""
    names = backends.available()
    assert ORACLE in names and backend in names
    one = backends.get(backend)
    assert isinstance(one, backends.Backend) and backends.get(backend) is one and backends.get(one) is one


@clause("BACKEND-REG-1")
def test_an_entry_point_is_loaded_on_first_use(backend, tmp_path, monkeypatch):
    """A distribution's entry point appears in ``available()`` without being imported; the
    first ``get`` loads it; it then runs programs with the backend under test's bits."""
    slug = _slug(backend)
    module, entry = f"conf_ep_{slug}", f"conf-ep-{slug}"
    source = ("from tessera_conformance.cases.backends._reference import Spy\n\n"
              f"def make():\n    return Spy({backend!r}, name={entry!r})\n")
    root = _distribution(tmp_path / "site", module, entry, f"{module}:make", source)
    monkeypatch.syspath_prepend(str(root))
    assert entry in backends.available()
    assert module not in sys.modules
    ep = backends.get(entry)
    assert module in sys.modules and backends.get(entry) is ep and ep.name == entry
    x = np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4)
    assert_bits(eager(entry, lambda: op.matmul(x, x.T) - 1.0), eager(backend, lambda: op.matmul(x, x.T) - 1.0))
    assert ep.counts["op"] >= 2


@clause("BACKEND-REG-1")
def test_a_broken_entry_point_is_a_backend_error(backend, tmp_path, monkeypatch):
    """An entry point that fails to import is a BackendError naming it and what to do."""
    slug = _slug(backend)
    entry = f"conf-broken-{slug}"
    root = _distribution(tmp_path / "broken", f"conf_broken_{slug}", entry, "no_such_module_anywhere:Backend", "")
    monkeypatch.syspath_prepend(str(root))
    assert entry in backends.available()
    with pytest.raises(BackendError) as info:
        backends.get(entry)
    assert entry in str(info.value) and info.value.fix


@pytest.mark.parametrize("kind", ["class", "instance", "factory"])
@clause("BACKEND-REG-1")
def test_register_in_process(backend, kind):
    """``register`` takes a Backend subclass, an instance or a callable returning one; a name is
    registered once."""
    name = f"conf-reg-{kind}-{_slug(backend)}"
    inner = backend

    class Sub(Spy):
        def __init__(self):
            super().__init__(inner, name=name)

    factory = {"class": Sub, "instance": Sub(), "factory": lambda: Sub()}[kind]
    backends.register(name, factory)
    got = backends.get(name)
    assert isinstance(got, Sub) and backends.get(name) is got and name in backends.available()
    with pytest.raises(BackendError):
        backends.register(name, factory)


@clause("BACKEND-REG-1")
def test_unknown_names_and_non_backends_are_backend_errors(backend):
    """An unknown name names the known ones; an object that is not a Backend is refused."""
    with pytest.raises(BackendError) as info:
        backends.get("no-such-backend")
    assert "no-such-backend" in str(info.value) and ORACLE in info.value.fix and backend in info.value.fix
    name = f"conf-not-a-backend-{_slug(backend)}"
    backends.register(name, lambda: object())
    with pytest.raises(BackendError) as info:
        backends.get(name)
    assert name in str(info.value) and info.value.fix
    with pytest.raises(BackendError):
        with backends.use("no-such-backend"):
            pass


@clause("BACKEND-REG-1")
def test_the_backends_command(backend, capsys):
    """``tessera-ref backends`` lists each backend with its origin and description."""
    assert cli_main(["backends"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines() if line.strip()}
    assert ORACLE in lines and backend in lines
    assert backends.get(backend).description.split()[0] in out
