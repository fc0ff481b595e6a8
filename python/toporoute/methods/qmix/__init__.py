"""Agent Q-Mix (Jiang et al., arXiv 2604.00344): per-agent communication actions chosen by a QMIX policy.

- :mod:`._graph`: the six actions, phi (actions -> round graph) and the wave schedule;
- :mod:`._features`: observations and global state;
- :mod:`.method`: the episode loop (:class:`QMix`) and the acting policy (:class:`QMixPolicy`, compiled
  forward, no torch);
- :mod:`.model` and :mod:`.train`: the PyTorch networks and the QMIX trainer (import torch; loaded on use).
"""

from __future__ import annotations

from ._features import Features, global_state, hash_task_feature, observations
from ._graph import ACTIONS, Schedule, actions_to_graph, schedule
from .method import QMix, QMixPolicy
from .settings import ROUNDS, QMixSettings

__all__ = [
    "ACTIONS",
    "ROUNDS",
    "Features",
    "QMix",
    "QMixPolicy",
    "QMixSettings",
    "Schedule",
    "actions_to_graph",
    "global_state",
    "hash_task_feature",
    "observations",
    "schedule",
]
