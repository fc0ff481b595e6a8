"""DyTopo as ``toporoute run dytopo``: its spec and the option group it shares with its worker-loop baselines
(the flags are declared on :class:`~toporoute.methods.dytopo.LoopConfig`'s fields)."""

from __future__ import annotations

from ..options import MethodSpec, OptionGroup, builder
from .settings import LoopConfig

__all__ = ["LOOP_OPTIONS", "SPEC"]

LOOP_OPTIONS = OptionGroup(
    "dytopo and its worker-loop baselines (random, chain, star, full, parallel)", LoopConfig
)


SPEC = MethodSpec(
    "dytopo",
    "DyTopo: rounds of workers routed by their need/offer descriptors, a manager halts (T_max 10)",
    builder("dytopo", LoopConfig, "toporoute.methods.dytopo.loop:DyTopo", rounds="max_rounds"),
    LOOP_OPTIONS,
    uses_encoder=True,
)
