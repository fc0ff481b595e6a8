"""The GRPO reward of ``toporoute train conductor``, split into components that TRL logs one by one.

TRL's ``GRPOTrainer`` sums its ``reward_funcs`` (weights 1 here); :class:`PlanScorer` checks a batch of plans
once (``ops.conductor_check``, batched in the compiled core), runs the valid ones when execution is on, and
hands each component its part of :class:`~toporoute.methods.conductor.training.PlanReward`'s terms:

- ``validity``: ``w_e r_e`` of an invalid plan (the error class's penalty: -2 / -1.5 / -1 / -0.5), 0 for a valid
  one;
- ``density``: ``w_g r_g`` of a valid plan (``ops.conductor_density``: S_complex within the task's cap, the tanh
  penalty over it), 0 for an invalid one;
- ``execution``: ``w_e r_e`` of a valid plan, the hidden tests' verdict of the plan run by the real loop on its
  training task (1.5 PASSED ... 0.6 COMPILATION ERROR), 0 for an invalid one.

So the components add up to PlanReward's per-turn reward ``r = w_e r_e + w_g r_g`` (the unit tests check it).
Each batch also logs ``validity_rate`` (the share of valid plans), ``valid_nodes`` (their mean |V|) and
``over_cap`` (the share of valid plans over the cap) through TRL's ``log_metric``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .train_config import REWARD_COMPONENTS
from .training import PlanReward, PlanTerms

__all__ = ["PlanScorer"]


class PlanScorer:
    """One scoring of each batch for every reward component.

    Parameters
    ----------
    reward : PlanReward
        The reward (its check options, reward config, default level and, for execution, its ``execute``).
    components : sequence of str
        Which of :data:`~toporoute.methods.conductor.train_config.REWARD_COMPONENTS` to hand TRL. The execution
        component reads the verdicts ``reward`` gets (its ``execute``, its ``verdict_fn`` or a ``verdict``
        column); a valid plan without one scores 0 there.
    """

    def __init__(self, reward: PlanReward, components: Sequence[str] = REWARD_COMPONENTS) -> None:
        unknown = [c for c in components if c not in REWARD_COMPONENTS]
        if unknown:
            raise ValueError(f"unknown reward components {unknown}; choose from {REWARD_COMPONENTS}")
        self.reward = reward
        self.components = tuple(components)
        self._last: tuple[tuple[str, ...], tuple[Any, ...], PlanTerms] | None = None

    def terms(self, completions: Sequence[Any], **columns: Any) -> PlanTerms:
        """The batch's terms, computed once for the components of one TRL step (the same completions and
        levels come back to each component in turn)."""
        texts = tuple(_text(c) for c in completions)
        levels = tuple(columns.get("level") or columns.get("difficulty") or ())
        if self._last is not None and self._last[0] == texts and self._last[1] == levels:
            return self._last[2]
        terms = self.reward.terms(completions, **columns)
        self._last = (texts, levels, terms)
        log_metric = columns.get("log_metric")
        if callable(log_metric):
            for name, value in batch_metrics(terms).items():
                log_metric(name, value)
        return terms

    def funcs(self) -> list[Callable[..., list[float]]]:
        """TRL ``reward_funcs``, one per component, named ``validity``, ``density``, ``execution``."""
        return [_Component(self, c) for c in self.components]


class _Component:
    """One component as a TRL reward function (TRL names its logs by ``__name__``)."""

    def __init__(self, scorer: PlanScorer, name: str) -> None:
        self.scorer = scorer
        self.__name__ = name

    def __call__(self, prompts: Any = None, completions: Sequence[Any] = (), **columns: Any) -> list[float]:
        t = self.scorer.terms(completions, **columns)
        return [float(x) for x in component_values(t, self.__name__, self.scorer.reward)]


def component_values(terms: PlanTerms, name: str, reward: PlanReward) -> np.ndarray:
    """The part ``name`` of each plan's reward (``validity`` + ``density`` + ``execution`` = ``r``)."""
    ok = np.asarray(terms.check.ok, bool)
    config = reward.reward
    r = terms.rewards
    if name == "validity":
        return np.where(ok, 0.0, config.w_e * r.r_e)
    if name == "density":
        return np.where(ok, config.w_g * r.r_g, 0.0)
    if name == "execution":
        return np.where(ok, config.w_e * r.r_e, 0.0)
    raise ValueError(f"unknown reward component {name!r}; choose from {REWARD_COMPONENTS}")


def batch_metrics(terms: PlanTerms) -> Mapping[str, float]:
    """What a batch logs beside the components: the share of valid plans, their mean node count and the share
    of valid plans over the difficulty cap (r_g < 0)."""
    ok = np.asarray(terms.check.ok, bool)
    out = {"validity_rate": float(ok.mean()) if len(ok) else 0.0}
    if ok.any():
        out["valid_nodes"] = float(np.asarray(terms.check.nodes)[ok].mean())
        out["over_cap"] = float((terms.rewards.r_g[ok] < 0).mean())
    return out


def _text(c: Any) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, Sequence) and c and isinstance(c[-1], Mapping):
        return str(c[-1].get("content", ""))
    return repr(c)
