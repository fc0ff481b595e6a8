"""Settings fields that carry their command-line flags: a frozen settings dataclass declares each option once,
on its field, and the command line, validation and the recorded parameters all come from there.

:func:`option` makes a field with a flag (:class:`Flag`, kept in the field's metadata); :func:`setting` a field
without one whose integer range is still checked. :class:`OptionGroup` adds the flags of a settings class to an
argparse parser or group in field order and reads the parsed values back as the settings' keyword arguments: the
field's default is the flag's default, a ``choices`` field gets argparse choices, a boolean field a switch
(``off=True``: a ``--no-...`` switch that turns a True setting off). :func:`check_fields` runs the checks the
fields declare. The methods' settings (:mod:`toporoute.methods.options`) and ``toporoute serve``'s
:class:`~toporoute.serve.ServeConfig` are written this way.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from dataclasses import MISSING, Field, dataclass, field, fields
from pathlib import Path
from typing import Any

from ._checks import either, ints_in, one_of

__all__ = [
    "Flag",
    "OptionGroup",
    "add_shared",
    "check_fields",
    "flag_of",
    "option",
    "setting",
]

_KEY = "toporoute.flag"
_INTS = "toporoute.ints"


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
    """The command-line options of a settings class (one or more methods', or a command's): its fields' flags.

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

    def read(self, args: argparse.Namespace, run_dir: Path | None = None) -> dict[str, Any]:
        """The parsed flags as the settings' keyword arguments (a flag not given with ``unset`` or ``shared``
        left out); ``run_dir`` is the run folder that ``read_extra`` reads (a group with one needs it)."""
        out: dict[str, Any] = {}
        if self.read_extra is not None:
            if run_dir is None:
                raise TypeError(f"option group {self.title!r} reads the run folder: pass run_dir")
            out.update(self.read_extra(args, run_dir))
        for f, flag in _flags(self.settings):
            _read(args, f, flag, out)
        return out

    def with_reader(self, read_extra: Callable[[argparse.Namespace, Path], Mapping[str, Any]]) -> OptionGroup:
        """The same flags, read with one more reader (the random baseline: DyTopo's edge counts)."""
        return OptionGroup(self.title, self.settings, self.extra, read_extra)
