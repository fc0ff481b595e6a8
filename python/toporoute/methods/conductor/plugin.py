"""AgentConductor as ``toporoute run conductor``: its spec (the flags are declared on
:class:`~toporoute.methods.conductor.ConductorSettings`' fields; ``--drop-trained-tasks``, which Agent Q-Mix's
group takes too, is added here by :func:`~toporoute.methods.options.add_drop_trained_tasks`, once per command)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..options import MethodSpec, OptionGroup, add_drop_trained_tasks, builder, read_drop_trained_tasks
from .settings import ConductorSettings

__all__ = ["OPTIONS", "SPEC"]


def _add_drop(g: argparse._ActionsContainer) -> None:
    add_drop_trained_tasks(g, "the checkpoint (conductor: the --orchestrator folder)")


def _read_drop(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    return {"drop_trained_tasks": read_drop_trained_tasks(args)}


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
