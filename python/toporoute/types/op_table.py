"""The op table: every core op declared once: its name, its arguments in the order every backend's kernel takes
them, which of them carry the batch axis, the type it returns and one line on what it does.

From one declaration :mod:`toporoute.ops` builds the op's dispatch (validate, pick the backend, add the batch
axis to a single graph, call, drop it again: :func:`toporoute.ops._dispatch.dispatcher`), the CPU backend
generates its thin kernels over :mod:`toporoute._core`, and ``toporoute info``, ``toporoute bench`` and the
tests' backend grid list the ops. Each backend registers the ops it has a kernel for in its ``KERNELS``
mapping (name -> function taking :attr:`OpSpec.args` in order); a backend without a kernel for an op simply
does not register it, and :func:`toporoute.backends.kernel` refuses the call, naming the op and the backend.
The reference registers every op: it defines the semantics and is the oracle of the others.

Adding an op: its entry here, its checks and public function in its family's :mod:`toporoute.ops` module (in
that module's ``__all__``), its reference function (in its family module's ``__all__``) and its sample inputs
(that module's ``SAMPLES``: ``toporoute bench`` times the op on them and the tests' grid checks every backend
against the reference on them), its kernels and their bindings (a binding that takes these arguments in order
needs no line in ``backends/cpu.py`` or ``_core.pyi``), and its own tests (README, "Adding an op").
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["OPS", "Arg", "OpSpec"]


@dataclass(frozen=True)
class Arg:
    """One argument of an op, as its kernels take it.

    Attributes
    ----------
    name : str
        The keyword of the public function and of every kernel.
    layout : str
        Shape and dtype as the kernels see them (batched), or the scalar's type and range, for docs and
        listings; the checks that enforce it are the op's validator in :mod:`toporoute.ops`.
    batch : bool
        Carries the batch axis: a single-graph call gets one added here (``None`` stays ``None``).
    """

    name: str
    layout: str
    batch: bool = False


def _args(spec: str) -> tuple[Arg, ...]:
    """``"name: layout; ..."``; a ``*`` before the name marks an argument that carries the batch axis."""
    out = []
    for part in spec.split(";"):
        name, layout = (s.strip() for s in part.split(":", 1))
        out.append(Arg(name.lstrip("*"), layout, name.startswith("*")))
    return tuple(out)


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
    args : tuple of Arg
        The kernels' arguments, in the order every backend's kernel takes them.
    lead : str
        The argument whose rank tells a batch (``rank``) from a single graph (``rank - 1``); empty for ops
        without a single-graph form.
    rank : int
        The batched rank of ``lead``.
    device : str
        The array argument whose placement (host or a CUDA device) picks the backend; empty: host only.
    """

    name: str
    returns: str
    summary: str
    args: tuple[Arg, ...]
    lead: str = ""
    rank: int = 0
    device: str = ""

    def index(self, name: str) -> int:
        """The position of argument ``name`` in :attr:`args`."""
        return [a.name for a in self.args].index(name)


_GRAPH = "*adj: (B, N, N) bool"
_ALIVE = "*alive: (B, N) bool"
_ACTIVE = "*active: (B, N) bool or None"

