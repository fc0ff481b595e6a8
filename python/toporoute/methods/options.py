"""Methods as plug-ins: a method declares its command-line flags on its settings and registers a
:class:`MethodSpec`; the CLI and :func:`~toporoute.methods.registry.make_method` only read the specs.

A settings field becomes a flag of ``toporoute run METHOD`` by :func:`option`, which records the flag's help
and how it maps onto the value (:class:`Flag`) in the field's metadata. :class:`OptionGroup` adds the flags of a
settings class to an argparse group in field order and reads the parsed values back as the settings' keyword
arguments: the field's default is the flag's default, a ``choices`` field gets argparse choices, a boolean field
a switch (``off=True``: a ``--no-...`` switch that turns a True setting off). So an option is written once, on
its field: its default, help, validation (the settings' ``__post_init__``) and run.json entry (``params()``)
all come from there.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from .._checks import either, ints_in, one_of
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

_KEY = "toporoute.flag"
_INTS = "toporoute.ints"

DOMAINS = ("code", "math")
"""The task kinds most methods solve (Agent Q-Mix also solves ``choice`` tasks)."""

Builder = Callable[[dict[str, Any], "int | None", "Encoder | None"], "Method"]
"""``build(settings, rounds, encoder) -> Method``: ``settings`` are the method's keyword settings, ``rounds``
the command's ``--rounds`` (None: not given)."""


@dataclass(frozen=True)
class Flag:
    """How one settings field appears on the command line.

    Attributes
    ----------
    help : str
    name : str, optional
        The flag (default ``--`` and the field's name with dashes).
    choices : tuple of str, optional
    type : callable, optional
        argparse's ``type`` (default: the type of the field's default; none for ``choices``).
    off : bool
        A boolean field that defaults to True: the flag (e.g. ``--no-guided``) is a switch that turns it off.
    unset : bool
        The flag defaults to None, and a flag not given leaves the setting out, so the settings' default (or the
        builder's rule, e.g. ``--rounds``) applies.
    shared : bool
        Other methods of one command may declare the same flag (DyTopo's and TacoMAS's ``--tau``): it is added
        once, its help joined, and its one value goes to each (implies ``unset``).
    repeat : bool
        The flag may be given many times (argparse ``append``); ``convert`` turns the list into the value.
    convert : callable, optional
        The parsed value to the setting's value (e.g. ``ROLE=N`` items to a mapping), raising a clear error.
    metavar : str, optional
    key : str, optional
        The keyword :func:`~toporoute.methods.registry.make_method` takes it as (default: the field's name).
    command : bool
        A flag of ``toporoute run`` itself (``--eval-timeout``): not added by the method's group, only read.
    """

    help: str
    name: str | None = None
    choices: tuple[str, ...] | None = None
    type: Callable[[str], Any] | None = None
    off: bool = False
    unset: bool = False
    shared: bool = False
    repeat: bool = False
    convert: Callable[[Any], Any] | None = None
    metavar: str | None = None
    key: str | None = None
    command: bool = False

    def flag_name(self, f: Field[Any]) -> str:
        return self.name or "--" + f.name.replace("_", "-")

    def dest(self, f: Field[Any]) -> str:
        return self.flag_name(f).lstrip("-").replace("-", "_")


def option(
    default: Any = MISSING,
    *,
    factory: Callable[[], Any] | None = None,
    ints: tuple[int, int] | None = None,
    **flag: Any,
) -> Any:
    """A settings field with a command-line flag: ``top_k: int = option(2, ints=(1, 5), help="...")``;
    ``flag`` are :class:`Flag`'s attributes, ``factory`` a default factory (for a mutable default), ``ints`` the
    range of an integer setting. The flag's ``choices`` and ``ints`` are checked by :func:`check_fields`."""
    return _field(default, factory, {_KEY: Flag(**flag), _INTS: ints})


def setting(default: Any = MISSING, *, ints: tuple[int, int] | None = None) -> Any:
    """A settings field without a flag whose integer range ``ints`` :func:`check_fields` checks."""
    return _field(default, None, {_INTS: ints})


def _field(default: Any, factory: Callable[[], Any] | None, meta: dict[str, Any]) -> Any:
    if factory is not None:
        return field(default_factory=factory, metadata=meta)
    return field(default=default, metadata=meta)


