"""The team edit projection ``ops.team_project`` (methods/tacomas.md §3 "Validation/apply", §8 A4-A6), on the
reference and the compiled core.

Hand-drawn graphs for each operation kind (a replacement inheriting edges, a pure birth wired parent -> child ->
sink, placeholders in edge rows, the 5-role template), every reason code, the repair, input errors naming their
argument, exact parity of the compiled core with the reference on random batches (cycles, garbage rows), and
hypothesis properties over adversarial meta outputs (unknown and placeholder ids, the sink's death, 100 rows at
once, duplicate and contradictory edits, full and minimal teams): the budgets hold, the sink and the protected
nodes survive, every alive node reaches the sink, n_min <= |V| <= n_max, no edge touches a dead node, and a
rejected row changes nothing (turning it into padding gives the same result).
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from _backends import CORE_BUILT, backend_names, core, needs_core, on_backend_names
from _graphs import edge_set, reaches
from _paths import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from toporoute import errors, ops
from toporoute.types import team_codes as codes

BACKENDS = backend_names("team_project")  # the host backends of the grid (tests/_backends.py)
R = {name: i for i, name in enumerate(ops.TEAM_REASONS)}
REP, BIRTH, DEATH, ADD, REM, PAD = (
    ops.TEAM_REPLACE,
    ops.TEAM_BIRTH,
    ops.TEAM_DEATH,
    ops.TEAM_EDGE_ADD,
    ops.TEAM_EDGE_REMOVE,
    ops.TEAM_PADDING,
)
ph = codes.placeholder


def team(
    n: int, edges: list[tuple[int, int]], alive: list[int], roles: list[int] | None = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(N, N) adj with ``edges``, (N,) alive for the listed slots and (N,) int32 roles (default: the slot index)."""
    adj = np.zeros((n, n), dtype=bool)
    for s, d in edges:
        adj[s, d] = True
    live = np.zeros(n, dtype=bool)
    live[alive] = True
    role = np.full(n, -1, dtype=np.int32)
    role[alive] = alive if roles is None else roles
    return adj, live, role


def rows(*r: tuple[int, int, int, int]) -> np.ndarray:
    return np.array(r, dtype=np.int32).reshape(-1, 4)


def names(reason: np.ndarray) -> list[str]:
    return [ops.TEAM_REASONS[int(r)] for r in reason]


def assert_same(got: Any, want: Any) -> None:
    for f, w in vars(want).items():
        g = getattr(got, f)
        assert g.dtype == w.dtype and g.shape == w.shape, f
        np.testing.assert_array_equal(g, w, err_msg=f)


def graph_of(result: Any, b: int) -> Any:
    """Graph ``b`` of a batched result, as a single-graph result."""
    return type(result)(*(x[b] for x in vars(result).values()))


def assert_graph_alone(batch: Any, b: int, inputs: tuple[Any, ...], backend: str) -> None:
    """Graph ``b`` of ``batch`` equals a single-graph call on graph ``b`` of ``inputs`` (adj, alive, roles,
    sink, edits, optional arrays)."""
    adj, alive, roles, sink, edits, kw = inputs
    one = ops.team_project(
        adj[b],
        alive[b],
        roles[b],
        int(sink[b]),
        edits[b],
        backend=backend,
        **{k: v[b] for k, v in kw.items()},
    )
    assert_same(one, graph_of(batch, b))


# A base team: 0 -> 1 -> 2 -> 4, 0 -> 3 -> 4, sink 4, slots 5..7 free.
BASE = team(8, [(0, 1), (1, 2), (2, 4), (0, 3), (3, 4)], [0, 1, 2, 3, 4])
SINK = 4


# ---------------------------------------------------------------------------------------------------- codes


def test_codes_are_exported_and_mirrored_in_the_cpp_header() -> None:
    assert (REP, BIRTH, DEATH, ADD, REM, PAD) == (0, 1, 2, 3, 4, -1)
    assert ops.TEAM_KINDS == ("replace", "birth", "death", "edge_add", "edge_remove")
    assert ops.TEAM_REASONS[0] == "ok" and len(set(ops.TEAM_REASONS)) == len(ops.TEAM_REASONS)
    for i, name in enumerate(ops.TEAM_REASONS):
        assert getattr(codes, f"REASON_{name.upper()}") == i
    assert ph(0) == -2 and codes.placeholder_row(ph(7)) == 7
    header = (ROOT / "cpp/include/toporoute/team_project.hpp").read_text()

    def enum(name: str) -> dict[str, int]:
        body = header.split(f"enum class {name}")[1].split("};")[0]
        return {k: int(v) for k, v in re.findall(r"^\s+(\w+) = (-?\d+),", body, re.MULTILINE)}

    reasons = {("protected" if k == "protected_node" else k): v for k, v in enum("TeamReason").items()}
    assert reasons == {n: i for i, n in enumerate(ops.TEAM_REASONS)}
    assert enum("TeamKind") == {"padding": -1} | {n: i for i, n in enumerate(ops.TEAM_KINDS)}
    schedule = (ROOT / "cpp/include/toporoute/team_schedule.hpp").read_text()
    assert (
        '#include "toporoute/team_schedule.hpp"' in header
    )  # the node capacity, defined once for the team ops
    assert f"kTeamMaxNodes = {codes.TEAM_MAX_NODES};" in schedule
    assert f"kTeamBestScorer = {codes.TEAM_BEST_SCORER};" in header


