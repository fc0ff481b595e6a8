"""HiVA (Tang et al., AAAI 2026): a Thompson-sampling bandit routes each forward pass through an evolving agent
DAG, and a backward pass of textual gradients rewrites the agents' prompts, their sandboxed tools and the
topology itself (spec ``methods/hiva.md``).

- :mod:`.method`: the episode loop (:class:`HiVA`), per_instance and stream modes;
- :mod:`.graph`: the graph state and its updates over the core ops (no LLM);
- :mod:`.parsing`: reading the LLM outputs, with their fallbacks, and the guiding regular expressions;
- :mod:`.environment`: the environment's feedback, with no hidden tests unless the oracle is asked for;
- :mod:`.settings`: :class:`HiVASettings` and each call kind's sampling.
"""

from __future__ import annotations

from .graph import SINK, SOURCE, AgentState, HiVAGraph, Tool
from .method import HiVA, fresh_graph
from .settings import CALL_KINDS, MODES, HiVASettings

__all__ = [
    "CALL_KINDS",
    "MODES",
    "SINK",
    "SOURCE",
    "AgentState",
    "HiVA",
    "HiVAGraph",
    "HiVASettings",
    "Tool",
    "fresh_graph",
]
