"""TacoMAS as ``toporoute run tacomas``: its spec (the flags are declared on
:class:`~toporoute.methods.tacomas.TacoMASSettings`' fields)."""

from __future__ import annotations

from ..options import MethodSpec, OptionGroup, builder
from .report import evolution_section
from .settings import TacoMASSettings

__all__ = ["OPTIONS", "SPEC"]

OPTIONS = OptionGroup("tacomas (TacoMAS)", TacoMASSettings)


SPEC = MethodSpec(
    "tacomas",
    "TacoMAS: a judged and coached role team; every K rounds a meta-LLM's validated births, deaths and "
    "edge edits (R 10 rounds)",
    builder(
        "tacomas", TacoMASSettings, "toporoute.methods.tacomas.method:TacoMAS", rounds="rounds", encoder=False
    ),
    OPTIONS,
    kinds=("code", "math", "choice"),
    report=evolution_section,
)