@needs_core
def test_compiled_core_has_the_team_op() -> None:
    """The default backend runs the reference on a stale core; a built core must carry the kernel itself."""
    assert hasattr(core, "team_project")


# ---------------------------------------------------------------------------------------------- the kinds


@pytest.mark.parametrize("backend", BACKENDS)
def test_replacement_inherits_the_dead_agents_edges(backend: str) -> None:
    # 1 and 2 both die and are replaced: 0 -> 1 -> 2 -> 4 becomes 0 -> c1 -> c2 -> 4; 3 dies without heir:
    # its edges go (budget_pairs=3, max_pure_deaths=1)
    adj, alive, roles = BASE
    edits = rows((REP, 1, 0, 7), (DEATH, 3, 0, 0), (REP, 2, 0, 8))
    r = ops.team_project(adj, alive, roles, SINK, edits, budget_pairs=3, backend=backend)
    assert names(r.reason) == ["ok", "ok", "ok"]
    assert r.new_node.tolist() == [5, -1, 6]
    assert edge_set(r.adj) == {(0, 5), (5, 6), (6, 4)}
    assert edge_set(r.inherited) == {(0, 5), (5, 6), (6, 4)}
    assert not r.repaired.any()
    assert r.alive.tolist() == [True, False, False, False, True, True, True, False]
    assert r.roles.tolist() == [0, -1, -1, -1, 4, 7, 8, -1]
    assert r.generation.tolist() == [0, 0, 0, 0, 0, 1, 1, 0]


