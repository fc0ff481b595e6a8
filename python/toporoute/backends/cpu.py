"""CPU backend: thin calls into the compiled core. Arrays are batched and validated by :mod:`toporoute.ops`;
the core re-checks dtypes and shapes, never copies its inputs, releases the GIL and raises
:mod:`toporoute.errors` exceptions. ``isa`` selects a SIMD level for tests (default: the process-wide choice)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from ..types.op_table import OPS
from ..types.results import (
    BanditSelection,
    BetaState,
    DagEdits,
    DagRepair,
    Density,
    GraphStats,
    Order,
    Routes,
    SynergyState,
    TeamProjection,
    TeamSchedule,
    TeamScores,
    dag_edits_of,
    dag_repair_of,
    graph_stats_of,
    order_of,
    routes_of,
    team_projection_of,
    team_schedule_of,
    team_scores_of,
)

if TYPE_CHECKING:
    from ..types.qmix_params import QMixParams

try:
    from .. import _core
except ImportError as exc:  # built without a C++ compiler, or a broken build
    _core = None  # type: ignore[assignment]
    _IMPORT_ERROR = str(exc)
else:
    _IMPORT_ERROR = ""

__all__ = [
    "KERNELS",
    "available",
    "bandit_select",
    "bandit_update",
    "conductor_check",
    "conductor_density",
    "dag_edit",
    "dag_repair",
    "graph_stats",
    "mean_pool",
    "qmix_forward",
    "qmix_mix",
    "qmix_weights",
    "route",
    "route_indexed",
    "synergy_update",
    "team_project",
    "team_schedule",
    "team_scores",
    "topology_distance",
    "toposort",
]


def available() -> tuple[bool, str]:
    if _core is None:
        return False, f"toporoute._core is not built ({_IMPORT_ERROR}); reinstall with a C++ compiler"
    return True, ""


def has_op(name: str) -> bool:
    """Whether this build of the core has the op ``name`` (a core built before the op was added lacks it)."""
    return _core is not None and hasattr(_core, name)


def route(
    q: np.ndarray, k: np.ndarray, *, tau: float, k_in: int, active: np.ndarray | None, isa: str = ""
) -> Routes:
    return routes_of(_core.route(q, k, active, tau, k_in, isa))


def route_indexed(
    table: np.ndarray,
    q_rows: np.ndarray,
    k_rows: np.ndarray,
    *,
    tau: float,
    k_in: int,
    active: np.ndarray | None = None,
    pool: Sequence[tuple[np.ndarray, np.ndarray, np.ndarray]] | None = None,
    isa: str = "",
) -> Routes:
    """Indexed routing; with ``pool``, pooling into ``table`` and routing run in one core call."""
    if not pool:
        return routes_of(_core.route_indexed(table, q_rows, k_rows, active, tau, k_in, isa))
    hiddens, masks, rows = (list(x) for x in zip(*pool))
    return routes_of(_core.pool_route(hiddens, masks, rows, table, q_rows, k_rows, active, tau, k_in, isa))


def mean_pool(
    hidden: np.ndarray, mask: np.ndarray, *, out: np.ndarray | None, rows: np.ndarray | None
) -> np.ndarray:
    return _core.mean_pool(hidden, mask, out, rows)


def toposort(adj: np.ndarray, *, weights: np.ndarray | None, active: np.ndarray | None) -> Order:
    return order_of(_core.toposort(adj, weights, active))


def graph_stats(adj: np.ndarray, *, active: np.ndarray | None, prev: np.ndarray | None) -> GraphStats:
    return graph_stats_of(_core.graph_stats(adj, active, prev))


def dag_edit(
    adj: np.ndarray, alive: np.ndarray, edits: np.ndarray, *, source: int, sink: int, max_out: int
) -> DagEdits:
    return dag_edits_of(_core.dag_edit(adj, alive, edits, source, sink, max_out))


def dag_repair(
    adj: np.ndarray,
    alive: np.ndarray,
    edge_alpha: np.ndarray | None,
    edge_beta: np.ndarray | None,
    *,
    source: int,
    sink: int,
    threshold: float,
    min_obs: float,
    prior: float,
    max_out: int,
) -> DagRepair:
    return dag_repair_of(
        _core.dag_repair(adj, alive, edge_alpha, edge_beta, source, sink, threshold, min_obs, prior, max_out)
    )


def team_project(
    adj: np.ndarray,
    alive: np.ndarray,
    roles: np.ndarray,
    sink: np.ndarray,
    edits: np.ndarray,
    *,
    protected: np.ndarray | None,
    critical: np.ndarray | None,
    scores: np.ndarray | None,
    generation: np.ndarray | None,
    budget_pairs: int,
    budget_edges: int,
    max_removals: int,
    max_pure_births: int,
    max_pure_deaths: int,
    n_min: int,
    n_max: int,
) -> TeamProjection:
    return team_projection_of(
        _core.team_project(
            adj,
            alive,
            roles,
            sink,
            edits,
            protected,
            critical,
            scores,
            generation,
            budget_pairs,
            budget_edges,
            max_removals,
            max_pure_births,
            max_pure_deaths,
            n_min,
            n_max,
        )
    )


def team_schedule(adj: np.ndarray, alive: np.ndarray) -> TeamSchedule:
    return team_schedule_of(_core.team_schedule(adj, alive))


def team_scores(
    history: np.ndarray, present: np.ndarray, *, eta: float, window: int, death_threshold: float
) -> TeamScores:
    return team_scores_of(_core.team_scores(history, present, eta, window, death_threshold))


def topology_distance(
    adj_a: np.ndarray,
    alive_a: np.ndarray,
    adj_b: np.ndarray,
    alive_b: np.ndarray,
    *,
    gen_a: np.ndarray | None,
    gen_b: np.ndarray | None,
) -> np.ndarray:
    distance: np.ndarray = _core.topology_distance(adj_a, alive_a, adj_b, alive_b, gen_a, gen_b)
    return distance


def conductor_density(nodes: np.ndarray, edges: np.ndarray, steps: np.ndarray, n_max: np.ndarray) -> Density:
    shape = nodes.shape
    flat = [np.ascontiguousarray(a.reshape(-1)) for a in (nodes, edges, steps, n_max)]
    return Density(*(r.reshape(shape) for r in _core.conductor_density(*flat)))


def qmix_weights(params: QMixParams) -> Any:
    """The params' weights packed for the core (``_core.QMixWeights``), built once and cached on the params."""
    return params.packed("cpu", _core.QMixWeights)


