"""Topology methods as async episode loops over the shared runtime (see :mod:`toporoute.methods.harness`).

``make_method(name, config)`` builds one of :data:`METHODS`: ``dytopo`` and its baselines ``single``,
``parallel``, ``random``, ``chain``, ``star``, ``full``; ``qmix`` (Agent Q-Mix, from a trained checkpoint;
see :mod:`toporoute.methods.qmix`); and ``conductor`` (AgentConductor: an orchestrator LLM writes YAML layered
DAGs; see :mod:`toporoute.methods.conductor`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..errors import InvalidArgumentError
from .baselines import BASELINE_ROUNDS, SingleCall, baseline
from .dytopo import TAU_PRESETS, DyTopo, EpisodeOutput, LoopConfig, WorkerLoop

if TYPE_CHECKING:
    from ..embed import Encoder
    from ..runtime import EpisodeContext
    from ..tasks import Task

__all__ = [
    "BASELINE_ROUNDS",
    "METHODS",
    "TAU_PRESETS",
    "DyTopo",
    "EpisodeOutput",
    "LoopConfig",
    "Method",
    "SingleCall",
    "WorkerLoop",
    "make_method",
]

METHODS = ("dytopo", "qmix", "conductor", "single", "parallel", "random", "chain", "star", "full")


class Method(Protocol):
    """What the harness runs: a name, the settings to record, and one episode per task."""

    name: str

    def params(self) -> dict[str, Any]: ...

    async def episode(self, ctx: EpisodeContext, task: Task, emit: Any) -> EpisodeOutput: ...


def make_method(
    name: str,
    config: LoopConfig | None = None,
    *,
    rounds: int | None = None,
    encoder: Encoder | None = None,
    edge_counts: Mapping[str, Sequence[int]] | None = None,
    checkpoint: str | Path | None = None,
    qmix: Mapping[str, Any] | None = None,
    conductor: Mapping[str, Any] | None = None,
) -> Method:
    """The method ``name`` with ``config``; ``rounds`` overrides the number of rounds (DyTopo: T_max, default 10;
    the multi-round baselines: a fixed count, default 5; qmix: T, default code 2, math 3).

    ``qmix`` needs ``checkpoint`` (a policy written by ``toporoute train qmix``); ``qmix`` holds
    :class:`~toporoute.methods.qmix.QMixSettings` overrides (sampling comes from ``config``). ``conductor``
    holds :class:`~toporoute.methods.conductor.ConductorSettings` overrides (``rounds``: its K, default 2)."""
    if name not in METHODS:
        raise InvalidArgumentError(f"method must be one of {METHODS}; got {name!r}", "method")
    config = config or LoopConfig()
    sampling = {
        "temperature": config.temperature,
        "top_p": config.top_p,
        "max_tokens": config.max_tokens,
        "seed": config.seed,
    }
    if name == "qmix":
        from .qmix import QMix, QMixPolicy, QMixSettings

        if checkpoint is None:
            raise InvalidArgumentError(
                "method qmix needs a checkpoint (toporoute train qmix writes one)", "checkpoint"
            )
        settings = QMixSettings(**(sampling | {"rounds": rounds} | dict(qmix or {})))
        return QMix(QMixPolicy.load(checkpoint, encoder=encoder), settings)
    if name == "conductor":
        from .conductor import Conductor, ConductorSettings

        turns = {} if rounds is None else {"max_turns": rounds}
        return Conductor(ConductorSettings(**(sampling | turns | dict(conductor or {}))), encoder=encoder)
    if name == "dytopo":
        return DyTopo(config if rounds is None else replace(config, max_rounds=rounds), encoder=encoder)
    if name in ("random", "chain", "star", "full"):
        config = replace(config, max_rounds=BASELINE_ROUNDS if rounds is None else rounds)
    return baseline(name, config, edge_counts=edge_counts, encoder=encoder)