@pytest.mark.parametrize("backend", BACKENDS)
def test_pure_birth_is_wired_parent_child_sink(backend: str) -> None:
    adj, alive, roles = BASE
    scores = np.array([0.1, 0.2, 0.9, 0.9, 1.0, 5.0, 5.0, 5.0], dtype=np.float32)  # the sink and dead slots
    gen = np.array([0, 0, 0, 0, 0, 3, 0, 0], dtype=np.int32)  # slot 5 held a node before
    explicit = ops.team_project(
        adj, alive, roles, SINK, rows((BIRTH, 1, 0, 9)), generation=gen, backend=backend
    )
    assert explicit.new_node.tolist() == [5]
    assert edge_set(explicit.inherited) == {(1, 5), (5, 4)}
    assert explicit.roles[5] == 9 and explicit.generation[5] == 4
    # parent -1: the best scorer other than the sink, ties to the lower index (2 and 3 score 0.9)
    best = ops.team_project(adj, alive, roles, SINK, rows((BIRTH, -1, 0, 9)), scores=scores, backend=backend)
    assert edge_set(best.inherited) == {(2, 5), (5, 4)}
    assert edge_set(best.adj) == edge_set(adj) | {(2, 5), (5, 4)}
    # only the sink alive besides the dying: the parent is the sink
    a2, l2, r2 = team(4, [(0, 1)], [0, 1])
    only = ops.team_project(
        a2, l2, r2, 1, rows((DEATH, 0, 0, 0), (BIRTH, -1, 0, 3)), n_min=1, backend=backend
    )
    assert names(only.reason) == ["ok", "ok"]
    assert edge_set(only.adj) == {(1, 2), (2, 1)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_placeholders_name_the_children_in_edge_rows(backend: str) -> None:
    adj, alive, roles = BASE
    edits = rows(
        (ADD, ph(1), ph(2), 0),  # child of row 1 -> child of row 2
        (REP, 3, 0, 6),
        (BIRTH, 0, 0, 5),
        (REM, 0, ph(1), 0),  # the inherited edge 0 -> c(row 1)
        (ADD, ph(3), 2, 0),  # row 3 is not a birth
        (ADD, ph(40), 2, 0),  # no such row
    )
    r = ops.team_project(adj, alive, roles, SINK, edits, backend=backend)
    assert names(r.reason) == ["ok", "ok", "ok", "ok", "placeholder", "placeholder"]
    assert r.new_node.tolist() == [-1, 5, 6, -1, -1, -1]
    assert (5, 6) in edge_set(r.adj) and (0, 5) not in edge_set(r.adj)
    assert (0, 5) not in edge_set(
        r.inherited
    )  # the masks describe the output graph: a removed wiring edge is gone
    assert (0, 6) in edge_set(r.inherited)
    # placeholders never name nodes outside edge rows
    r2 = ops.team_project(
        adj, alive, roles, SINK, rows((BIRTH, 0, 0, 5), (DEATH, ph(0), 0, 0)), backend=backend
    )
    assert names(r2.reason) == ["ok", "placeholder"]


@pytest.mark.parametrize("backend", BACKENDS)
def test_five_role_template(backend: str) -> None:
    """planner -> {searcher, verifier}, searcher <-> verifier, searcher -> calculator, verifier -> reflector; the
    planner is the protected sink (methods/tacomas.md A3). Its first slow step (Table 3, FIN0017): -calculator
    +researcher, searcher re-typed as a verifier."""
    planner, searcher, verifier, calculator, reflector = range(5)
    edges = [(0, 1), (0, 2), (1, 2), (2, 1), (1, 3), (2, 4)]
    adj, alive, roles = team(20, edges, list(range(5)))
    prot = np.zeros(20, dtype=bool)
    prot[planner] = True
    plain = ops.team_project(adj, alive, roles, planner, rows(), protected=prot, backend=backend)
    # nothing reaches the planner: the repair links, lowest index first, each node that still does not
    assert edge_set(plain.repaired) == {(searcher, planner), (calculator, planner), (reflector, planner)}
    for v in range(5):
        assert reaches(plain.adj, v, planner)
    step = ops.team_project(
        plain.adj,
        plain.alive,
        plain.roles,
        planner,
        rows((REP, calculator, 0, 5), (REP, searcher, 0, verifier), (DEATH, planner, 0, 0)),
        protected=prot,
        critical=np.array([True, False, True], dtype=bool),
        backend=backend,
    )
    assert names(step.reason) == ["ok", "ok", "sink"]
    researcher, verifier2 = step.new_node[:2]
    assert (researcher, verifier2) == (5, 6)
    assert step.roles[:7].tolist() == [0, -1, 2, -1, 4, 5, verifier]
    assert {(verifier2, researcher), (planner, verifier2), (verifier, verifier2), (verifier2, verifier)} <= (
        edge_set(step.inherited)
    )
    assert (researcher, planner) in edge_set(step.adj) and (verifier2, planner) in edge_set(step.adj)
    assert not step.repaired.any()


# ---------------------------------------------------------------------------------------------- the reasons

# (edits, keyword arguments, the expected reasons)
REASON_CASES: list[tuple[str, np.ndarray, dict[str, Any], list[str]]] = [
    ("ok", rows((REP, 2, 0, 5)), {}, ["ok"]),
    ("padding", rows((PAD, 0, 0, 0)), {}, ["padding"]),
    ("bad_kind", rows((5, 0, 1, 0), (-2, 0, 1, 0)), {}, ["bad_kind", "bad_kind"]),
    (
        "unknown_node",
        rows((DEATH, 6, 0, 0), (ADD, 0, 9, 0), (ADD, -1, 2, 0), (BIRTH, 8, 0, 1), (REP, -1, 0, 1)),
        {},
        ["unknown_node"] * 5,
    ),
    ("placeholder", rows((ADD, ph(0), 2, 0), (REP, ph(0), 0, 1)), {}, ["placeholder"] * 2),
    ("self_loop", rows((ADD, 2, 2, 0), (REM, ph(0), ph(0), 0)), {}, ["self_loop"] * 2),
    ("duplicate", rows((DEATH, 3, 0, 0), (REP, 3, 0, 1)), {}, ["ok", "duplicate"]),
    (
        "duplicate",
        rows((ADD, 1, 3, 0), (ADD, 1, 3, 0), (REM, 0, 1, 0), (REM, 0, 1, 0)),
        {},
        ["ok", "duplicate"] * 2,
    ),
    ("conflict", rows((ADD, 0, 1, 0), (REM, 0, 1, 0)), {}, ["conflict", "ok"]),
    ("edge_exists", rows((ADD, 0, 1, 0)), {}, ["edge_exists"]),
    ("edge_missing", rows((REM, 1, 0, 0)), {}, ["edge_missing"]),
    (
        "dead_node",
        rows((DEATH, 2, 0, 0), (ADD, 2, 3, 0), (BIRTH, 2, 0, 1)),
        {},
        ["ok", "dead_node", "dead_node"],
    ),
    ("sink", rows((DEATH, SINK, 0, 0), (REP, SINK, 0, 4)), {}, ["sink", "sink"]),
    ("protected", rows((DEATH, 0, 0, 0)), {"protected": np.arange(8) == 0}, ["protected"]),
    (
        "critical_role",
        rows((DEATH, 1, 0, 0), (REP, 1, 0, 5), (REP, 1, 0, 1)),
        {"critical": np.array([False, True])},
        ["critical_role", "critical_role", "ok"],
    ),
    ("min_nodes", rows((DEATH, 2, 0, 0), (REP, 3, 0, 1)), {"n_min": 5}, ["min_nodes", "ok"]),
    ("max_nodes", rows((BIRTH, 0, 0, 1)), {"n_max": 5}, ["max_nodes"]),
    (
        "no_capacity",
        rows((REP, 2, 0, 1), (REP, 3, 0, 1), (REP, 1, 0, 1), (REP, 0, 0, 1)),
        {"budget_pairs": 9},
        ["ok", "ok", "ok", "no_capacity"],
    ),
    (
        "budget_nodes",
        rows((REP, 2, 0, 1), (DEATH, 3, 0, 0), (BIRTH, 0, 0, 1)),
        {"budget_pairs": 1},
        ["ok", "budget_nodes", "budget_nodes"],
    ),
    (
        "budget_pure",
        rows((DEATH, 2, 0, 0), (DEATH, 3, 0, 0), (BIRTH, 0, 0, 1), (BIRTH, 1, 0, 1)),
        {},
        ["ok", "budget_pure", "ok", "budget_pure"],
    ),
    (
        "budget_edges",
        rows((ADD, 1, 3, 0), (REM, 0, 1, 0), (REM, 1, 2, 0), (ADD, 3, 1, 0)),
        {"budget_edges": 2},
        ["ok", "ok", "budget_edges", "budget_edges"],
    ),
    ("budget_edges", rows((REM, 0, 1, 0), (REM, 1, 2, 0)), {"max_removals": 1}, ["ok", "budget_edges"]),
    (
        "bad_role",
        rows((REP, 2, 0, -1), (BIRTH, 0, 0, -5), (DEATH, 2, 0, -1)),
        {},
        ["bad_role", "bad_role", "ok"],
    ),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("why", "edits", "kw", "want"), REASON_CASES, ids=[c[0] for c in REASON_CASES])
def test_each_reason(backend: str, why: str, edits: np.ndarray, kw: dict[str, Any], want: list[str]) -> None:
    adj, alive, roles = BASE
    r = ops.team_project(adj, alive, roles, SINK, edits, backend=backend, **kw)
    assert names(r.reason) == want
    assert r.accepted.tolist() == [w == "ok" for w in want]
    assert why in want


def test_reason_cases_cover_every_reason() -> None:
    assert {w for case in REASON_CASES for w in case[3]} == set(ops.TEAM_REASONS)


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_capacity_on_a_full_team_and_birth_slots_after_replacements(backend: str) -> None:
    adj, alive, roles = team(4, [(0, 1), (1, 2), (2, 3)], [0, 1, 2, 3])
    full = ops.team_project(adj, alive, roles, 3, rows((REP, 1, 0, 5), (BIRTH, 0, 0, 5)), backend=backend)
    assert names(full.reason) == ["no_capacity", "no_capacity"]
    # fresh slots: REPLACE rows first (row order), then BIRTH rows; a slot freed this step is not reused
    adj, alive, roles = team(7, [(0, 1), (1, 2), (3, 2)], [0, 1, 2, 3])
    r = ops.team_project(
        adj,
        alive,
        roles,
        2,
        rows((BIRTH, 3, 0, 7), (REP, 1, 0, 8), (REP, 0, 0, 9)),
        budget_pairs=3,
        backend=backend,
    )
    assert names(r.reason) == ["ok", "ok", "ok"]
    assert r.new_node.tolist() == [6, 4, 5]


@pytest.mark.parametrize("backend", BACKENDS)
def test_repair_links_isolated_nodes_to_the_best_scorer_then_to_the_sink(backend: str) -> None:
    # 2 is isolated: it links to the best scorer among the others but the sink (3, score 0.8); 1 -> 2 -> 3 does
    # not reach the sink 0, so 1 (lowest index) gets 1 -> 0, which the others then reach through
    adj, alive, roles = team(6, [(1, 3), (3, 1)], [0, 1, 2, 3])
    scores = np.array([9.0, 0.5, 0.1, 0.8, 0, 0], dtype=np.float32)
    r = ops.team_project(adj, alive, roles, 0, rows(), scores=scores, backend=backend)
    assert edge_set(r.repaired) == {(2, 3), (1, 0)}
    # a child counts as -inf (whatever its slot held): the isolated node links to an old node, even a low scorer
    adj, alive, roles = team(6, [(1, 0), (3, 0)], [0, 1, 2, 3])
    scores = np.array([0, 0.1, 0.5, 0.2, 9.0, 0], dtype=np.float32)
    r = ops.team_project(adj, alive, roles, 0, rows((REP, 3, 0, 1)), scores=scores, backend=backend)
    assert names(r.reason) == ["ok"] and r.new_node[0] == 4
    assert edge_set(r.repaired) == {(2, 1)}
    # isolated nodes are a snapshot taken before the repair (2 and 3 link to each other), then 1 -> 0, and 2 -> 0
    # for the cycle {2, 3}
    adj, alive, roles = team(6, [(1, 0), (2, 0)], [0, 1, 2, 3])
    r = ops.team_project(
        adj,
        alive,
        roles,
        0,
        rows((REM, 1, 0, 0), (REM, 2, 0, 0)),
        scores=scores,
        budget_edges=4,
        max_removals=2,
        backend=backend,
    )
    assert names(r.reason) == ["ok", "ok"]
    assert edge_set(r.repaired) == {(1, 2), (2, 3), (3, 2), (1, 0), (2, 0)}


# ------------------------------------------------------------------------------------------------ interface


@pytest.mark.parametrize("backend", BACKENDS)
def test_batch_equals_single_graphs_and_inputs_are_not_modified(backend: str) -> None:
    rng = np.random.default_rng(3)
    adj, alive, roles, sink, edits, kw = random_batch(rng, 5, 12, 10)
    copies = [x.copy() for x in (adj, alive, roles, sink, edits, *kw.values())]
    batch = ops.team_project(adj, alive, roles, sink, edits, backend=backend, **kw)
    for x, c in zip((adj, alive, roles, sink, edits, *kw.values()), copies, strict=True):
        np.testing.assert_array_equal(x, c)
    for b in range(5):
        assert_graph_alone(batch, b, (adj, alive, roles, sink, edits, kw), backend)
    # one int sink for every graph
    alive[:, 0] = True
    roles = np.maximum(roles, 0)
    assert_same(
        ops.team_project(adj, alive, roles, 0, edits, backend=backend),
        ops.team_project(adj, alive, roles, np.zeros(5, np.int64), edits, backend=backend),
    )


def test_cuda_backend_is_unavailable() -> None:
    adj, alive, roles = BASE
    with pytest.raises(errors.BackendUnavailableError):
        ops.team_project(adj, alive, roles, SINK, rows(), backend="cuda")


def _err_cases() -> list[tuple[str, dict[str, Any], type[Exception], str]]:
    adj, alive, roles = BASE
    base = {"adj": adj, "alive": alive, "roles": roles, "sink": SINK, "edits": rows()}
    loop = adj.copy()
    loop[2, 2] = True
    stray = adj.copy()
    stray[2, 6] = True
    neg = roles.copy()
    neg[3] = -1
    nan = np.zeros(8, np.float32)
    nan[2] = np.nan
    nan_dead = np.zeros(8, np.float32)
    nan_dead[6] = np.nan  # dead slots may hold anything
    big = np.zeros((65, 65), bool)
    cases = [
        ("sink", {"sink": 6}, errors.InvalidArgumentError, "must be alive"),
        ("sink", {"sink": 8}, errors.OutOfRangeError, "sink"),
        ("sink", {"sink": 1.0}, errors.InvalidArgumentError, "integer"),
        ("adj", {"adj": loop}, errors.InvalidArgumentError, "self-loop"),
        ("adj", {"adj": stray}, errors.InvalidArgumentError, "dead node"),
        ("adj", {"adj": adj.astype(np.uint8)}, errors.DTypeError, "bool"),
        (
            "adj",
            {"adj": big, "alive": np.ones(65, bool), "roles": np.zeros(65, np.int32)},
            errors.ShapeError,
            "64",
        ),
        ("alive", {"alive": alive[:5]}, errors.ShapeError, "alive"),
        ("roles", {"roles": neg}, errors.OutOfRangeError, "roles"),
        ("roles", {"roles": roles.astype(np.int64)}, errors.DTypeError, "int32"),
        ("scores", {"scores": nan}, errors.NonFiniteError, "finite"),
        ("generation", {"generation": np.full(8, -1, np.int32)}, errors.OutOfRangeError, "generation"),
        ("edits", {"edits": np.zeros((2, 3), np.int32)}, errors.ShapeError, "edits"),
        ("edits", {"edits": np.zeros((2, 4), np.float32)}, errors.DTypeError, "edits"),
        ("protected", {"protected": np.zeros(7, bool)}, errors.ShapeError, "protected"),
        ("critical", {"critical": np.zeros(3, np.int32)}, errors.DTypeError, "critical"),
        ("budget_pairs", {"budget_pairs": -1}, errors.OutOfRangeError, "budget_pairs"),
        ("budget_edges", {"budget_edges": True}, errors.InvalidArgumentError, "integer"),
        ("max_removals", {"max_removals": -2}, errors.OutOfRangeError, "max_removals"),
        ("n_max", {"n_max": 2**40}, errors.OutOfRangeError, "n_max"),
        ("n_max", {"n_min": 3, "n_max": 2}, errors.InvalidArgumentError, "n_max"),
    ]
    out = [(arg, base | over, exc, match) for arg, over, exc, match in cases]
    out.append(("ok", base | {"scores": nan_dead}, type(None), ""))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("arg", "kw", "exc", "match"), _err_cases())
