"""HiVA's evolving agent graph (spec §2–3): the pure state and its updates, no LLM.

The graph lives in fixed-capacity arrays over node slots (slot 0 the source ``v_s``, slot 1 the aggregator
``v_a``): ``adj[src, dst]`` bool and ``alive`` bool, the node Beta beliefs ``alpha, beta``, the edge Beta
``edge_alpha, edge_beta`` and the synergy ``c_syn``, plus each live slot's :class:`AgentState` (name, role,
prompt, tool). Every structural step is a core op on a batch of one graph: ``ops.toposort`` (levels),
``ops.bandit_weights`` (distance and synergy of each edge), ``ops.bandit_select`` (Thompson top-k),
``ops.dag_edit`` (checked edits), ``ops.dag_repair``, ``ops.bandit_update`` and ``ops.synergy_update``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ... import ops
from ...errors import InvalidArgumentError

__all__ = [
    "SINK",
    "SOURCE",
    "AgentState",
    "HiVAGraph",
    "Selection",
    "Tool",
    "distance_weights",
    "word_similarity",
    "words",
]

SOURCE = 0
SINK = 1
_PRIOR = 1.0


@dataclass(frozen=True)
class Tool:
    """An agent's tool: ``tool_function(input_data, **kwargs) -> str`` source, its version (0: the built-in
    one, trusted) and where it came from."""

    name: str
    source: str
    version: int = 0
    trusted: bool = True
    origin: str = "builtin"

    def to_json(self, with_source: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "name": self.name,
            "version": self.version,
            "trusted": self.trusted,
            "origin": self.origin,
        }
        if with_source:
            out["source"] = self.source
        return out


@dataclass
class AgentState:
    """One live node: its name (unique over the graph's life), role (source / aggregator / worker), system
    prompt, tool, the iteration it was made in, and how often it ran."""

    name: str
    role: str
    prompt: str
    tool: Tool
    created: int = 0
    visits: int = 0
    description: str = ""


@dataclass(frozen=True)
class Selection:
    """The bandit's picks for a set of executed nodes: ``chosen[src]`` the successors, best first, and θ."""

    chosen: dict[int, list[int]]
    theta: np.ndarray
    weights: np.ndarray


def distance_weights(omega: tuple[float, ...]) -> tuple[float, float, float, float]:
    """ω renormalised over the distance's indicators that exist here (Ψ1 only: no knowledge graph gives Ψ2
    or Ψ4, and Ψ3 is left out as a second count of θ's success history); all-zero weights stay zero."""
    present = (True, False, False, False)
    total = sum(w for w, on in zip(omega, present) if on)
    if total <= 0:
        return (0.0, 0.0, 0.0, 0.0)
    w = [w / total if on else 0.0 for w, on in zip(omega, present)]
    return (w[0], w[1], w[2], w[3])


def words(text: str) -> frozenset[str]:
    """Lower-case words of three or more letters (the stand-in for concepts; for embeddings too when
    ``similarity="lexical"``)."""
    return frozenset(w for w in re.findall(r"[a-z][a-z0-9_]{2,}", text.lower()))


def word_similarity(a: frozenset[str], b: frozenset[str]) -> tuple[float, float]:
    """(Jaccard, cosine) of two word sets (0 when either is empty)."""
    if not a or not b:
        return 0.0, 0.0
    inter = len(a & b)
    return inter / len(a | b), inter / math.sqrt(len(a) * len(b))


@dataclass
class HiVAGraph:
    """The state HiVA evolves (see the module). Make one with :meth:`initial`."""

    adj: np.ndarray
    alive: np.ndarray
    alpha: np.ndarray
    beta: np.ndarray
    last_update: np.ndarray
    c_syn: np.ndarray
    edge_alpha: np.ndarray
    edge_beta: np.ndarray
    agents: dict[int, AgentState]
    c0: float = 1.0
    serial: int = 2
    iteration: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def initial(
        cls, capacity: int, source: AgentState, aggregator: AgentState, *, c0: float = 1.0
    ) -> HiVAGraph:
        """``v_s → v_a`` with prior beliefs (α = β = 1) and synergy ``c0`` everywhere."""
        if capacity < 2:
            raise InvalidArgumentError(f"capacity must be >= 2; got {capacity}", "capacity")
        n = capacity
        adj = np.zeros((n, n), dtype=bool)
        adj[SOURCE, SINK] = True
        alive = np.zeros(n, dtype=bool)
        alive[[SOURCE, SINK]] = True
        return cls(
            adj=adj,
            alive=alive,
            alpha=np.full(n, _PRIOR, np.float32),
            beta=np.full(n, _PRIOR, np.float32),
            last_update=np.zeros(n, np.int64),
            c_syn=np.full((n, n), c0, np.float32),
            edge_alpha=np.full((n, n), _PRIOR, np.float32),
            edge_beta=np.full((n, n), _PRIOR, np.float32),
            agents={SOURCE: source, SINK: aggregator},
            c0=c0,
        )

    @property
    def capacity(self) -> int:
        return int(self.adj.shape[0])

    def nodes(self) -> list[int]:
        """Live slots in index order."""
        return [int(i) for i in np.flatnonzero(self.alive)]

    def successors(self, node: int) -> list[int]:
        return [int(j) for j in np.flatnonzero(self.adj[node] & self.alive) if j != node]

    def name(self, node: int) -> str:
        return self.agents[node].name

    def slot_of(self, name: str) -> int | None:
        return next((i for i, a in self.agents.items() if a.name == name), None)

    def edges(self) -> list[tuple[int, int]]:
        live = self.adj & self.alive[:, None] & self.alive[None, :]
        return [(int(s), int(d)) for s, d in zip(*np.nonzero(live))]

    # ---------------------------------------------------------------------------------------------- order

    def levels(self) -> tuple[list[int], dict[int, int]]:
        """Topological order of the live nodes (``ops.toposort``) and each live node's level."""
        order = ops.toposort(self.adj[None], active=self.alive[None])
        sigma = [int(i) for i in np.asarray(order.order)[0] if self.alive[int(i)]]
        level = np.asarray(order.level)[0]
        return sigma, {i: int(level[i]) for i in sigma}

    # ---------------------------------------------------------------------------------------------- routing

    def weights(
        self,
        selected: set[int],
        similarity: dict[int, tuple[float, float]],
        lam: float,
        eta: float,
        omega: tuple[float, ...],
        threshold: float,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Edge weights ``exp(-λ·Dist(A_d, task)) · ζ(S ∪ {d})^η`` for every live edge (spec §3.1, the no-KG
        fallback: d_I = 1, Ψ1 = 0.5·(1 - Jaccard) + 0.5·(1 - cos)/2 from ``similarity[node] = (Jaccard,
        cosine)`` of the node to the task); the aggregator's weight is 1 and it stays out of ζ; candidates
        beyond the distance threshold are dropped, the nearest always kept (``ops.bandit_weights`` on this
        graph). Returns ``(weights (N, N) float32, psi_sum (N,))``.

        ω is renormalised over the indicators that exist (:func:`distance_weights`), so that Σ ω Ψ spans
        [0, 1] and the threshold can act: without a knowledge graph Ψ2 and Ψ4 do not exist, and Ψ3's fallback
        1 - α/(α+β) would count the node's own success history a second time (θ is drawn from the same Beta),
        so Dist is Ψ1 alone."""
        n = self.capacity
        sel = np.zeros(n, bool)
        sel[sorted(selected)] = True
        sim = np.zeros((n, 2))
        for i, pair in similarity.items():
            sim[i] = pair
        out = ops.bandit_weights(
            self.adj,
            self.alive,
            self.alpha,
            self.beta,
            self.c_syn,
            sim,
            sel,
            sink=SINK,
            lam=lam,
            eta=eta,
            omega1=distance_weights(omega)[0],
            omega3=0.0,
            threshold=threshold,
            c0=self.c0,
        )
        return out.weights, out.psi

    def select(
        self, sources: list[int], weights: np.ndarray, *, k: int, seed: int, step: int, mode: str
    ) -> Selection:
        """``ops.bandit_select`` over the out-edges of ``sources`` (the executed nodes of one level)."""
        mask = np.zeros(self.capacity, bool)
        mask[sources] = True
        adj = self.adj & mask[:, None]
        sel = ops.bandit_select(
            adj[None],
            self.alpha[None],
            self.beta[None],
            k,
            weights=weights[None].astype(np.float32),
            seed=seed,
            step=step,
            mode=mode,
            active=self.alive[None],
        )
        choices = np.asarray(sel.choices)[0]
        chosen = {s: [int(c) for c in choices[s] if c >= 0] for s in sources}
        return Selection(chosen, np.asarray(sel.theta)[0].copy(), weights)

    # ---------------------------------------------------------------------------------------------- updates

    def update_beliefs(
        self, executed: list[int], reward: dict[int, float], km: np.ndarray, *, gamma: float, delta: float
    ) -> None:
        """Eq. B1 with decay towards the prior: executed nodes are updated with their reward, their decay
        ``gamma ** Δt`` counted in iterations since their last update; the others are left as they are."""
        n = self.capacity
        sel = np.zeros(n, bool)
        r = np.zeros(n, np.float32)
        dt = np.zeros(n, np.float32)
        for i in executed:
            sel[i] = True
            r[i] = reward.get(i, 0.0)
            dt[i] = float(max(1, self.iteration - int(self.last_update[i])))
        out = ops.bandit_update(
            self.alpha[None],
            self.beta[None],
            sel[None],
            r[None],
            dt=dt[None],
            gamma=gamma,
            km=np.clip(km, 0.0, 1.0).astype(np.float32)[None],
            delta=delta,
            prior=_PRIOR,
        )
        self.alpha = np.asarray(out.alpha, np.float32)[0].copy()
        self.beta = np.asarray(out.beta, np.float32)[0].copy()
        for i in executed:
            self.last_update[i] = self.iteration

    def update_synergy(self, routed: np.ndarray, reward: dict[int, float], *, lr: float) -> None:
        """Eq. B2 over the routed edges (``routed[src, dst]`` counts), each edge rewarded with its destination's
        reward."""
        r = np.zeros(self.capacity, np.float32)
        for i, v in reward.items():
            r[i] = v
        out = ops.synergy_update(
            self.c_syn[None],
            self.edge_alpha[None],
            self.edge_beta[None],
            routed.astype(np.float32)[None],
            r[None],
            lr=lr,
        )
        self.c_syn = np.asarray(out.c_syn, np.float32)[0].copy()
        self.edge_alpha = np.asarray(out.edge_alpha, np.float32)[0].copy()
        self.edge_beta = np.asarray(out.edge_beta, np.float32)[0].copy()

    def apply_edits(self, rows: list[tuple[int, int, int]], *, max_out: int) -> list[tuple[bool, str, int]]:
        """Applies ``(kind, node, arg)`` edits in order with ``ops.dag_edit`` (each checked at once); returns
        ``(accepted, reason, new node slot or -1)`` per edit. New slots get prior beliefs and synergy ``c0``;
        slots the edits freed are cleared."""
        if not rows:
            return []
        edits = np.asarray(rows, np.int32).reshape(1, len(rows), 3)
        out = ops.dag_edit(self.adj[None], self.alive[None], edits, source=SOURCE, sink=SINK, max_out=max_out)
        self.adj = np.asarray(out.adj, bool)[0].copy()
        self.alive = np.asarray(out.alive, bool)[0].copy()
        reasons = ops.EDIT_REASONS
        accepted = np.asarray(out.accepted)[0]
        codes = np.asarray(out.reason)[0]
        new = np.asarray(out.new_node)[0]
        result = []
        for e in range(len(rows)):
            code = int(codes[e])
            reason = reasons[code] if 0 <= code < len(reasons) else f"code {code}"
            result.append((bool(accepted[e]), str(reason), int(new[e])))
            if int(new[e]) >= 0:
                self._fresh(int(new[e]))
        self._drop_dead()
        return result

    def repair(self, *, threshold: float, min_obs: int, max_out: int) -> dict[str, Any]:
        """``ops.dag_repair`` at the end of an iteration; returns what it changed, by name."""
        names = {i: a.name for i, a in self.agents.items()}
        out = ops.dag_repair(
            self.adj[None],
            self.alive[None],
            self.edge_alpha[None],
            self.edge_beta[None],
            source=SOURCE,
            sink=SINK,
            threshold=threshold,
            min_obs=min_obs,
            prior=_PRIOR,
            max_out=max_out,
        )
        self.adj = np.asarray(out.adj, bool)[0].copy()
        self.alive = np.asarray(out.alive, bool)[0].copy()

        def pairs(m: Any) -> list[list[str]]:
            a = np.asarray(m, bool)[0]
            return [[names.get(int(s), str(s)), names.get(int(d), str(d))] for s, d in zip(*np.nonzero(a))]

        report = {
            "pruned_nodes": [
                names.get(int(i), str(i)) for i in np.flatnonzero(np.asarray(out.pruned_nodes)[0])
            ],
            "pruned_edges": pairs(out.pruned_edges),
            "added_edges": pairs(out.added_edges),
        }
        self._drop_dead()
        return report

    def _fresh(self, slot: int) -> None:
        self.alpha[slot] = self.beta[slot] = _PRIOR
        self.last_update[slot] = self.iteration
        self.c_syn[slot, :] = self.c_syn[:, slot] = self.c0
        self.edge_alpha[slot, :] = self.edge_alpha[:, slot] = _PRIOR
        self.edge_beta[slot, :] = self.edge_beta[:, slot] = _PRIOR

    def _drop_dead(self) -> None:
        for slot in [i for i in self.agents if not self.alive[i]]:
            del self.agents[slot]
        gone = ~self.adj
        self.edge_alpha[gone] = _PRIOR
        self.edge_beta[gone] = _PRIOR

    def add_agent(self, slot: int, agent: AgentState) -> None:
        """Names the live slot ``slot`` (a node an edit just made)."""
        if not self.alive[slot]:
            raise InvalidArgumentError(f"slot {slot} is not alive", "slot")
        self.agents[slot] = agent

    def new_name(self) -> str:
        self.serial += 1
        return f"agent_{self.serial - 1}"

    # ---------------------------------------------------------------------------------------------- records

    def snapshot(self) -> dict[str, Any]:
        """The graph as the trace records it: nodes (slot, name, role, prompt, tool, α, β, visits), edges with
        their synergy and edge Beta."""
        return {
            "nodes": [
                {
                    "slot": i,
                    "name": a.name,
                    "role": a.role,
                    "prompt": a.prompt,
                    "tool": a.tool.to_json(),
                    "alpha": round(float(self.alpha[i]), 4),
                    "beta": round(float(self.beta[i]), 4),
                    "visits": a.visits,
                    "created": a.created,
                }
                for i, a in sorted(self.agents.items())
            ],
            "edges": [
                {
                    "src": self.name(s),
                    "dst": self.name(d),
                    "synergy": round(float(self.c_syn[s, d]), 4),
                    "edge_alpha": round(float(self.edge_alpha[s, d]), 4),
                    "edge_beta": round(float(self.edge_beta[s, d]), 4),
                }
                for s, d in self.edges()
            ],
        }

    def copy(self) -> HiVAGraph:
        return replace(
            self,
            adj=self.adj.copy(),
            alive=self.alive.copy(),
            alpha=self.alpha.copy(),
            beta=self.beta.copy(),
            last_update=self.last_update.copy(),
            c_syn=self.c_syn.copy(),
            edge_alpha=self.edge_alpha.copy(),
            edge_beta=self.edge_beta.copy(),
            agents={i: replace(a) for i, a in self.agents.items()},
            history=list(self.history),
        )