OPS: dict[str, OpSpec] = {
    op.name: op
    for op in (
        OpSpec(
            "route", "Routes", "cosine match of needs and offers, threshold and in-degree cap (DyTopo)",
            _args(f"*q: (B, N, D) float32; *k: (B, N, D) float32; {_ACTIVE}; tau: float in [-1, 1];"
                  " k_in: int >= 0 (0: no cap)"),
            "q", 3, "q",
        ),
        OpSpec(
            "route_indexed", "Routes", "route over rows of one embedding table, optionally pooling first",
            _args("table: (M, D) float32; *q_rows: (B, N) int32 or int64; *k_rows: (B, N) int32 or int64;"
                  f" tau: float in [-1, 1]; k_in: int >= 0; {_ACTIVE};"
                  " pool: (hidden, mask, rows) triples or None"),
            "q_rows", 2, "table",
        ),
        OpSpec(
            "nearest", "ndarray", "the k rows of a table nearest each query by cosine, among the rows kept",
            _args("table: (M, D) float32; *queries: (B, D) float32; k: int >= 1; *keep: (B, M) bool or None"),
            "queries", 2, "queries",
        ),
        OpSpec(
            "mean_pool", "ndarray", "masked mean pooling and L2 normalisation of token states",
            _args("hidden: (n, L, D) float32; mask: (n, L) bool, int32 or int64; out: (M, D) float32 or None;"
                  " rows: (n,) int32 or int64 or None"),
            device="hidden",
        ),
        OpSpec(
            "toposort", "Order", "greedy topological order with cycle breaking and concurrent levels",
            _args(f"{_GRAPH}; *weights: (B, N, N) float32 or None; {_ACTIVE}"), "adj", 3, "adj",
        ),
        OpSpec(
            "graph_stats", "GraphStats", "edges, density, degrees, reciprocity, Jaccard to a previous graph",
            _args(f"{_GRAPH}; {_ACTIVE}; *prev: (B, N, N) bool or None"), "adj", 3, "adj",
        ),
        OpSpec(
            "conductor_density", "Density", "AgentConductor's density reward r_g",
            _args("nodes: int64 array; edges: int64 array; steps: int64 array; n_max: int64 array"),
            device="nodes",
        ),
        OpSpec(
            "conductor_check", "TopologyBatch", "AgentConductor YAML plans parsed and checked into DAGs",
            _args("texts: list of str (B); contexts: list of Context (B); options: CheckOptions"),
        ),
        OpSpec(
            "qmix_forward", "QMixStep", "the Agent Q-Mix agent network: GNN, GRU memory, Q-head",
            _args("params: QMixParams; *obs: (B, N, obs_dim) float32; *adj: (B, N, N) bool;"
                  f" *hidden: (B, N, H) float32 or None; {_ACTIVE}"),
            "obs", 3, "obs",
        ),
        OpSpec(
            "qmix_mix", "ndarray", "the Agent Q-Mix monotonic mixer",
            _args("params: QMixParams; *q_taken: (B, n_agents) float32; *state: (B, state_dim) float32"),
            "q_taken", 2, "q_taken",
        ),
        OpSpec(
            "qmix_graph", "QMixGraph", "Agent Q-Mix's round graph from the agents' communication actions (phi)",
            _args("*actions: (B, N) int32 or int64 in [0, 6), N <= 64"), "actions", 2, "actions",
        ),
        OpSpec(
            "bandit_select", "BanditSelection", "HiVA's Thompson-sampling top-k successors",
            _args(f"{_GRAPH}; *alpha: (B, N) float32; *beta: (B, N) float32; k: int >= 1;"
                  " *weights: (B, N, N) float32 or None; seed: int in [0, 2**64); step: int in [0, 2**32);"
                  f" mode: 'thompson' or 'mean'; {_ACTIVE}; graph_offset: int >= 0, graph_offset + B <= 2**32"),
            "adj", 3, "adj",
        ),
        OpSpec(
            "bandit_update", "BetaState", "HiVA's decayed Beta beliefs of the agents",
            _args("*alpha: (B, N) float32; *beta: (B, N) float32; *selected: (B, N) bool;"
                  " *reward: (B, N) float32; *dt: (B, N) float32 or None; *km: (B, N) float32 or None;"
                  " gamma: float in [0, 1]; delta: float >= 0; prior: float > 0"),
            "alpha", 2, "alpha",
        ),
        OpSpec(
            "synergy_update", "SynergyState", "HiVA's edge Betas and synergy of the routed edges",
            _args("*c_syn: (B, N, N) float32; *edge_alpha: (B, N, N) float32; *edge_beta: (B, N, N) float32;"
                  " *routed: (B, N, N) float32; *reward: (B, N) float32; lr: float >= 0"),
            "c_syn", 3, "c_syn",
        ),
        OpSpec(
            "bandit_weights", "EdgeWeights", "HiVA's edge weights: knowledge distance and synergy of each successor",
            _args(f"{_GRAPH}; {_ALIVE}; *alpha: (B, N) float32; *beta: (B, N) float32; *c_syn: (B, N, N) float32;"
                  " *similarity: (B, N, 2) float64; *selected: (B, N) bool; sink: int in [0, N); lam: float >= 0;"
                  " eta: float >= 0; omega1: float >= 0; omega3: float >= 0; threshold: float; c0: float > 0"),
            "adj", 3, "adj",
        ),
        OpSpec(
            "dag_edit", "DagEdits", "HiVA's DAG edits, each checked at once",
            _args(f"{_GRAPH}; {_ALIVE}; *edits: (B, E, 3) int32; source: int; sink: int; max_out: int >= 1"),
            "adj", 3, "adj",
        ),
        OpSpec(
            "dag_repair", "DagRepair", "HiVA's DAG repair: cycles broken, dead nodes and edges pruned",
            _args(f"{_GRAPH}; {_ALIVE}; *edge_alpha: (B, N, N) float32 or None;"
                  " *edge_beta: (B, N, N) float32 or None; source: int; sink: int; threshold: float in [0, 1];"
                  " min_obs: float >= 0; prior: float >= 0; max_out: int >= 1"),
            "adj", 3, "adj",
        ),
        OpSpec(
            "team_project", "TeamProjection", "TacoMAS's team operations projected onto a valid graph",
            _args(f"{_GRAPH}; {_ALIVE}; *roles: (B, N) int32; sink: (B,) int32; *edits: (B, P, 4) int32;"
                  " *protected: (B, N) bool or None; *critical: (B, R) bool or None;"
                  " *scores: (B, N) float32 or None; *generation: (B, N) int32 or None; budget_pairs: int >= 0;"
                  " budget_edges: int >= 0; max_removals: int >= 0; max_pure_births: int >= 0;"
                  " max_pure_deaths: int >= 0; n_min: int >= 0; n_max: int >= n_min"),
            "adj", 3, "adj",
        ),
        OpSpec(
            "team_schedule", "TeamSchedule", "strongly connected components in waves, lagged edges",
            _args(f"{_GRAPH}; {_ALIVE}"), "adj", 3, "adj",
        ),
        OpSpec(
            "team_scores", "TeamScores", "judged scores into means, replicator weights, trends",
            _args("*history: (B, T, N) float32; *present: (B, T, N) bool; eta: float > 0; window: int >= 2;"
                  " death_threshold: float in [0, 1]"),
            "history", 3, "history",
        ),
        OpSpec(
            "topology_distance", "ndarray", "node and edge symmetric difference of two team graphs",
            _args("*adj_a: (B, N, N) bool; *alive_a: (B, N) bool; *adj_b: (B, N, N) bool;"
                  " *alive_b: (B, N) bool; *gen_a: (B, N) int32 or None; *gen_b: (B, N) int32 or None"),
            "adj_a", 3, "adj_a",
        ),
    )
}  # fmt: skip