def test_input_errors_name_the_argument(
    backend: str, arg: str, kw: dict[str, Any], exc: type, match: str
) -> None:
    if exc is type(None):
        ops.team_project(backend=backend, **kw)
        return
    with pytest.raises(exc, match=match) as info:
        ops.team_project(backend=backend, **kw)
    assert info.value.arg == arg


@on_backend_names("team_project", reference=False)
def test_data_errors_are_worded_alike_by_both_backends(backend: str) -> None:
    """The compiled core reports the first bad graph's first problem with the reference's message, from the
    fast path (a (B,) int32 sink array) too."""
    rng = np.random.default_rng(5)
    adj, alive, roles, sink, edits, kw = random_batch(rng, 6, 10, 4)
    spoil = []
    a = adj.copy()
    b = int(np.flatnonzero(alive[4])[0])
    a[4, b, b] = True
    spoil.append(("adj", {"adj": a}))
    s = sink.copy()
    s[3] = 10
    spoil.append(("sink", {"sink": s}))
    s = sink.copy()
    dead = np.flatnonzero(~alive[2])
    if dead.size:
        s[2] = dead[0]
        spoil.append(("sink", {"sink": s}))
    r = roles.copy()
    r[5, sink[5]] = -3
    spoil.append(("roles", {"roles": r}))
    sc = kw["scores"].copy()
    sc[1, sink[1]] = np.inf
    sc[3, sink[3]] = np.nan
    spoil.append(("scores", {"scores": sc}))
    g = kw["generation"].copy()
    g[0, 0] = np.iinfo(np.int32).max
    spoil.append(("generation", {"generation": g}))
    base = {"adj": adj, "alive": alive, "roles": roles, "sink": sink, "edits": edits} | kw
    for arg, over in spoil:
        msgs = []
        for name in ("reference", backend):
            with pytest.raises(errors.InvalidArgumentError) as info:
                ops.team_project(backend=name, **(base | over))
            assert info.value.arg == arg
            msgs.append((type(info.value), str(info.value)))
        assert msgs[0] == msgs[1], arg


