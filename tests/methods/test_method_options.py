"""Flags declared on settings fields (``toporoute.methods.options``): what each kind of field becomes on the
command line and what reading it back gives, on a settings class of this test's own."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

import pytest

from toporoute.methods.options import OptionGroup, flag_of, option


def _pairs(items: list[str]) -> dict[str, int]:
    return {k: int(v) for k, _, v in (item.partition("=") for item in items)}


@dataclass(frozen=True)
class _Settings:
    plain: int = 1
    count: int = option(2, help="a count (default 2)")
    ratio: float = option(0.5, name="--the-ratio", help="a ratio")
    mode: str = option("a", choices=("a", "b"), help="a mode")
    loud: bool = option(False, help="a switch")
    guided: bool = option(True, name="--no-guide", off=True, help="turns guiding off")
    rounds: int = option(3, unset=True, key="own_rounds", help="given: wins over --rounds")
    cap: int = option(9, shared=True, help="first: a cap")
    limits: dict[str, int] = option(factory=dict, repeat=True, convert=_pairs, metavar="K=N", help="limits")
    timeout: float = option(5.0, name="--eval-timeout", command=True, help="the command's own")


@dataclass(frozen=True)
class _Other:
    cap: int = option(7, shared=True, help="second: another cap")


def _parser(*groups: OptionGroup) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(allow_abbrev=False)
    p.add_argument("--eval-timeout", type=float, default=10.0)
    for g in groups:
        g.add(p.add_argument_group(g.title))
    return p


GROUP = OptionGroup("test", _Settings)


def test_defaults_read_back_as_the_settings_defaults() -> None:
    got = GROUP.read(_parser(GROUP).parse_args([]), Path("."))
    # unset and shared flags not given are left out (the settings' or the builder's default applies)
    assert got == {
        "count": 2,
        "ratio": 0.5,
        "mode": "a",
        "loud": False,
        "guided": True,
        "limits": {},
        "timeout": 10.0,
    }
    assert flag_of(next(f for f in _Settings.__dataclass_fields__.values() if f.name == "plain")) is None


def test_given_flags_map_onto_their_fields() -> None:
    argv = ["--count", "4", "--the-ratio", "0.25", "--mode", "b", "--loud", "--no-guide", "--rounds", "6"]
    argv += ["--cap", "3", "--limits", "x=1", "--limits", "y=2", "--eval-timeout", "2.5"]
    got = GROUP.read(_parser(GROUP).parse_args(argv), Path("."))
    assert got == {
        "count": 4,
        "ratio": 0.25,
        "mode": "b",
        "loud": True,
        "guided": False,
        "own_rounds": 6,
        "cap": 3,
        "limits": {"x": 1, "y": 2},
        "timeout": 2.5,
    }
    assert _Settings(**{k if k != "own_rounds" else "rounds": v for k, v in got.items()}).guided is False


def test_bad_values_are_refused_by_argparse_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    parser = _parser(GROUP)
    for argv, flag in ((["--count", "x"], "--count"), (["--mode", "c"], "--mode")):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)
        assert flag in capsys.readouterr().err


def test_a_shared_flag_is_added_once_with_both_meanings() -> None:
    other = OptionGroup("other", _Other)
    parser = _parser(GROUP, other)
    (action,) = [a for a in parser._actions if "--cap" in a.option_strings]
    assert action.help == "first: a cap; second: another cap" and action.default is None
    args = parser.parse_args(["--cap", "5"])
    assert GROUP.read(args, Path("."))["cap"] == 5 and other.read(args, Path(".")) == {"cap": 5}
    assert other.read(parser.parse_args([]), Path(".")) == {}


def test_a_switch_needs_the_default_it_turns_away_from() -> None:
    @dataclass(frozen=True)
    class Bad:
        on: bool = option(True, help="a switch that could never turn anything on")

    with pytest.raises(TypeError, match="on: a switch needs the default False"):
        OptionGroup("bad", Bad).add(argparse.ArgumentParser().add_argument_group())


def test_fields_check_their_declared_ranges_and_choices() -> None:
    from toporoute.errors import InvalidArgumentError
    from toporoute.methods.episode import SamplingSettings
    from toporoute.methods.options import setting

    @dataclass(frozen=True)
    class Checked(SamplingSettings):
        n: int = option(2, ints=(1, 5), help="n")
        kind: str = option("a", choices=("a", "b", "c"), help="kind")
        side: str = option("l", choices=("l", "r"), help="side")
        level: str | None = option(None, choices=("x", "y"), help="optional")
        hidden: int = setting(0, ints=(0, 9))

    assert Checked(n=5, kind="c", side="r", level="y", hidden=9).n == 5
    for bad, message in (
        ({"n": 6}, "n must be an integer in [1, 5]; got 6"),
        ({"n": True}, "n must be an integer in [1, 5]; got True"),
        ({"kind": "d"}, "kind must be one of ('a', 'b', 'c'); got 'd'"),
        ({"side": "m"}, "side must be 'l' or 'r'; got 'm'"),
        ({"level": "z"}, "level must be 'x' or 'y'; got 'z'"),
        ({"hidden": -1}, "hidden must be an integer in [0, 9]; got -1"),
    ):
        with pytest.raises(InvalidArgumentError) as err:
            Checked(**bad)
        assert str(err.value) == message and err.value.arg == next(iter(bad))