def check_fields(settings: Any) -> None:
    """The checks a settings object's fields declare, in field order: an integer in its ``ints`` range
    (``<name> must be an integer in [lo, hi]; got ...``), a flag's value among its ``choices`` (None passes
    where the default is None)."""
    for f in fields(settings):
        ints, flag = f.metadata.get(_INTS), flag_of(f)
        if ints is not None:
            ints_in({f.name: (getattr(settings, f.name), *ints)})
        if flag is None or flag.choices is None:
            continue
        value = getattr(settings, f.name)
        if value is None and f.default is None:
            continue
        if len(flag.choices) == 2:
            either(f.name, value, *flag.choices)
        else:
            one_of(f.name, value, flag.choices)


def flag_of(f: Field[Any]) -> Flag | None:
    """The flag a settings field declares (None: no flag)."""
    flag = f.metadata.get(_KEY)
    return flag if isinstance(flag, Flag) else None


def _default(f: Field[Any]) -> Any:
    if f.default is not MISSING:
        return f.default
    if f.default_factory is not MISSING:
        return f.default_factory()
    raise TypeError(f"settings field {f.name} has a flag but no default")


def add_shared(g: argparse._ActionsContainer, flag: str, help: str, **kw: Any) -> None:
    """Adds ``flag`` (default None) unless another method group of the same command already did (DyTopo's and
    TacoMAS's ``--tau``, HiVA's and TacoMAS's ``--max-agents``): then the flag's help gains this group's meaning
    and its one value goes to both methods. Each method applies its own default for None."""
    existing = g._option_string_actions.get(flag)  # an argument group shares its parser's table
    if existing is not None:
        existing.help = f"{existing.help}; {help}"
        return
    g.add_argument(flag, default=None, help=help, **kw)


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


def _add(g: argparse._ActionsContainer, f: Field[Any], flag: Flag) -> None:
    name, default = flag.flag_name(f), _default(f)
    if flag.repeat:
        g.add_argument(name, action="append", default=[], metavar=flag.metavar, help=flag.help)
        return
    if isinstance(default, bool) and flag.choices is None:
        if default is not flag.off:
            raise TypeError(f"settings field {f.name}: a switch needs the default False (True with off=True)")
        g.add_argument(name, action="store_true", help=flag.help)
        return
    kw: dict[str, Any] = {"metavar": flag.metavar} if flag.metavar else {}
    if flag.choices is not None:
        kw["choices"] = flag.choices
    else:
        kw["type"] = flag.type or type(default)
    if flag.shared:
        add_shared(g, name, flag.help, **kw)
        return
    g.add_argument(name, default=None if flag.unset else default, help=flag.help, **kw)


def _read(args: argparse.Namespace, f: Field[Any], flag: Flag, out: dict[str, Any]) -> None:
    value = getattr(args, flag.dest(f))
    if flag.off:
        value = not value
    if (flag.unset or flag.shared) and value is None:
        return
    out[flag.key or f.name] = value if flag.convert is None else flag.convert(value)


def _flags(settings: type) -> list[tuple[Field[Any], Flag]]:
    return [(f, flag) for f in fields(settings) if (flag := flag_of(f)) is not None]


@dataclass(frozen=True)
class OptionGroup:
    """The command-line options of one or more methods: the flags of a settings class.

    ``extra`` and ``read_extra`` add and read options that are not settings (Q-Mix's ``--checkpoint``, the
    random baseline's edge counts from the run folder); ``read`` returns the methods' keyword settings.
    """

    title: str
    settings: type
    extra: Callable[[argparse._ActionsContainer], None] | None = None
    read_extra: Callable[[argparse.Namespace, Path], Mapping[str, Any]] | None = None

    def add(self, g: argparse._ActionsContainer) -> None:
        if self.extra is not None:
            self.extra(g)
        for f, flag in _flags(self.settings):
            if not flag.command:
                _add(g, f, flag)

    def read(self, args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.read_extra is not None:
            out.update(self.read_extra(args, run_dir))
        for f, flag in _flags(self.settings):
            _read(args, f, flag, out)
        return out

    def with_reader(self, read_extra: Callable[[argparse.Namespace, Path], Mapping[str, Any]]) -> OptionGroup:
        """The same flags, read with one more reader (the random baseline: DyTopo's edge counts)."""
        return OptionGroup(self.title, self.settings, self.extra, read_extra)


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