# ---------------------------------------------------------------------------------------------------- parity


def random_graphs(rng: np.random.Generator, B: int, N: int) -> tuple[np.ndarray, ...]:
    """Random graphs with cycles: alive masks, edges between alive nodes (no self-loop), a live sink each,
    roles in [0, 5) (garbage on dead slots), scores, generations."""
    alive = rng.random((B, N)) < rng.uniform(0.3, 1.0)
    sink = rng.integers(0, N, B).astype(np.int32)
    alive[np.arange(B), sink] = True
    adj = rng.random((B, N, N)) < rng.uniform(0.02, 0.4)
    adj &= alive[:, :, None] & alive[:, None, :] & ~np.eye(N, dtype=bool)[None]
    roles = np.where(alive, rng.integers(0, 5, (B, N)), rng.integers(-9, 9, (B, N))).astype(np.int32)
    scores = np.where(alive, rng.random((B, N)).round(1), np.nan).astype(np.float32)  # ties on purpose
    gen = rng.integers(0, 4, (B, N)).astype(np.int32)
    return adj, alive, roles, sink, scores, gen


def random_rows(rng: np.random.Generator, alive: np.ndarray, P: int) -> np.ndarray:
    """Rows mostly drawn against each graph (alive slots, placeholders to earlier rows), the rest garbage."""
    B, N = alive.shape
    kinds = np.where(rng.random((B, P)) < 0.9, rng.integers(0, 5, (B, P)), rng.integers(-3, 7, (B, P)))
    out = np.zeros((B, P, 4), dtype=np.int32)
    for b in range(B):
        live = np.flatnonzero(alive[b])
        for p in range(P):
            refs = []
            for _ in range(2):
                u = rng.random()
                if u < 0.7:
                    refs.append(int(rng.choice(live)))
                elif u < 0.85 and p > 0:
                    refs.append(ph(int(rng.integers(0, p))))
                else:
                    refs.append(int(rng.integers(-4, N + 3)))
            role = int(rng.integers(-1, 6)) if rng.random() < 0.1 else int(rng.integers(0, 6))
            out[b, p] = (kinds[b, p], refs[0], refs[1], role)
    return out


