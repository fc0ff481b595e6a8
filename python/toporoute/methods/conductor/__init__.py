"""AgentConductor (methods/agentconductor.md): an orchestrator LLM writes each problem's team topology as a YAML
layered DAG, the layers run in order with the tester's feedback, and a rule-based reward scores every turn.

- :mod:`toporoute.types.conductor_topology` / ``ops.conductor_check``: the topology language (extraction, parsing,
  validation, decoding) — in the compiled core, with a PyYAML reference.
- :mod:`.method`: the episode loop (:class:`Conductor`, :class:`ConductorSettings`); :func:`plan_regex` is the
  orchestrator's plan grammar for guided decoding (:data:`GRAMMARS`: ``validator``, ``strict``).
- :mod:`.reward`: rewards, returns and GRPO advantages.
- :mod:`.training`: hooks for RL (a reward function for GRPO trainers, rollout collection) and SFT data.
"""

from ._prompts import GRAMMARS, plan_regex
from .method import Conductor
from .reward import (
    CAPS,
    EXEC_REWARD,
    YAML_REWARD,
    RewardConfig,
    grpo_advantages,
    trajectory_return,
    turn_rewards,
)
from .settings import ConductorSettings

__all__ = [
    "CAPS",
    "EXEC_REWARD",
    "GRAMMARS",
    "YAML_REWARD",
    "Conductor",
    "ConductorSettings",
    "RewardConfig",
    "grpo_advantages",
    "plan_regex",
    "trajectory_return",
    "turn_rewards",
]
