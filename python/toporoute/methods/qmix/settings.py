"""The settings of Agent Q-Mix's episode loop (:class:`QMixSettings`), with the command-line flags its fields
declare; the training settings are :mod:`.train_config`'s."""

from __future__ import annotations

from dataclasses import dataclass

from ..._checks import at_least, within
from ..episode import SamplingSettings
from ..options import option

__all__ = ["ROUNDS", "QMixSettings"]

ROUNDS = {"code": 2, "math": 3, "choice": 2}


@dataclass(frozen=True)
class QMixSettings(SamplingSettings):
    """Settings of the Q-Mix episode loop (defaults: the paper's intent, spec §6 [R]).

    Parameters
    ----------
    temperature, top_p, max_tokens, seed : see :class:`~toporoute.methods.episode.SamplingSettings` (the
        original: 0.2, 1.0, >= 4096); ``seed`` also roots the role rotation and exploration.
    rounds : int, optional
        T; None takes the domain's (code 2, math 3, choice 2).
    reselect_each_round : bool
        Choose actions every round (the paper); False chooses once from the initial observation and reuses
        them (the original evaluation code).
    initial_adj : {"identity", "zeros"}
        The graph the GNN reads in round 0 (the paper's A0 = I; the original code used zeros).
    legacy_repo_exec : bool
        Reproduce the original scheduler bug: only agents without incoming edges run, and no message is ever
        delivered (spec §2.5).
    epsilon : float
        Per-agent probability of a uniformly random action (training; 0 = greedy).
    adversarial_agent_index : int, optional
        Replace that agent's prompt with the misleading one (robustness experiments).
    backend : str, optional
        Core backend of ``ops.qmix_forward`` (default: the compiled CPU core).
    """

    rounds: int | None = None
    reselect_each_round: bool = option(
        True,
        name="--select-once",
        off=True,
        help="choose actions once from the first observation (the original evaluation code)",
    )
    initial_adj: str = option(
        "identity",
        choices=("identity", "zeros"),
        help="the graph round 0 reads (default identity; the original: zeros)",
    )
    legacy_repo_exec: bool = option(
        False, help="reproduce the original scheduler bug (no message is delivered)"
    )
    epsilon: float = 0.0
    temperature: float = 0.2
    adversarial_agent_index: int | None = option(
        None, name="--adversary", type=int, help="index of an adversarial agent (default: none)"
    )
    backend: str | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.rounds is not None:
            at_least("rounds", self.rounds, 1)
        within("epsilon", self.epsilon, 0, 1)

    def rounds_for(self, domain: str) -> int:
        return ROUNDS[domain] if self.rounds is None else self.rounds
