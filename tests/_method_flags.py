"""Each method's own ``toporoute run`` options as plain data (flag, destination, default, choices, type, action,
help), read off the parser that ``toporoute run METHOD --help`` uses, and the ``train qmix`` options the same
way (and, since issue 36, the ``train conductor`` options; ``serve``'s since its settings declare them too):
tests/data/method_flags.json holds them as they were before the methods (and ServeConfig) declared their flags on
their settings (issue 33), so a change that adds, drops or alters a flag shows as a difference."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from toporoute.cli import _parser
from toporoute.methods.registry import REGISTRY

SNAPSHOT = Path(__file__).parent / "data" / "method_flags.json"


def _action(a: argparse.Action) -> dict[str, Any]:
    return {
        "flags": list(a.option_strings),
        "dest": a.dest,
        "default": repr(a.default),
        "choices": None if a.choices is None else list(a.choices),
        "type": None if a.type is None else getattr(a.type, "__name__", repr(a.type)),
        "action": type(a).__name__,
        "nargs": a.nargs,
        "metavar": a.metavar,
        "help": a.help,
    }


def _subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def method_flags() -> dict[str, Any]:
    """``{methods: [{"group": title, "options": [...]}, ...]}`` for every registered method alone and for the
    pairs that share a flag (methods joined by a space), ``"train qmix"`` / ``"train conductor"``: the train
    subcommands' options, and ``"serve"``: the server's."""
    out: dict[str, Any] = {}
    # every method alone, and the pairs that share a flag (its help then gives both meanings)
    for names in [[n] for n in REGISTRY] + [["dytopo", "tacomas"], ["hiva", "tacomas"]]:
        run = _subcommand(_parser(names), "run")
        groups = [g for g in run._action_groups if (g.title or "").startswith("options of ")]
        out[" ".join(names)] = [
            {"group": g.title, "options": [_action(a) for a in g._group_actions]} for g in groups
        ]
    train = _subcommand(_parser([]), "train")
    for method in ("qmix", "conductor"):
        sub = _subcommand(train, method)
        out[f"train {method}"] = [{"group": None, "options": [_action(a) for a in sub._actions]}]
    serve = _subcommand(_parser([]), "serve")
    out["serve"] = [{"group": None, "options": [_action(a) for a in serve._actions]}]
    return out


if __name__ == "__main__":  # python tests/_method_flags.py > tests/data/method_flags.json
    json.dump(method_flags(), sys.stdout, indent=1, ensure_ascii=False)
    sys.stdout.write("\n")
