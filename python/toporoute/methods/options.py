"""Methods as plug-ins: a method declares its command-line flags on its settings and registers a
:class:`MethodSpec`; the CLI and :func:`~toporoute.methods.registry.make_method` only read the specs.

A settings field becomes a flag of ``toporoute run METHOD`` by :func:`option` (:mod:`toporoute._options`, which
``toporoute serve``'s settings use too, re-exported here), which records the flag's help and how it maps onto
the value (:class:`Flag`) in the field's metadata. :class:`OptionGroup` adds the flags of a settings class to an
argparse group in field order and reads the parsed values back as the settings' keyword arguments. So an option
is written once, on its field: its default, help, validation (the settings' ``__post_init__``) and run.json
entry (``params()``) all come from there.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import TYPE_CHECKING, Any, TypeVar

from .._options import Flag, OptionGroup, add_shared, check_fields, flag_of, option, setting
from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    from ..embed import Encoder
    from ..trace.report import Section
    from .episode import Method

__all__ = [
    "DOMAINS",
    "Builder",
    "Flag",
    "MethodSpec",
    "OptionGroup",
    "add_drop_trained_tasks",
    "add_shared",
    "builder",
    "check_fields",
    "flag_of",
    "option",
    "read_drop_trained_tasks",
    "setting",
    "settings_of",
]

DOMAINS = ("code", "math")
"""The task kinds most methods solve (Agent Q-Mix also solves ``choice`` tasks)."""

Builder = Callable[[dict[str, Any], "int | None", "Encoder | None"], "Method"]
"""``build(settings, rounds, encoder) -> Method``: ``settings`` are the method's keyword settings, ``rounds``
the command's ``--rounds`` (None: not given)."""


_DROP_TRAINED_TASKS = "--drop-trained-tasks"


def add_drop_trained_tasks(g: argparse._ActionsContainer, checkpoint: str = "the checkpoint") -> None:
    """``--drop-trained-tasks`` of the methods that run a trained checkpoint (Agent Q-Mix, AgentConductor): they
    refuse the tasks it was trained on unless it is given. Added once per command: when another method group
    of the same command added it, that group's help stands and the one value goes to both. ``checkpoint``
    names what was trained in the help."""
    if _DROP_TRAINED_TASKS in g._option_string_actions:  # an argument group shares its parser's table
        return
    g.add_argument(
        _DROP_TRAINED_TASKS,
        action="store_true",
        help=f"leave out the tasks {checkpoint} was trained on, and say so (default: refuse to run on them)",
    )


def read_drop_trained_tasks(args: argparse.Namespace) -> bool:
    """The value of :func:`add_drop_trained_tasks`' flag (False where the command has none)."""
    return bool(getattr(args, "drop_trained_tasks", False))


@dataclass(frozen=True)
class MethodSpec:
    """A registered method.

    Attributes
    ----------
    name : str
    summary : str
        One line for ``toporoute run --help``.
    build : callable
        ``build(settings, rounds, encoder) -> Method`` (:data:`Builder`).
    options : OptionGroup or None
    uses_encoder : bool
        The method embeds descriptors (the CLI loads and warms the encoder once for it).
    after : tuple of str
        Methods that must run before it in one command (the random baseline reads DyTopo's edge counts).
    kinds : tuple of str
        The task kinds it solves (``toporoute run`` refuses other tasks before it starts).
    report : callable, optional
        Its own part of each episode's view in the HTML report (:data:`toporoute.trace.report.Section`).
    """

    name: str
    summary: str
    build: Builder
    options: OptionGroup | None = None
    uses_encoder: bool = False
    after: tuple[str, ...] = ()
    kinds: tuple[str, ...] = DOMAINS
    report: Section | None = None


_T = TypeVar("_T")


def settings_of(cls: type[_T], settings: Mapping[str, Any], method: str) -> _T:
    """``cls(**settings)`` with an error naming the unknown settings (and the method)."""
    known = {f.name for f in fields(cls) if f.init}  # type: ignore[arg-type]
    unknown = sorted(set(settings) - known)
    if unknown:
        raise InvalidArgumentError(
            f"method {method!r} has no setting(s) {unknown}; its settings: {sorted(known)}", unknown[0]
        )
    return cls(**settings)


def builder(
    name: str, settings: type, method: str, *, rounds: str | None = None, encoder: bool = True
) -> Builder:
    """The builder of the method ``name``, made from its settings: ``method`` is the method's class as
    ``"module:Class"``, imported on first use (the registry stays light); ``rounds`` is the settings field that
    ``--rounds`` (make_method's ``rounds``) sets unless the setting is given; ``encoder``: the class takes the
    descriptor encoder (``encoder=``)."""
    module, _, cls_name = method.partition(":")

    def build(given: dict[str, Any], n_rounds: int | None, enc: Encoder | None) -> Method:
        if rounds is not None and n_rounds is not None:
            given.setdefault(rounds, n_rounds)
        cls = getattr(importlib.import_module(module), cls_name)
        values: Any = settings_of(settings, given, name)
        return cls(values, encoder=enc) if encoder else cls(values)  # type: ignore[no-any-return]

    return build
