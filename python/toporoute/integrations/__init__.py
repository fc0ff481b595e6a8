"""toporoute as the routing part of other agent frameworks (optional extras; the core never imports them).

- :mod:`.langgraph` (extra ``langgraph``): a LangGraph ``StateGraph`` of agent nodes (any LangChain chat model
  or runnable) whose message passing each superstep is decided by a toporoute routing: DyTopo's descriptor
  matching by default, a fixed graph, or an Agent Q-Mix checkpoint; the manager's halt decision ends the graph.
- :mod:`.autogen` (extra ``autogen``): a ``selector_func`` / ``candidate_func`` for AutoGen AgentChat's
  ``SelectorGroupChat`` that picks the next speaker by descriptor matching, and a helper that builds the team.
- :mod:`.rounds`: what both share, without importing either framework: the agents' descriptor prompts and
  their parsing (DyTopo's), the routings, and :class:`~.rounds.RunRecorder`, which writes the same run folder
  and per-round trace records as ``toporoute run``, so ``toporoute report`` draws an adapter's runs.

Importing this package imports neither framework; the framework modules raise an ImportError naming the extra
when it is not installed.
"""

from __future__ import annotations

__all__: list[str] = []
