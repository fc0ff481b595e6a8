"""The prompting baselines as ``toporoute run`` methods: their specs (the flags are declared on their
settings' fields). ``--rounds`` sets self-refine's iterations and debate's rounds unless their own flag is
given, and is not used by ``cot`` and ``self-consistency`` (one round)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..options import Builder, MethodSpec, OptionGroup, settings_of
from ._common import KINDS
from .debate import DebateSettings
from .self_consistency import SelfConsistencySettings
from .self_refine import SelfRefineSettings

if TYPE_CHECKING:
    from ...embed import Encoder
    from ..episode import Method

__all__ = ["SPECS"]


def _builder(name: str) -> Builder:
    def build(settings: dict[str, Any], rounds: int | None, encoder: Encoder | None) -> Method:
        from . import ChainOfThought, CotSettings, Debate, SelfConsistency, SelfRefine

        if name == "cot":
            return ChainOfThought(settings_of(CotSettings, settings, name))
        if name == "self-consistency":
            return SelfConsistency(settings_of(SelfConsistencySettings, settings, name))
        if name == "self-refine":
            if rounds is not None:
                settings.setdefault("iterations", rounds)
            return SelfRefine(settings_of(SelfRefineSettings, settings, name))
        given = settings.pop("debate_rounds", None)
        if given is not None or rounds is not None:
            settings["rounds"] = given if given is not None else rounds
        return Debate(settings_of(DebateSettings, settings, name))

    return build


SPECS = (
    MethodSpec(
        "cot",
        "baseline: one chain-of-thought call per task (reasoning, then the answer)",
        _builder("cot"),
        kinds=KINDS,
    ),
    MethodSpec(
        "self-consistency",
        "baseline: N=5 CoT samples in one batch; majority vote, or for code the pick by visible examples",
        _builder("self-consistency"),
        OptionGroup("self-consistency", SelfConsistencySettings),
        kinds=KINDS,
    ),
    MethodSpec(
        "self-refine",
        "baseline: answer, then up to 3 self-feedback and refine iterations (stops when judged correct)",
        _builder("self-refine"),
        OptionGroup("self-refine (Madaan et al.)", SelfRefineSettings),
        kinds=KINDS,
    ),
    MethodSpec(
        "debate",
        "baseline: 3 agents x 3 rounds, each updating on the others' answers; vote or visible-test pick",
        _builder("debate"),
        OptionGroup("debate (Du et al.)", DebateSettings),
        kinds=KINDS,
    ),
)
"""cot, self-consistency, self-refine and debate as ``toporoute run`` methods."""