def random_batch(
    rng: np.random.Generator, B: int, N: int, P: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, dict[str, Any]]:
    adj, alive, roles, sink, scores, gen = random_graphs(rng, B, N)
    edits = random_rows(rng, alive, P)
    kw = {
        "protected": rng.random((B, N)) < 0.15,
        "critical": rng.random((B, 4)) < 0.4,
        "scores": scores,
        "generation": gen,
    }
    return adj, alive, roles, sink, edits, kw


@needs_core
@pytest.mark.parametrize("N", [1, 2, 7, 32, 63, 64])
def test_cpu_equals_reference_on_random_batches(N: int) -> None:
    rng = np.random.default_rng(N)
    B = 40
    adj, alive, roles, sink, edits, kw = random_batch(rng, B, N, 24)
    seen: set[int] = set()
    for budgets in (
        {},
        {
            "budget_pairs": 4,
            "budget_edges": 8,
            "max_pure_births": 2,
            "max_pure_deaths": 2,
            "n_min": 1,
            "n_max": N,
        },
        {"budget_pairs": 0, "budget_edges": 1, "max_removals": 1, "n_min": 0, "n_max": 3},
    ):
        for opts in (kw, {}):
            want = ops.team_project(adj, alive, roles, sink, edits, backend="reference", **opts, **budgets)
            assert_same(
                ops.team_project(adj, alive, roles, sink, edits, backend="cpu", **opts, **budgets), want
            )
            seen |= set(want.reason.ravel().tolist())
    if N >= 7:
        assert len(seen) >= 15  # the batches exercise most outcomes


@needs_core
def test_cpu_equals_reference_on_strided_inputs() -> None:
    rng = np.random.default_rng(7)
    adj, alive, roles, sink, edits, kw = random_batch(rng, 30, 20, 12)
    holder = np.zeros((30, 20, 40), dtype=bool)
    holder[:, :, ::2] = adj
    adj_t = holder[:, :, ::2]
    alive_s = np.repeat(alive, 2, axis=1)[:, ::2]
    roles_f = np.asfortranarray(roles)
    edits_f = np.asfortranarray(edits)
    sink_s = np.repeat(sink, 2)[::2]
    kw_s = {k: np.asfortranarray(v) for k, v in kw.items()}
    assert not adj_t.flags.c_contiguous and not sink_s.flags.c_contiguous
    assert_same(
        ops.team_project(adj_t, alive_s, roles_f, sink_s, edits_f, backend="cpu", **kw_s),
        ops.team_project(adj, alive, roles, sink, edits, backend="reference", **kw),
    )


