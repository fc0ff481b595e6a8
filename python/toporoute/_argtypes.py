"""argparse value types with ranges, whose errors name what was expected and what was given
(``argument --max-tokens: must be an integer >= 1; got '-5'``)."""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["float_at_least", "float_in", "int_at_least"]


def int_at_least(lo: int) -> Callable[[str], int]:
    """An integer ``>= lo``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < lo:
            raise argparse.ArgumentTypeError(f"must be an integer >= {lo}; got {text!r}")
        return value

    parse.__name__ = f"integer >= {lo}"
    return parse


def float_at_least(lo: float, *, strict: bool = False) -> Callable[[str], float]:
    """A finite number ``>= lo`` (``> lo`` when ``strict``)."""
    relation = ">" if strict else ">="

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not math.isfinite(value) or value < lo or (strict and value == lo):
            raise argparse.ArgumentTypeError(f"must be a number {relation} {lo:g}; got {text!r}")
        return value

    parse.__name__ = f"number {relation} {lo:g}"
    return parse


def float_in(lo: float, hi: float) -> Callable[[str], float]:
    """A number in ``[lo, hi]``."""

    def parse(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            value = math.nan
        if not lo <= value <= hi:
            raise argparse.ArgumentTypeError(f"must be a number in [{lo:g}, {hi:g}]; got {text!r}")
        return value

    parse.__name__ = f"number in [{lo:g}, {hi:g}]"
    return parse
