"""Running user scripts written against ``import tessera`` (DESIGN §10).

:func:`tessera_alias` installs an import hook under which ``tessera`` and every
``tessera.<sub>`` resolve to ``tessera_ref`` and ``tessera_ref.<sub>`` (the same module
objects), so the programming guide's snippets (``from tessera import op, graph``) run as
written; :func:`run_path` runs a file under it, as ``tessera-ref run FILE`` does, in a
``dist.mailbox_scope`` of its own.
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.abc
import importlib.util
import runpy
import sys

from .dist import mailbox_scope

__all__ = ["tessera_alias", "run_path"]


class _AliasLoader(importlib.abc.Loader):
    def __init__(self, target: str):
        self.target = target

    def create_module(self, spec):
        return importlib.import_module(self.target)

    def exec_module(self, module) -> None:
        """The target module is already executed."""


class _AliasFinder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname != "tessera" and not fullname.startswith("tessera."):
            return None
        real = "tessera_ref" + fullname[len("tessera"):]
        if importlib.util.find_spec(real) is None:
            return None
        return importlib.util.spec_from_loader(fullname, _AliasLoader(real))


@contextlib.contextmanager
def tessera_alias():
    """While active, ``import tessera[.x]`` gives ``tessera_ref[.x]``."""
    finder = _AliasFinder()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n == "tessera" or n.startswith("tessera.")]:
            del sys.modules[name]


def run_path(path: str, argv: list[str] | None = None) -> dict:
    """Run the Python file ``path`` as ``__main__`` with the ``tessera`` alias; returns its globals.
    A tensor it sends and never receives is a :class:`~tessera_ref.errors.CollectiveError` at its end."""
    saved = sys.argv
    sys.argv = [path, *(argv or [])]
    try:
        with tessera_alias(), mailbox_scope():
            return runpy.run_path(path, run_name="__main__")
    finally:
        sys.argv = saved