@needs_core
def test_cpu_threads_give_the_same_result_as_one_graph_at_a_time() -> None:
    rng = np.random.default_rng(11)
    adj, alive, roles, sink, edits, kw = random_batch(rng, 1024, 32, 8)  # big enough for the thread team
    batch = ops.team_project(adj, alive, roles, sink, edits, backend="cpu", **kw)
    for b in rng.choice(1024, 16, replace=False):
        assert_graph_alone(batch, int(b), (adj, alive, roles, sink, edits, kw), "cpu")


# ---------------------------------------------------------------------------------------------- properties


@st.composite
def scenarios(draw: Any) -> tuple[Any, ...]:
    """One graph (cycles allowed), its roles, protected and critical sets, scores, budgets and up to 100 rows:
    adversarial meta outputs (garbage and placeholder ids, sink deaths, repeats and contradictions) on teams
    that are sometimes full (every slot alive, n_max = N) or minimal (alive = n_min)."""
    n = draw(st.integers(1, 20))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    adj, alive, roles, sink, scores, gen = (x[0] for x in random_graphs(rng, 1, n))
    shape = draw(st.sampled_from(["any", "full", "minimal"]))
    if shape == "full":
        alive[:] = True
        roles = np.maximum(roles, 0)
        scores = np.nan_to_num(scores)
    n_alive = int(alive.sum())
    n_min = draw(st.integers(0, n_alive)) if shape != "minimal" else n_alive
    n_max = n if shape == "full" else draw(st.integers(max(n_min, 1), 24))
    P = draw(st.sampled_from([0, 1, 5, 20, 100]))
    edits = random_rows(rng, alive[None], P)[0]
    sinkers = draw(st.integers(0, 3))  # rows that try to kill the sink
    for i in rng.choice(P, min(P, sinkers), replace=False) if P else []:
        edits[i] = (draw(st.sampled_from([REP, DEATH])), int(sink), 0, 1)
    if P >= 2 and draw(st.booleans()):  # contradictions and repeats of earlier rows
        for i in range(1, P, 3):
            j = int(rng.integers(0, i))
            edits[i] = edits[j]
            if edits[j, 0] in (ADD, REM) and rng.random() < 0.5:
                edits[i, 0] = ADD + REM - edits[j, 0]
    kw = {
        "protected": rng.random(n) < 0.2,
        "critical": rng.random(draw(st.integers(0, 6))) < 0.5,
        "scores": scores,
        "generation": gen,
        "budget_pairs": draw(st.integers(0, 4)),
        "budget_edges": draw(st.integers(0, 6)),
        "max_removals": draw(st.one_of(st.none(), st.integers(0, 4))),
        "max_pure_births": draw(st.integers(0, 2)),
        "max_pure_deaths": draw(st.integers(0, 2)),
        "n_min": n_min,
        "n_max": n_max,
    }
    return adj, alive, roles, int(sink), edits, kw


