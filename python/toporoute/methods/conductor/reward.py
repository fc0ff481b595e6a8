"""AgentConductor's rule-based reward (methods/agentconductor.md §4.2-§4.5, §9.7-§9.10).

Per turn ``r_k = w_e r_e + w_g r_g``: ``r_e`` penalises a malformed plan by its error class or grades the
sandbox verdict (:data:`EXEC_REWARD`); ``r_g`` is the density term of a valid plan (``paper``: S_complex within
the difficulty cap ``N_max``, ``tanh((N_max - |V|)/N_max)`` over it; ``normalized``: ``(S_node + 2 S_edge +
S_depth)/4`` within the cap) and 0 for an invalid one. A trajectory's return is ``sum`` (the paper: Σ γ^k r_k,
k from 0), ``mean`` or ``last``; GRPO advantages normalise returns within each problem's group.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ... import ops
from ..._checks import one_of
from ...errors import InvalidArgumentError
from ...types.conductor_topology import LOGIC, NO_YAML, OK, PARSE, SCHEMA

__all__ = [
    "CAPS",
    "EXEC_REWARD",
    "YAML_REWARD",
    "RewardConfig",
    "grpo_advantages",
    "trajectory_return",
    "turn_rewards",
]

CAPS = {"easy": 4, "medium": 7, "hard": 10}
EXEC_REWARD = {
    "PASSED": 1.5,
    "[WRONG ANSWER]": 1.0,
    "[TIME LIMIT EXCEEDED]": 0.9,
    "[MEMORY LIMIT EXCEEDED]": 0.8,
    "[RUNTIME ERROR]": 0.7,
    "[COMPILATION ERROR]": 0.6,
}
YAML_REWARD = {NO_YAML: -2.0, PARSE: -1.5, SCHEMA: -1.0, LOGIC: -0.5}
DENSITY_MODES = ("paper", "normalized")
RETURN_MODES = ("sum", "mean", "last")


@dataclass(frozen=True)
class RewardConfig:
    """How turns and trajectories are scored.

    Parameters
    ----------
    density_mode : {"paper", "normalized"}
        ``paper``: r_g = S_complex (about 3 to 55, which dominates r_e; spec §9.7); ``normalized``: the exponent
        divided by 4 (0 to 1).
    w_e, w_g : float
        Weights of the execution and density terms (the paper: 1, 1).
    return_mode : {"sum", "mean", "last"}
        ``sum`` (the paper) rewards failing twice over passing once, because failure rewards are positive
        (spec §9.8); ``mean`` or ``last`` do not.
    gamma : float
        Discount of ``sum``, in (0, 1].
    """

    density_mode: str = "paper"
    w_e: float = 1.0
    w_g: float = 1.0
    return_mode: str = "sum"
    gamma: float = 1.0

    def __post_init__(self) -> None:
        one_of("density_mode", self.density_mode, DENSITY_MODES)
        one_of("return_mode", self.return_mode, RETURN_MODES)
        if not 0.0 < self.gamma <= 1.0:
            raise InvalidArgumentError(f"gamma must be in (0, 1]; got {self.gamma}", "gamma")
        for name in ("w_e", "w_g"):
            if not np.isfinite(getattr(self, name)):
                raise InvalidArgumentError(f"{name} must be finite; got {getattr(self, name)}", name)


@dataclass(frozen=True)
class TurnRewards:
    """Per-turn terms (float64 arrays of the input's length)."""

    r_e: np.ndarray
    r_g: np.ndarray
    r: np.ndarray
    s_complex: np.ndarray


def turn_rewards(
    errors: Sequence[int] | np.ndarray,
    verdicts: Sequence[str | None],
    nodes: Sequence[int] | np.ndarray,
    edges: Sequence[int] | np.ndarray,
    steps: Sequence[int] | np.ndarray,
    n_max: int | Sequence[int] | np.ndarray,
    config: RewardConfig | None = None,
) -> TurnRewards:
    """Rewards of many turns at once.

    Parameters
    ----------
    errors : (T,) ints
        The plan's error class per turn (0 valid; see :mod:`toporoute.types.conductor_topology`).
    verdicts : (T,) str or None
        The sandbox verdict of valid turns (a key of :data:`EXEC_REWARD`), or None for a valid plan that was
        not executed (r_e = 0: "valid YAML, no bonus"); ignored for invalid ones.
    nodes, edges, steps : (T,) ints
        |V|, |E|, s of valid turns (anything for invalid ones).
    n_max : int or (T,) ints
        The difficulty cap, from the task's label (never the orchestrator's guess, spec §9.6).
    """
    config = config or RewardConfig()
    err = np.asarray(errors, np.int64).reshape(-1)
    t = len(err)
    if len(verdicts) != t:
        raise InvalidArgumentError(f"verdicts must have {t} entries; got {len(verdicts)}", "verdicts")
    valid = err == OK
    r_e = np.zeros(t)
    for i in range(t):
        if valid[i]:
            verdict = verdicts[i]
            if verdict is None:
                continue
            one_of(f"verdicts[{i}]", verdict, tuple(EXEC_REWARD), field="verdicts")
            r_e[i] = EXEC_REWARD[verdict]
        else:
            if int(err[i]) not in YAML_REWARD:
                raise InvalidArgumentError(f"errors[{i}] must be 0..4; got {int(err[i])}", "errors")
            r_e[i] = YAML_REWARD[int(err[i])]
    r_g = np.zeros(t)
    s_complex = np.full(t, np.nan)
    if valid.any():
        cap = np.broadcast_to(np.asarray(n_max, np.int64), (t,))[valid]
        v = np.asarray(nodes, np.int64).reshape(-1)[valid]
        d = ops.conductor_density(
            v,
            np.asarray(edges, np.int64).reshape(-1)[valid],
            np.asarray(steps, np.int64).reshape(-1)[valid],
            cap,
        )
        s_complex[valid] = d.s_complex
        if config.density_mode == "paper":
            r_g[valid] = d.reward
        else:
            within = (d.s_node + 2.0 * d.s_edge + d.s_depth) / 4.0
            r_g[valid] = np.where(v <= cap, within, d.reward)
    return TurnRewards(r_e, r_g, config.w_e * r_e + config.w_g * r_g, s_complex)


def trajectory_return(rewards: Sequence[float], config: RewardConfig | None = None) -> float:
    """R(τ) of one trajectory's per-turn rewards (``return_mode``, ``gamma``)."""
    config = config or RewardConfig()
    r = np.asarray(rewards, np.float64).reshape(-1)
    if len(r) == 0:
        raise InvalidArgumentError("a trajectory needs at least one turn", "rewards")
    if config.return_mode == "mean":
        return float(r.mean())
    if config.return_mode == "last":
        return float(r[-1])
    return float((config.gamma ** np.arange(len(r)) * r).sum())


def grpo_advantages(returns: np.ndarray, *, eps: float = 1e-6, unbiased: bool = True) -> np.ndarray:
    """``(R - mean_G R) / (std_G R + eps)`` per problem: ``returns`` is (P, G); a group with equal returns gets
    zeros (spec §4.5)."""
    r = np.asarray(returns, np.float64)
    if r.ndim != 2 or r.shape[1] < 2:
        raise InvalidArgumentError(f"returns must be (P, G) with G >= 2; got shape {r.shape}", "returns")
    if not np.isfinite(r).all():
        raise InvalidArgumentError("returns must be finite", "returns")
    mean = r.mean(axis=1, keepdims=True)
    std = r.std(axis=1, ddof=1 if unbiased else 0, keepdims=True)
    return np.where(std > 0, (r - mean) / (std + eps), 0.0)
