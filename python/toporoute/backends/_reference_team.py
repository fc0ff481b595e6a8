"""Reference (numpy) team edit projection (methods/tacomas.md §3 "Validation/apply", §8 A4-A6): the definition of
:func:`toporoute.ops.team_project` and the oracle of the compiled kernel.

Plain per-graph loops, written for reading; the compiled core does the same with bitset rows. Arrays arrive
batched and validated by the facade (shapes, dtypes, scalars); this module checks what needs a pass over the data
(dead or out-of-range sinks, self-loops, edges touching dead nodes, negative roles of alive nodes, non-finite
scores of alive nodes, generations out of range): the first bad graph is reported, its first problem in that
order.

Graph conventions: ``adj[b, src, dst]`` bool, ``alive[b, n]`` marks the nodes that exist; every alive node must
end up reaching ``sink[b]`` (reachability includes u == v). Cycles are allowed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..errors import InvalidArgumentError, NonFiniteError, OutOfRangeError
from ..types import team_codes as c
from ..types.results import TeamProjection
from .samples import TEAM, Call, Sample, team_project_inputs

__all__ = ["check_team_inputs", "team_project"]

_INT32_MAX = np.iinfo(np.int32).max


def check_team_inputs(
    adj: np.ndarray,
    alive: np.ndarray,
    roles: np.ndarray,
    sink: np.ndarray,
    scores: np.ndarray,
    generation: np.ndarray,
) -> None:
    """The data checks of :func:`team_project`. The first graph with a problem is reported, its first problem in
    this order: sink in [0, N) and alive; no self-loop; no edge touching a dead node; roles >= 0 where alive;
    scores finite where alive; generation in [0, 2**31 - 2] (a child gets its slot's generation + 1). Within a
    check, the first offending element in C order."""
    B, N = alive.shape
    in_range = (sink >= 0) & (sink < N)
    sink_alive = alive[np.arange(B), np.where(in_range, sink, 0)]
    loops = adj[:, np.arange(N), np.arange(N)]
    stray = adj & ~(alive[:, :, None] & alive[:, None, :])
    neg_role = alive & (roles < 0)
    nonfinite = alive & ~np.isfinite(scores)
    bad_gen = (generation < 0) | (generation >= _INT32_MAX)
    bad = np.stack(
        [
            ~(in_range & sink_alive),
            loops.any(axis=1),
            stray.any(axis=(1, 2)),
            neg_role.any(axis=1),
            nonfinite.any(axis=1),
            bad_gen.any(axis=1),
        ],
        axis=1,
    )
    if not bad.any():
        return
    b = int(np.flatnonzero(bad.any(axis=1))[0])
    check = int(np.flatnonzero(bad[b])[0])
    if check == 0:
        s = int(sink[b])
        if not in_range[b]:
            raise OutOfRangeError(f"sink[{b}] must be in [0, {N}); got {s}", arg="sink")
        raise InvalidArgumentError(f"sink[{b}] = {s} must be alive; got alive[{b}, {s}] False", arg="sink")
    if check == 1:
        n = int(np.flatnonzero(loops[b])[0])
        raise InvalidArgumentError(f"adj must have no self-loop; got adj[{b}, {n}, {n}] True", arg="adj")
    if check == 2:
        u, v = (int(x) for x in np.argwhere(stray[b])[0])
        dead = u if not alive[b, u] else v
        raise InvalidArgumentError(
            f"adj must have no edge touching a dead node; got adj[{b}, {u}, {v}] with alive[{b}, {dead}] False",
            arg="adj",
        )
    if check == 3:
        n = int(np.flatnonzero(neg_role[b])[0])
        raise OutOfRangeError(
            f"roles must be >= 0 for alive nodes; got roles[{b}, {n}] = {int(roles[b, n])}", arg="roles"
        )
    if check == 4:
        n = int(np.flatnonzero(nonfinite[b])[0])
        raise NonFiniteError(
            f"scores must be finite for alive nodes; got NaN or infinity at scores[{b}, {n}]", arg="scores"
        )
    n = int(np.flatnonzero(bad_gen[b])[0])
    raise OutOfRangeError(
        f"generation must be in [0, {_INT32_MAX - 1}]; got generation[{b}, {n}] = {int(generation[b, n])}",
        arg="generation",
    )


@dataclass(frozen=True)
class _Limits:
    """The budgets and size bounds of one call."""

    budget_pairs: int
    budget_edges: int
    max_removals: int
    max_pure_births: int
    max_pure_deaths: int
    n_min: int
    n_max: int


@dataclass
class _Step:
    """What one graph's step has decided so far (phase D and B): the dying nodes, the children and their rows."""

    dying: set[int] = field(default_factory=set)
    deaths: int = 0
    pure_deaths: int = 0
    births: int = 0
    pure_births: int = 0
    child_of_row: dict[int, int] = field(default_factory=dict)  # accepted REPLACE / BIRTH row -> child slot
    replaced_by: dict[int, int] = field(default_factory=dict)  # dying node -> its REPLACE child
    parent_of: dict[int, int] = field(default_factory=dict)  # BIRTH child -> parent
    child_role: dict[int, int] = field(default_factory=dict)  # child slot -> role
    fresh: list[int] = field(
        default_factory=list
    )  # slots not alive in the input, ascending; consumed in order


def _screen(kind: int, a: int, b: int, role: int, alive: np.ndarray) -> int:
    """Reason of the row-local checks (REASON_OK when the row passes to its phase)."""
    N = alive.shape[0]
    if kind == c.TEAM_PADDING:
        return c.REASON_PADDING
    if not c.TEAM_REPLACE <= kind <= c.TEAM_EDGE_REMOVE:
        return c.REASON_BAD_KIND

    def slot_ok(x: int) -> bool:
        return 0 <= x < N and bool(alive[x])

    if kind in (c.TEAM_EDGE_ADD, c.TEAM_EDGE_REMOVE):
        for x in (a, b):
            if x > -2 and not slot_ok(x):
                return c.REASON_UNKNOWN_NODE
        if a == b:
            return c.REASON_SELF_LOOP
        return c.REASON_OK
    if a <= -2:
        return c.REASON_PLACEHOLDER  # placeholders name children only in edge rows
    if not (slot_ok(a) or (kind == c.TEAM_BIRTH and a == c.TEAM_BEST_SCORER)):
        return c.REASON_UNKNOWN_NODE
    if kind != c.TEAM_DEATH and role < 0:
        return c.REASON_BAD_ROLE
    return c.REASON_OK


def _best(scores: np.ndarray, candidates: list[int], fallback: int) -> int:
    """The highest score among ``candidates`` (ascending indices; ties to the lower index), else ``fallback``."""
    best = fallback
    for v in candidates:
        if best == fallback or scores[v] > scores[best]:
            best = v
    return best


def _reaching(g: np.ndarray, sink: int) -> np.ndarray:
    """Mask of the nodes that reach ``sink`` along the edges of ``g`` (N, N); the sink itself included."""
    seen = np.zeros(g.shape[0], dtype=bool)
    seen[sink] = True
    stack = [sink]
    while stack:
        u = stack.pop()
        for v in np.flatnonzero(g[:, u] & ~seen):
            seen[v] = True
            stack.append(int(v))
    return seen


def _project_one(
    g: np.ndarray,
    alive: np.ndarray,
    roles: np.ndarray,
    generation: np.ndarray,
    edits: np.ndarray,
    *,
    sink: int,
    protected: np.ndarray,
    critical: np.ndarray,
    scores: np.ndarray,
    lim: _Limits,
    accepted: np.ndarray,
    reason: np.ndarray,
    new_node: np.ndarray,
    inherited: np.ndarray,
    repaired: np.ndarray,
) -> None:
    """One graph: ``g``, ``alive``, ``roles``, ``generation`` hold the input and are updated in place; the row
    outputs and the inherited / repaired masks are filled."""
    N = g.shape[0]
    P = edits.shape[0]
    in_alive = alive.copy()
    in_roles = roles.copy()
    rows = [tuple(int(x) for x in edits[p]) for p in range(P)]
    for p, (kind, a, b, role) in enumerate(rows):
        reason[p] = _screen(kind, a, b, role, in_alive)
    st = _Step(fresh=[int(v) for v in np.flatnonzero(~in_alive)])
    n_alive = int(in_alive.sum())

    def accept(p: int) -> None:
        accepted[p] = True
        reason[p] = c.REASON_OK

    def reject(p: int, why: int) -> None:
        reason[p] = why

    def survivors_of(r: int) -> int:
        """Alive agents of role r right now: input nodes not dying, plus the accepted REPLACE children."""
        olds = sum(1 for v in range(N) if in_alive[v] and v not in st.dying and in_roles[v] == r)
        return olds + sum(1 for ch in st.replaced_by.values() if st.child_role[ch] == r)

    # Phase D: REPLACE and DEATH rows
    for p, (kind, a, _b, role) in enumerate(rows):
        if kind not in (c.TEAM_REPLACE, c.TEAM_DEATH) or reason[p] != c.REASON_OK:
            continue
        pure = kind == c.TEAM_DEATH
        r = int(in_roles[a])
        alive_now = n_alive - st.pure_deaths
        if a == sink:
            reject(p, c.REASON_SINK)
        elif protected[a]:
            reject(p, c.REASON_PROTECTED)
        elif a in st.dying:
            reject(p, c.REASON_DUPLICATE)
        elif st.deaths + 1 > lim.budget_pairs or (not pure and st.births + 1 > lim.budget_pairs):
            reject(p, c.REASON_BUDGET_NODES)
        elif pure and st.pure_deaths + 1 > lim.max_pure_deaths:
            reject(p, c.REASON_BUDGET_PURE)
        elif r < critical.shape[0] and critical[r] and survivors_of(r) <= 1 and (pure or role != r):
            reject(p, c.REASON_CRITICAL_ROLE)
        elif pure and alive_now - 1 < lim.n_min:
            reject(p, c.REASON_MIN_NODES)
        elif not pure and not st.fresh:
            reject(p, c.REASON_NO_CAPACITY)
        else:
            accept(p)
            st.dying.add(a)
            st.deaths += 1
            if pure:
                st.pure_deaths += 1
            else:
                child = st.fresh.pop(0)
                st.births += 1
                st.child_of_row[p] = child
                st.replaced_by[a] = child
                st.child_role[child] = role

    # Phase B: BIRTH rows
    survivors = [v for v in range(N) if in_alive[v] and v not in st.dying and v != sink]
    best_parent = _best(scores, survivors, sink)
    for p, (kind, a, _b, role) in enumerate(rows):
        if kind != c.TEAM_BIRTH or reason[p] != c.REASON_OK:
            continue
        alive_now = n_alive - st.pure_deaths + st.pure_births
        if a in st.dying:
            reject(p, c.REASON_DEAD_NODE)
        elif st.births + 1 > lim.budget_pairs:
            reject(p, c.REASON_BUDGET_NODES)
        elif st.pure_births + 1 > lim.max_pure_births:
            reject(p, c.REASON_BUDGET_PURE)
        elif alive_now + 1 > lim.n_max:
            reject(p, c.REASON_MAX_NODES)
        elif not st.fresh:
            reject(p, c.REASON_NO_CAPACITY)
        else:
            accept(p)
            child = st.fresh.pop(0)
            st.births += 1
            st.pure_births += 1
            st.child_of_row[p] = child
            st.parent_of[child] = best_parent if a == c.TEAM_BEST_SCORER else a
            st.child_role[child] = role

    # Apply deaths, then births (inherited edges and newborn wiring)
    before = g.copy()
    for d in sorted(st.dying):
        g[d, :] = False
        g[:, d] = False
        alive[d] = False
        roles[d] = -1

    def heir(u: int) -> int:
        """Where an input edge endpoint goes: itself, its replacement child, or -1 (dropped)."""
        if u not in st.dying:
            return u
        return st.replaced_by.get(u, -1)

    for d, ch in st.replaced_by.items():
        for u in np.flatnonzero(before[:, d]):
            if (h := heir(int(u))) >= 0:
                g[h, ch] = True
        for w in np.flatnonzero(before[d, :]):
            if (h := heir(int(w))) >= 0:
                g[ch, h] = True
    for ch, par in st.parent_of.items():
        g[par, ch] = True
        g[ch, sink] = True
    for ch, r in st.child_role.items():
        alive[ch] = True
        roles[ch] = r
        generation[ch] += 1
    inherited |= g & ~before

    # Phase R (EDGE_REMOVE rows), then phase A (EDGE_ADD rows), on the graph after births
    removed: set[tuple[int, int]] = set()
    added: set[tuple[int, int]] = set()
    for phase in (c.TEAM_EDGE_REMOVE, c.TEAM_EDGE_ADD):
        for p, (kind, a, b, _role) in enumerate(rows):
            if kind != phase or reason[p] != c.REASON_OK:
                continue
            ends = []
            for x in (a, b):
                if x <= -2:
                    ends.append(st.child_of_row.get(c.placeholder_row(x), -1))
                else:
                    ends.append(x)
            if ends[0] < 0 or ends[1] < 0:
                reject(p, c.REASON_PLACEHOLDER)
                continue
            e = (ends[0], ends[1])
            if e[0] in st.dying or e[1] in st.dying:
                reject(p, c.REASON_DEAD_NODE)
            elif e in (removed if phase == c.TEAM_EDGE_REMOVE else added):
                reject(p, c.REASON_DUPLICATE)
            elif phase == c.TEAM_EDGE_REMOVE and not g[e]:
                reject(p, c.REASON_EDGE_MISSING)
            elif phase == c.TEAM_EDGE_ADD and e in removed:
                reject(p, c.REASON_CONFLICT)
            elif phase == c.TEAM_EDGE_ADD and g[e]:
                reject(p, c.REASON_EDGE_EXISTS)
            elif (phase == c.TEAM_EDGE_REMOVE and len(removed) + 1 > lim.max_removals) or (
                len(removed) + len(added) + 1 > lim.budget_edges
            ):
                reject(p, c.REASON_BUDGET_EDGES)
            else:
                accept(p)
                if phase == c.TEAM_EDGE_REMOVE:
                    removed.add(e)
                    g[e] = False
                    inherited[e] = False  # a removed wiring edge is no longer reported as inherited
                else:
                    added.add(e)
                    g[e] = True

    # Repair (i): isolated non-sink nodes (a snapshot) link to the best scorer among the surviving input nodes
    nodes = [int(v) for v in np.flatnonzero(alive)]
    isolated = [v for v in nodes if v != sink and not g[v].any() and not g[:, v].any()]
    rank = scores.astype(np.float64)
    for ch in st.child_role:
        rank[ch] = -np.inf
    for v in isolated:
        best = _best(rank, [u for u in nodes if u not in (v, sink)], sink)
        g[v, best] = True
        repaired[v, best] = True
    # Repair (ii): lowest index first, a node that does not reach the sink links to it
    reach = _reaching(g, sink)
    for v in nodes:
        if not reach[v]:
            g[v, sink] = True
            repaired[v, sink] = True
            reach = _reaching(g, sink)
    for p, ch in st.child_of_row.items():
        new_node[p] = ch


def team_project(
    adj: np.ndarray,
    alive: np.ndarray,
    roles: np.ndarray,
    sink: np.ndarray,
    edits: np.ndarray,
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
    """Validates and applies each graph's proposed team edits ``edits[b, p] = (kind, a, b, role)``, then repairs.

    Exact rules (the first failing check gives the reason; a rejected row changes nothing and consumes no
    budget). Node references: ``0 .. N-1`` a slot; ``-2 - i`` (:func:`~toporoute.types.team_codes.placeholder`)
    the node born by row ``i``, only in edge rows.

    1. Screening, every row: kind -1 ``padding``; kind outside -1 .. 4 ``bad_kind``. Edge rows: a slot ``a`` then
       ``b`` outside [0, N), -1, or not alive in the input: ``unknown_node``; ``a == b``: ``self_loop``. Other
       rows: ``a <= -2``: ``placeholder``; ``a`` not a slot alive in the input (BIRTH also allows -1, the best
       scorer): ``unknown_node``; REPLACE / BIRTH with ``role < 0``: ``bad_role``.
    2. Phase D, REPLACE and DEATH rows in row order: ``a`` is the sink: ``sink``; protected: ``protected``;
       already dying: ``duplicate``; deaths + 1 > budget_pairs (REPLACE: also births + 1): ``budget_nodes``;
       DEATH with pure deaths + 1 > max_pure_deaths: ``budget_pure``; ``a``'s role r < R is critical and ``a``
       is its last alive agent (input nodes not dying plus accepted REPLACE children of role r), unless a
       REPLACE to role r: ``critical_role``; DEATH leaving fewer than n_min alive: ``min_nodes``; REPLACE with
       no fresh slot: ``no_capacity``. An accepted REPLACE takes the lowest fresh slot (not alive in the input,
       not taken this step).
    3. Phase B, BIRTH rows in row order: parent dying: ``dead_node``; births + 1 > budget_pairs:
       ``budget_nodes``; pure births + 1 > max_pure_births: ``budget_pure``; alive + 1 > n_max: ``max_nodes``;
       no fresh slot: ``no_capacity``. Parent -1: the highest score among the surviving input nodes other than
       the sink (ties to the lower index; none: the sink).
    4. Apply: dying nodes lose their edges (alive False, role -1, generation kept); a REPLACE child gets the
       dead node's in- and out-edges (an endpoint that also dies maps to its REPLACE child, else the edge is
       dropped); a BIRTH child gets ``parent -> child`` and ``child -> sink``. A child's role is its row's role,
       its generation its slot's input generation + 1 (so ``(slot, generation)`` names one node over time).
       New edges: ``inherited``.
    5. Phase R (EDGE_REMOVE) then phase A (EDGE_ADD), row order, placeholders resolved to child slots (a row
       that is not an accepted birth: ``placeholder``): an endpoint dying: ``dead_node``; same edge already
       removed / added by an accepted row of the same kind: ``duplicate``; REMOVE of an absent edge:
       ``edge_missing``; ADD of an edge removed this step: ``conflict``; ADD of an existing edge:
       ``edge_exists``; removals + 1 > max_removals or removals + adds + 1 > budget_edges: ``budget_edges``.
    6. Repair (``repaired``, not counted): (i) each alive non-sink node with no edge at all after phase A gets
       ``v -> best``, best the highest score among the alive nodes other than v and the sink (children count as
       -inf; ties to the lower index; none: the sink); (ii) in index order, each alive node that does not reach
       the sink (recomputed after each edge) gets ``v -> sink``.
    """
    B, N = alive.shape
    P = edits.shape[1]
    lim = _Limits(budget_pairs, budget_edges, max_removals, max_pure_births, max_pure_deaths, n_min, n_max)
    zeros_f = np.zeros((B, N), dtype=np.float32)
    sc = zeros_f if scores is None else scores
    gen_in = np.zeros((B, N), dtype=np.int32) if generation is None else generation
    check_team_inputs(adj, alive, roles, sink, sc, gen_in)
    prot = np.zeros((B, N), dtype=bool) if protected is None else protected
    crit = np.zeros((B, 0), dtype=bool) if critical is None else critical
    out_adj = adj.copy()
    out_alive = alive.copy()
    out_roles = np.where(alive, roles, -1).astype(np.int32)
    out_gen = gen_in.astype(np.int32, copy=True)
    accepted = np.zeros((B, P), dtype=bool)
    reason = np.zeros((B, P), dtype=np.int8)
    new_node = np.full((B, P), -1, dtype=np.int32)
    inherited = np.zeros((B, N, N), dtype=bool)
    repaired = np.zeros((B, N, N), dtype=bool)
    for b in range(B):
        _project_one(
            out_adj[b],
            out_alive[b],
            out_roles[b],
            out_gen[b],
            edits[b],
            sink=int(sink[b]),
            protected=prot[b],
            critical=crit[b],
            scores=sc[b],
            lim=lim,
            accepted=accepted[b],
            reason=reason[b],
            new_node=new_node[b],
            inherited=inherited[b],
            repaired=repaired[b],
        )
    return TeamProjection(
        out_adj, out_alive, out_roles, out_gen, accepted, reason, new_node, inherited, repaired
    )


# -- samples (toporoute.backends.samples) -----------------------------------------------------------------------


def _project_sample(B: int) -> Call:
    adj, alive, roles, sink, edits, protected, critical, scores, generation = team_project_inputs(B)
    kw = {"protected": protected, "critical": critical, "scores": scores, "generation": generation}
    return (adj, alive, roles, sink, edits), kw


SAMPLES = {"team_project": Sample(f"B {TEAM}, P=8 meta edits each", _project_sample)}
