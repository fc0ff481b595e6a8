"""The checks of arguments and settings that the methods, the task layer and the server share: each raises an
:class:`~toporoute.errors.InvalidArgumentError` (or the subclass ``error``) that names the argument
(``<name> must be an integer >= 1; got 0``), with the argument ``field`` (default ``name``) attached.

An integer here is an ``int`` that is not a ``bool``; a range check is written so that NaN fails it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TypeGuard

from .errors import InvalidArgumentError

__all__ = [
    "above",
    "at_least",
    "either",
    "int_at_least",
    "ints_in",
    "is_finite_number",
    "is_int",
    "is_number",
    "one_of",
    "within",
]


def is_int(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an ``int`` and not a ``bool``."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is an ``int`` or a ``float`` and not a ``bool``."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def is_finite_number(value: object) -> TypeGuard[int | float]:
    """Whether ``value`` is a number (:func:`is_number`) that is neither NaN nor infinite."""
    return is_number(value) and math.isfinite(value)


def int_at_least(name: str, value: object, lo: int, *, field: str | None = None) -> int:
    """``value``, an integer >= ``lo``; else ``<name> must be an integer >= <lo>; got <value!r>``."""
    if not is_int(value) or value < lo:
        raise InvalidArgumentError(f"{name} must be an integer >= {lo}; got {value!r}", field or name)
    return value


def ints_in(ranges: Mapping[str, tuple[object, int, int]]) -> None:
    """Settings that must be integers in a range, ``{name: (value, lo, hi)}``: the first one that is not raises
    ``<name> must be an integer in [<lo>, <hi>]; got <value!r>``."""
    for name, (value, lo, hi) in ranges.items():
        if not is_int(value) or not lo <= value <= hi:
            raise InvalidArgumentError(f"{name} must be an integer in [{lo}, {hi}]; got {value!r}", name)


def at_least(
    name: str, value: float, lo: float, *, error: type[InvalidArgumentError] = InvalidArgumentError
) -> None:
    """``<name> must be >= <lo>; got <value!r>`` unless ``value >= lo``."""
    if not value >= lo:
        raise error(f"{name} must be >= {lo}; got {value!r}", name)


def above(name: str, value: float, lo: float) -> None:
    """``<name> must be > <lo>; got <value!r>`` unless ``value > lo``."""
    if not value > lo:
        raise InvalidArgumentError(f"{name} must be > {lo}; got {value!r}", name)


def within(name: str, value: float, lo: float, hi: float) -> None:
    """``<name> must be in [<lo>, <hi>]; got <value!r>`` unless ``lo <= value <= hi``."""
    if not lo <= value <= hi:
        raise InvalidArgumentError(f"{name} must be in [{lo}, {hi}]; got {value!r}", name)


def one_of(name: str, value: object, choices: Sequence[object], *, field: str | None = None) -> None:
    """``<name> must be one of <choices as a tuple>; got <value!r>`` unless ``value`` is one of ``choices``."""
    if value not in choices:
        raise InvalidArgumentError(f"{name} must be one of {tuple(choices)}; got {value!r}", field or name)


def either(name: str, value: object, first: str, second: str) -> None:
    """``<name> must be '<first>' or '<second>'; got <value!r>`` unless ``value`` is one of the two."""
    if value not in (first, second):
        raise InvalidArgumentError(f"{name} must be {first!r} or {second!r}; got {value!r}", name)
