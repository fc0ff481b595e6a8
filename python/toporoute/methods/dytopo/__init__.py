"""DyTopo (Lu et al., arXiv 2602.06039) and the worker/manager loop its multi-round baselines share.

- :mod:`.loop`: the round loop (:class:`WorkerLoop`, :class:`DyTopo`, :class:`LoopConfig`);
- :mod:`.answer`: the final answer of an episode from its rounds;
- :mod:`.team`: the code and math teams, their prompts and output schemas (data files in ``prompts/dytopo``);
- :mod:`.messages`: parsing the agents' outputs and formatting their memories;
- :mod:`.graphs`: round graphs (sigma and inboxes for any adjacency; the baselines' fixed and random graphs).
"""

from __future__ import annotations

from .answer import final_answer
from .graphs import FIXED_TOPOLOGIES, RoundGraph, fixed_adjacency, random_adjacency, round_graph
from .loop import DyTopo, WorkerLoop
from .settings import TAU_PRESETS, TOPOLOGIES, LoopConfig
from .team import Team, load_team

__all__ = [
    "FIXED_TOPOLOGIES",
    "TAU_PRESETS",
    "TOPOLOGIES",
    "DyTopo",
    "LoopConfig",
    "RoundGraph",
    "Team",
    "WorkerLoop",
    "final_answer",
    "fixed_adjacency",
    "load_team",
    "random_adjacency",
    "round_graph",
]
