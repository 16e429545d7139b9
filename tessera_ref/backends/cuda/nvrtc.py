"""ctypes bindings to NVRTC (libnvrtc from the pip wheel; CUDA-COMPILE-1).

ctypes on the wheel's shared library rather than ``cuda-bindings``: the eight C functions
used here are stable since CUDA 11.1, and the wheel alone (no further package, no GPU) is
enough. :func:`compile_program` returns PTX, cubin and the log (which holds ptxas's
``-v`` report); a failed compile raises :class:`NvrtcError` with the log.
"""
from __future__ import annotations

import ctypes
import functools

from ...errors import BackendError
from .toolchain import toolchain

__all__ = ["NvrtcError", "compile_program", "nvrtc_version"]


class NvrtcError(BackendError):
    """NVRTC rejected a program (the message holds NVRTC's log)."""


@functools.lru_cache(maxsize=1)
def _lib() -> ctypes.CDLL:
    lib = ctypes.CDLL(str(toolchain().nvrtc_lib))
    p, sz, cp = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p
    lib.nvrtcGetErrorString.restype = cp
    lib.nvrtcCreateProgram.argtypes = [ctypes.POINTER(p), cp, cp, ctypes.c_int, ctypes.POINTER(cp),
                                       ctypes.POINTER(cp)]
    lib.nvrtcCompileProgram.argtypes = [p, ctypes.c_int, ctypes.POINTER(cp)]
    lib.nvrtcDestroyProgram.argtypes = [ctypes.POINTER(p)]
    for name in ("ProgramLog", "PTX", "CUBIN"):
        getattr(lib, f"nvrtcGet{name}Size").argtypes = [p, ctypes.POINTER(sz)]
        getattr(lib, f"nvrtcGet{name}").argtypes = [p, ctypes.c_char_p]
    return lib


def _check(rc: int, what: str) -> None:
    if rc != 0:
        msg = _lib().nvrtcGetErrorString(rc).decode()
        raise NvrtcError(f"NVRTC {what} failed: {msg}", fix="report this: the toolchain may be damaged")


def nvrtc_version() -> tuple[int, int]:
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(_lib().nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return major.value, minor.value


def _blob(prog, name: str) -> bytes:
    lib, size = _lib(), ctypes.c_size_t()
    _check(getattr(lib, f"nvrtcGet{name}Size")(prog, ctypes.byref(size)), f"nvrtcGet{name}Size")
    buf = ctypes.create_string_buffer(size.value)
    _check(getattr(lib, f"nvrtcGet{name}")(prog, buf), f"nvrtcGet{name}")
    return buf.raw[:size.value]


def compile_program(source: str, options: list[str], name: str = "tessera.cu") -> tuple[str, bytes, str]:
    """``(ptx, cubin, log)`` of ``source`` compiled with ``options`` (one real ``-arch=sm_XX``);
    :class:`NvrtcError` with the log when NVRTC rejects it."""
    lib = _lib()
    prog = ctypes.c_void_p()
    _check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None),
           "nvrtcCreateProgram")
    try:
        opts = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
        rc = lib.nvrtcCompileProgram(prog, len(options), opts)
        log = _blob(prog, "ProgramLog").rstrip(b"\0").decode(errors="replace")
        if rc != 0:
            raise NvrtcError(log)  # compile.py turns this into a CompileError with locations
        ptx = _blob(prog, "PTX").rstrip(b"\0").decode()
        return ptx, _blob(prog, "CUBIN"), log
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
