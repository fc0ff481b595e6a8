"""AgentConductor as ``toporoute run conductor``: its spec (the flags are declared on
:class:`~toporoute.methods.conductor.ConductorSettings`' fields)."""

from __future__ import annotations

from ..options import MethodSpec, OptionGroup, builder
from .settings import ConductorSettings

__all__ = ["OPTIONS", "SPEC"]

OPTIONS = OptionGroup("conductor (AgentConductor)", ConductorSettings)


SPEC = MethodSpec(
    "conductor",
    "AgentConductor: an orchestrator writes YAML layered DAGs, a tester gives feedback (K 2 turns)",
    builder(
        "conductor", ConductorSettings, "toporoute.methods.conductor.method:Conductor", rounds="max_turns"
    ),
    OPTIONS,
    kinds=("code",),
)