def check_projection(
    adj: np.ndarray,
    alive: np.ndarray,
    roles: np.ndarray,
    sink: int,
    edits: np.ndarray,
    kw: dict[str, Any],
    r: Any,
) -> None:
    """Every invariant of one projected graph."""
    N = alive.shape[0]
    ok = r.accepted
    assert (ok == (r.reason == codes.REASON_OK)).all()
    kinds = edits[:, 0] if len(edits) else np.zeros(0, np.int32)
    births = int((ok & np.isin(kinds, [REP, BIRTH])).sum())
    deaths = int((ok & np.isin(kinds, [REP, DEATH])).sum())
    removals = int((ok & (kinds == REM)).sum())
    max_removals = kw["budget_edges"] // 2 if kw["max_removals"] is None else kw["max_removals"]
    assert births <= kw["budget_pairs"] and deaths <= kw["budget_pairs"]
    assert int((ok & (kinds == BIRTH)).sum()) <= kw["max_pure_births"]
    assert int((ok & (kinds == DEATH)).sum()) <= kw["max_pure_deaths"]
    assert removals <= max_removals and int((ok & (kinds == ADD)).sum()) + removals <= kw["budget_edges"]
    # the sink and the protected nodes survive
    assert r.alive[sink]
    assert not (alive & kw["protected"] & ~r.alive).any()
    # every alive node reaches the sink; consistency
    for v in np.flatnonzero(r.alive):
        assert reaches(r.adj, int(v), sink), v
    assert not (r.adj & ~(r.alive[:, None] & r.alive[None, :])).any()
    assert not r.adj[np.arange(N), np.arange(N)].any()
    n_in, n_out = int(alive.sum()), int(r.alive.sum())
    if kw["n_min"] <= n_in <= kw["n_max"]:
        assert kw["n_min"] <= n_out <= kw["n_max"]
    # critical roles present in the input stay present
    crit = kw["critical"]
    for role in set(roles[alive].tolist()):
        if role < len(crit) and crit[role]:
            assert (r.alive & (r.roles == role)).any(), role
    # children: fresh distinct slots with their row's role and the slot's generation + 1
    born = [(p, int(r.new_node[p])) for p in range(len(edits)) if ok[p] and kinds[p] in (REP, BIRTH)]
    assert len({c for _, c in born}) == len(born)
    assert ((r.new_node >= 0) == (ok & np.isin(kinds, [REP, BIRTH]))).all()
    for p, c in born:
        assert not alive[c] and r.alive[c] and r.roles[c] == edits[p, 3]
        assert r.generation[c] == kw["generation"][c] + 1
    assert (r.roles[~r.alive] == -1).all()
    keep = alive & r.alive
    np.testing.assert_array_equal(r.roles[keep], roles[keep])
    # the output graph is the input's surviving edges + inherited - removed + added + repaired
    child = np.zeros(N, bool)
    child[[c for _, c in born]] = True
    assert not (r.inherited & ~(child[:, None] | child[None, :])).any()
    assert not ((r.inherited | r.repaired) & ~r.adj).any()  # both masks describe edges of the output graph

    def end(x: int) -> int:
        return int(r.new_node[codes.placeholder_row(x)]) if x <= -2 else x

    removed = {(end(a), end(b)) for (k, a, b, _), o in zip(edits.tolist(), ok, strict=True) if o and k == REM}
    added = {(end(a), end(b)) for (k, a, b, _), o in zip(edits.tolist(), ok, strict=True) if o and k == ADD}
    expect = edge_set(adj & keep[:, None] & keep[None, :]) | edge_set(r.inherited)
    expect = (expect - removed) | added | edge_set(r.repaired)
    assert edge_set(r.adj) == expect
    assert not (r.repaired & ~r.adj).any() and not (r.repaired & r.inherited).any()


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=200, deadline=None)
@given(scenarios())
def test_property_projection_invariants(backend: str, scenario: tuple[Any, ...]) -> None:
    adj, alive, roles, sink, edits, kw = scenario
    r = ops.team_project(adj, alive, roles, sink, edits, backend=backend, **kw)
    check_projection(adj, alive, roles, sink, edits, kw, r)
    # rejected rows change nothing: the same rows as padding give the same result, reasons aside
    if len(edits):
        padded = edits.copy()
        padded[~r.accepted] = (PAD, 0, 0, 0)
        again = ops.team_project(adj, alive, roles, sink, padded, backend=backend, **kw)
        for f in ("adj", "alive", "roles", "generation", "accepted", "new_node", "inherited", "repaired"):
            np.testing.assert_array_equal(getattr(again, f), getattr(r, f), err_msg=f)
    if CORE_BUILT and backend == "reference":
        assert_same(ops.team_project(adj, alive, roles, sink, edits, backend="cpu", **kw), r)


@pytest.mark.parametrize("backend", BACKENDS)
def test_adversarial_meta_outputs(backend: str) -> None:
    """Fixed adversarial batches: 100 rows at once, the sink's death in every form, a full and a minimal team."""
    rng = np.random.default_rng(19)
    adj, alive, roles, sink, edits, kw = random_batch(rng, 16, 20, 100)
    budgets = {
        "budget_pairs": 2,
        "budget_edges": 4,
        "max_removals": None,
        "max_pure_births": 1,
        "max_pure_deaths": 1,
        "n_min": 2,
        "n_max": 20,
    }
    kill = edits.copy()
    kill[:, ::2] = np.stack(
        [
            np.where(np.arange(50) % 2 == 0, REP, DEATH)[None].repeat(16, 0),
            sink[:, None].repeat(50, 1),
            np.zeros((16, 50), np.int32),
            np.ones((16, 50), np.int32),
        ],
        axis=-1,
    )
    full_alive = np.ones_like(alive)
    full_roles = np.maximum(roles, 0)
    for a, ro, e in ((alive, roles, edits), (alive, roles, kill), (full_alive, full_roles, edits)):
        kw["scores"] = np.nan_to_num(kw["scores"])
        r = ops.team_project(adj, a, ro, sink, e, backend=backend, **kw, **budgets)
        for b in range(16):
            one_kw = {k: v[b] for k, v in kw.items()} | budgets
            check_projection(adj[b], a[b], ro[b], int(sink[b]), e[b], one_kw, graph_of(r, b))
        if e is kill:
            assert (r.reason[:, ::2] == codes.REASON_SINK).all()
        if a is full_alive:
            assert not (r.accepted & np.isin(e[..., 0], [REP, BIRTH])).any()
    # a minimal team: pure deaths refused, replacements fine
    two_adj, two_alive, two_roles = team(4, [(0, 1)], [0, 1])
    r = ops.team_project(
        two_adj, two_alive, two_roles, 1, rows((DEATH, 0, 0, 0), (REP, 0, 0, 3)), backend=backend
    )
    assert names(r.reason) == ["min_nodes", "ok"]
