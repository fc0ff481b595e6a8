"""The op table: every core op declared once, by name, with the type it returns and one line on what it does.

Each backend registers the ops it has a kernel for in its ``KERNELS`` mapping (name -> function); a backend
with no kernel for an op simply does not register it, and :func:`toporoute.backends.kernel` then refuses the
call, naming the op and the backend (no stub that raises). The reference registers every op: it defines the
semantics and is the oracle of the others. Whatever lists the ops (``toporoute info``, the tests' backend
grid) reads this table and the registrations.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OPS", "OpSpec"]


@dataclass(frozen=True)
class OpSpec:
    """One core op.

    Attributes
    ----------
    name : str
        The name of the public function ``toporoute.ops.<name>`` and of every backend's kernel.
    returns : str
        The result type (a class of :mod:`toporoute.types.results`, or ``ndarray``).
    summary : str
        What it computes, in one line.
    """

    name: str
    returns: str
    summary: str


OPS: dict[str, OpSpec] = {
    op.name: op
    for op in (
        OpSpec("route", "Routes", "cosine match of needs and offers, threshold and in-degree cap (DyTopo)"),
        OpSpec("route_indexed", "Routes", "route over rows of one embedding table, optionally pooling first"),
        OpSpec("mean_pool", "ndarray", "masked mean pooling and L2 normalisation of token states"),
        OpSpec("toposort", "Order", "greedy topological order with cycle breaking and concurrent levels"),
        OpSpec(
            "graph_stats", "GraphStats", "edges, density, degrees, reciprocity, Jaccard to a previous graph"
        ),
        OpSpec("conductor_density", "Density", "AgentConductor's density reward r_g"),
        OpSpec("conductor_check", "TopologyBatch", "AgentConductor YAML plans parsed and checked into DAGs"),
        OpSpec("qmix_forward", "QMixStep", "the Agent Q-Mix agent network: GNN, GRU memory, Q-head"),
        OpSpec("qmix_mix", "ndarray", "the Agent Q-Mix monotonic mixer"),
        OpSpec("bandit_select", "BanditSelection", "HiVA's Thompson-sampling top-k successors"),
        OpSpec("bandit_update", "BetaState", "HiVA's decayed Beta beliefs of the agents"),
        OpSpec("synergy_update", "SynergyState", "HiVA's edge Betas and synergy of the routed edges"),
        OpSpec("dag_edit", "DagEdits", "HiVA's DAG edits, each checked at once"),
        OpSpec("dag_repair", "DagRepair", "HiVA's DAG repair: cycles broken, dead nodes and edges pruned"),
        OpSpec("team_project", "TeamProjection", "TacoMAS's team operations projected onto a valid graph"),
        OpSpec("team_schedule", "TeamSchedule", "strongly connected components in waves, lagged edges"),
        OpSpec("team_scores", "TeamScores", "judged scores into means, replicator weights, trends"),
        OpSpec("topology_distance", "ndarray", "node and edge symmetric difference of two team graphs"),
    )
}