def qmix_forward(
    params: QMixParams,
    obs: np.ndarray,
    adj: np.ndarray,
    hidden: np.ndarray | None,
    *,
    active: np.ndarray | None,
    isa: str = "",
) -> tuple[np.ndarray, np.ndarray]:
    return _core.qmix_forward(qmix_weights(params), obs, adj, hidden, active, isa)


def qmix_mix(params: QMixParams, q_taken: np.ndarray, state: np.ndarray, *, isa: str = "") -> np.ndarray:
    return _core.qmix_mix(qmix_weights(params), q_taken, state, isa)


DEFERRED = 255  # the core's code for a plan outside its block layout: checked by the reference


def conductor_raw(texts: list[str], contexts: list[Any], options: Any) -> dict[str, Any]:
    """The core's own output for a batch of plans: :data:`DEFERRED` where it hands a plan back."""
    shared = list({id(c): c for c in contexts}.values())
    index = {id(c): k for k, c in enumerate(shared)}
    pool = {r: i for i, r in enumerate(options.pool)}
    nodes = [n for c in shared for n in c.nodes]
    return _core.conductor_check(
        [t.encode("utf-8", "surrogatepass") for t in texts],
        list(options.pool),
        np.asarray([index[id(c)] for c in contexts], np.int64),
        np.asarray([c.turn for c in shared], np.int32),
        np.cumsum([0] + [len(c.nodes) for c in shared]).astype(np.int64),
        [n.id for n in nodes],
        np.asarray([pool[n.role] for n in nodes], np.int16),
        np.asarray([n.turn for n in nodes], np.int32),
        options.lenient,
        options.strict_tester,
        options.concise,
        options.max_bytes,
        options.max_depth,
        options.max_agents,
        options.max_refs,
    )


def conductor_check(texts: list[str], contexts: list[Any], options: Any) -> Any:
    """Plans in the compiled core (OpenMP over the batch); those it hands back go to the reference."""
    from ..types.conductor_topology import TopologyBatch, assemble, check

    out = conductor_raw(texts, contexts, options)

    def text(b: bytes | None) -> str | None:
        return None if b is None else b.decode("utf-8", "surrogatepass")

    batch = TopologyBatch(
        **{name: out[name] for name in TopologyBatch.ARRAYS},
        node_id=tuple(out["node_id"]),
        message=tuple(text(m) or "" for m in out["message"]),
        yaml=tuple(text(y) for y in out["yaml"]),
        warnings=tuple(tuple(text(w) or "" for w in ws) for ws in out["warnings"]),
        contexts=tuple(contexts),
        options=options,
    )
    if not (batch.error == DEFERRED).any():
        return batch
    items = [
        check(texts[b], contexts[b], options) if batch.error[b] == DEFERRED else batch.item(b)
        for b in range(len(batch))
    ]
    return assemble(items, contexts, options)


_MODE_CODES = {"thompson": 0, "mean": 1}


def bandit_select(
    adj: np.ndarray,
    alpha: np.ndarray,
    beta: np.ndarray,
    k: int,
    *,
    weights: np.ndarray | None,
    seed: int,
    step: int,
    mode: str,
    active: np.ndarray | None,
    graph_offset: int,
) -> BanditSelection:
    chosen, choices, theta = _core.bandit_select(
        adj, alpha, beta, weights, active, k, seed, step, _MODE_CODES[mode], graph_offset
    )
    return BanditSelection(chosen, choices, theta)


def bandit_update(
    alpha: np.ndarray,
    beta: np.ndarray,
    selected: np.ndarray,
    reward: np.ndarray,
    *,
    dt: np.ndarray | None,
    gamma: float,
    km: np.ndarray | None,
    delta: float,
    prior: float,
) -> BetaState:
    return BetaState(*_core.bandit_update(alpha, beta, selected, reward, dt, km, gamma, delta, prior))


def synergy_update(
    c_syn: np.ndarray,
    edge_alpha: np.ndarray,
    edge_beta: np.ndarray,
    routed: np.ndarray,
    reward: np.ndarray,
    *,
    lr: float,
) -> SynergyState:
    return SynergyState(*_core.synergy_update(c_syn, edge_alpha, edge_beta, routed, reward, lr))


# every op of the op table (one an older build of the core lacks: has_op, checked by backends.kernel)
KERNELS: dict[str, Callable[..., Any]] = {name: globals()[name] for name in OPS}
