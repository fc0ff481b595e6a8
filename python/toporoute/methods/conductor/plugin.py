"""AgentConductor as ``toporoute run conductor``: its spec (the flags are declared on
:class:`~toporoute.methods.conductor.ConductorSettings`' fields; ``--drop-trained-tasks``, which Agent Q-Mix's
group declares too, is added here once per command)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..options import MethodSpec, OptionGroup, builder
from .settings import ConductorSettings

__all__ = ["OPTIONS", "SPEC"]

_DROP = "--drop-trained-tasks"


def _add_drop(g: argparse._ActionsContainer) -> None:
    if _DROP in g._option_string_actions:  # qmix's group of the same command added it: one value for both
        return
    g.add_argument(
        _DROP,
        action="store_true",
        help="leave out the tasks the checkpoint (conductor: the --orchestrator folder) was trained on, and say "
        "so (default: refuse to run on them)",
    )


def _read_drop(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    return {"drop_trained_tasks": bool(getattr(args, "drop_trained_tasks", False))}


OPTIONS = OptionGroup("conductor (AgentConductor)", ConductorSettings, _add_drop, _read_drop)


SPEC = MethodSpec(
    "conductor",
    "AgentConductor: an orchestrator writes YAML layered DAGs, a tester gives feedback (K 2 turns)",
    builder(
        "conductor", ConductorSettings, "toporoute.methods.conductor.method:Conductor", rounds="max_turns"
    ),
    OPTIONS,
    kinds=("code",),
)
