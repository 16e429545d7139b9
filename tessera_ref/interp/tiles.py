"""The backend ``"interp-tiles"``: the kernel path of the interpreter as a device (DESIGN §3, §16).

:class:`TileInterpDevice` is tinygrad's Python emulator in our runtime: its memory is NumPy
arenas, its "compiler" takes the Tile IR module itself, and each launch runs in the tile
interpreter (:func:`tessera_ref.interp.tile.run`) with its race, bounds, uninitialized-read
and barrier checkers on. ``"interp-tiles"`` is :class:`~tessera_ref.runtime.DeviceBackend`
over it: a function is lowered whole (every op with a kernel family a tile kernel), compiled
once and replayed, and its bits must equal the Graph IR interpreter's (LOWER-EXACT-1). An op
without a kernel is a BackendError at compile time unless host steps are allowed. A mesh runs
as on the interpreter, in one process, its local ops as programs on the device.
"""
from __future__ import annotations

from ..backends.registry import register
from ..runtime import Compiler, Device, DeviceBackend, HostAllocator, Kernel
from .communicator import mesh_communicator
from .tile import run as run_tile

__all__ = ["TileInterpDevice", "tile_backend"]


class _Identity(Compiler):
    """The tile interpreter runs Tile IR as it is: the "binary" is the module, one per text."""

    def key(self, source):
        return str(source)

    def _compile(self, source):
        return source


class _TileKernel(Kernel):
    def __init__(self, module, func, checks: bool, counters: bool):
        self.module, self.name = module, func.attributes["sym_name"]
        self.params = len(func.attributes["tile.params"])  # the symbolic sizes after them are not passed
        self.options = dict(checks=checks, counters=counters, preset="H100", on_error="raise")

    def __call__(self, args, grid, block, smem, stream=None, options=None):
        o = {**self.options, **(options or {})}
        return run_tile(self.module, list(args[:self.params]), grid=grid, lanes=block[0], func=self.name,
                        checks=o["checks"], counters=o["counters"], preset=o["preset"], on_error=o["on_error"])


class TileInterpDevice(Device):
    """Launches in the tile interpreter, memory in NumPy (see the module docstring)."""

    name = "interp-tiles"

    def __init__(self, checks: bool = True, counters: bool = False):
        self.checks, self.counters = checks, counters
        self.allocator = HostAllocator(self.name)
        self.compiler = _Identity()

    def render(self, tile_module):
        return tile_module

    def communicator(self, mesh):
        """A mesh's devices all live in this process: the interpreter's communicator."""
        return mesh_communicator(mesh)

    def load(self, binary, source, tile_module) -> dict:
        return {op.attributes["sym_name"]: _TileKernel(binary, op, self.checks, self.counters)
                for op in binary.body if "tile.params" in op.attributes}


def tile_backend() -> DeviceBackend:
    """``"interp-tiles"``: DeviceBackend over a TileInterpDevice."""
    return DeviceBackend(TileInterpDevice(), "interp-tiles",
                         "the interpreter's kernel path as a device: whole programs lowered to Tile IR, compiled once "
                         "and replayed in the tile interpreter with its checkers")


register("interp-tiles", tile_backend)
