"""HiVA as ``toporoute run hiva``: its spec (the flags are declared on
:class:`~toporoute.methods.hiva.HiVASettings`' fields)."""

from __future__ import annotations

from ..options import MethodSpec, OptionGroup, builder
from .report import growth_section
from .settings import HiVASettings

__all__ = ["OPTIONS", "SPEC"]

OPTIONS = OptionGroup("hiva (HiVA)", HiVASettings)


SPEC = MethodSpec(
    "hiva",
    "HiVA: a Thompson bandit routes an evolving agent DAG; textual gradients rewrite prompts, tools and "
    "topology (T 10 iterations)",
    builder("hiva", HiVASettings, "toporoute.methods.hiva.method:HiVA", rounds="iterations"),
    OPTIONS,
    uses_encoder=True,
    report=growth_section,
)
