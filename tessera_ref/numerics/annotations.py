"""Tensor annotations: ``Tensor["B", "D", fp6 @accum(fp32)]`` and ``f32[n]`` (NUM-POL-3).

An annotation is a tuple of dimensions -- integers (concrete) or identifiers (symbolic) --
plus an optional :class:`~tessera_ref.numerics.policy.Policy`. It is a type, not a value:
the front ends use it to check arguments and bind symbolic sizes.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import FormatError, PolicyError
from .formats import Format, get_format
from .policy import Policy, as_policy

__all__ = ["TensorAnnotation", "Tensor"]


def _check_dim(dim):
    if isinstance(dim, bool) or not isinstance(dim, (int, str)):
        raise PolicyError(f"a tensor dimension must be an int or a symbol name, got {dim!r}",
                          fix='write sizes as Tensor["B", 128, f32]')
    if isinstance(dim, int) and dim < 0:
        raise PolicyError(f"a tensor dimension cannot be negative ({dim})", fix="use a size >= 0")
    if isinstance(dim, str) and not dim.isidentifier():
        raise PolicyError(f"symbolic dimension {dim!r} is not an identifier",
                          fix='use names like "B", "seq", "d_model"')
    return dim


@dataclass(frozen=True)
class TensorAnnotation:
    """Dimensions (ints or symbol names) and a policy (``None`` when left open)."""

    dims: tuple
    policy: Policy | None = None

    def __post_init__(self):
        object.__setattr__(self, "dims", tuple(_check_dim(d) for d in self.dims))

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def symbols(self) -> tuple[str, ...]:
        """The symbolic dimensions, in order of first appearance."""
        return tuple(dict.fromkeys(d for d in self.dims if isinstance(d, str)))

    def bind(self, shape, env: dict | None = None) -> dict:
        """Match a concrete ``shape``; return the symbol bindings (extending ``env``).

        Raises :class:`~tessera_ref.errors.PolicyError` naming the dimension that disagrees.
        """
        env = dict(env or {})
        shape = tuple(shape)
        if len(shape) != self.rank:
            raise PolicyError(f"{self} expects rank {self.rank}, got shape {shape}",
                              fix="pass an array with the annotated number of dimensions")
        for axis, (dim, size) in enumerate(zip(self.dims, shape)):
            want = env.get(dim, size) if isinstance(dim, str) else dim
            if want != size:
                raise PolicyError(f"{self}: dimension {axis} ({dim!r}) is {want} but the array has {size}",
                                  fix="make the shapes agree, or use a different symbol")
            if isinstance(dim, str):
                env[dim] = size
        return env

    def __str__(self) -> str:
        parts = [repr(d) if isinstance(d, str) else str(d) for d in self.dims]
        if self.policy is not None:
            parts.append(str(self.policy))
        return f"Tensor[{', '.join(parts)}]"


class Tensor:
    """``Tensor[dims..., policy]`` builds a :class:`TensorAnnotation`.

    The last item may be a policy (``fp6 @accum(fp32)``), a format (``bf16``) or a string
    that names a format (``"fp32"``); every other item is a dimension.
    """

    def __class_getitem__(cls, items) -> TensorAnnotation:
        items = items if isinstance(items, tuple) else (items,)
        last = items[-1] if items else None
        if isinstance(last, (Policy, Format)) or (isinstance(last, str) and _names_format(last)):
            return TensorAnnotation(items[:-1], as_policy(last))
        return TensorAnnotation(items, None)


def _names_format(name: str) -> bool:
    try:
        get_format(name)
    except FormatError:
        return False
    return True
