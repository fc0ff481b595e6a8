"""HiVA DAG evolution ops: ``ops.dag_edit`` (f_G edits, each checked at once) and ``ops.dag_repair``
(RepairTopology), on the reference and the compiled core.

Hand-drawn graphs for each edit kind (methods/hiva.md §3.3's examples) and each reject reason, repair steps one
by one, input errors naming their argument, exact parity of the compiled core with the reference on random
batches (cyclic, inconsistent-looking and multi-word graphs included), and hypothesis properties: any sequence
of edits followed by a repair leaves a DAG where the source reaches the sink with out-degree <= max_out; every
rejected edit leaves the graph unchanged; repair is idempotent.
"""

from __future__ import annotations

import re

import numpy as np
import pytest
from _backends import CORE_BUILT, backend_names, core, needs_core
from _graphs import edge_set, reaches
from _paths import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st

from toporoute import errors, ops
from toporoute.types import dag_codes as codes

BACKENDS = backend_names("dag_edit", "dag_repair")  # the host backends of the grid (tests/_backends.py)
R = {name: i for i, name in enumerate(ops.EDIT_REASONS)}
PAR, SER, REM, CON, NOC = (
    ops.EDIT_ADD_PARALLEL,
    ops.EDIT_ADD_SERIAL,
    ops.EDIT_REMOVE_SUCCESSOR,
    ops.EDIT_CONNECT_TO_AGGREGATOR,
    ops.EDIT_NO_CHANGE,
)
SOURCE, SINK = 0, 1


def graph(
    n: int, edges: list[tuple[int, int]], alive: list[int] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(N, N) adj with ``edges`` and (N,) alive: the given nodes, else every node an edge touches plus the ends."""
    adj = np.zeros((n, n), dtype=bool)
    for s, d in edges:
        adj[s, d] = True
    live = np.zeros(n, dtype=bool)
    live[[SOURCE, SINK]] = True
    if alive is None:
        for s, d in edges:
            live[[s, d]] = True
    else:
        live[alive] = True
    return adj, live


def edits_of(*rows: tuple[int, int, int]) -> np.ndarray:
    return np.array(rows, dtype=np.int32).reshape(-1, 3)


# ---------------------------------------------------------------------------------------------------- codes


def test_codes_are_exported_and_mirrored_in_the_cpp_header() -> None:
    assert (NOC, PAR, SER, REM, CON, ops.EDIT_PADDING) == (0, 1, 2, 3, 4, -1)
    assert ops.EDIT_REASONS[0] == "ok" and len(set(ops.EDIT_REASONS)) == len(ops.EDIT_REASONS)
    for i, name in enumerate(ops.EDIT_REASONS):
        assert getattr(codes, f"REASON_{name.upper()}") == i
    header = (ROOT / "cpp/include/toporoute/dag.hpp").read_text()
    reasons = dict(
        re.findall(
            r"^\s+(\w+) = (-?\d+),$", header.split("enum class EditReason")[1].split("};")[0], re.MULTILINE
        )
    )
    assert {k: int(v) for k, v in reasons.items()} == {n: i for i, n in enumerate(ops.EDIT_REASONS)}
    kinds = dict(
        re.findall(
            r"^\s+(\w+) = (-?\d+),$", header.split("enum class EditKind")[1].split("};")[0], re.MULTILINE
        )
    )
    assert {k: int(v) for k, v in kinds.items()} == {"padding": -1} | {
        n: i for i, n in enumerate(ops.EDIT_KINDS)
    }


def test_compiled_core_has_the_dag_ops() -> None:
    """The CPU backend runs the reference on a stale core; a built core must carry the kernels themselves."""
    if not CORE_BUILT:
        pytest.skip("the compiled core is not built")
    assert hasattr(core, "dag_edit") and hasattr(core, "dag_repair")


# ---------------------------------------------------------------------------------------------- edit kinds
# A = 0 (the source), B = 2, C = 3, sink = 1: A -> B -> C -> sink; slots 4.. are free.
CHAIN = [(0, 2), (2, 3), (3, 1)]


@pytest.mark.parametrize("backend", BACKENDS)
def test_add_parallel_gives_a_sibling_with_the_same_successors(backend: str) -> None:
    adj, alive = graph(6, CHAIN)
    r = ops.dag_edit(adj, alive, edits_of((PAR, 0, 2)), backend=backend)
    assert r.accepted.tolist() == [True] and r.reason.tolist() == [R["ok"]] and r.new_node.tolist() == [4]
    assert edge_set(r.adj) == {(0, 2), (0, 4), (2, 3), (4, 3), (3, 1)}  # A -> (B, D) -> C
    assert r.alive.tolist() == [True, True, True, True, True, False]
    # arg -1: the lowest-index successor that is not the sink
    adj2, alive2 = graph(6, [*CHAIN, (0, 1)])
    r2 = ops.dag_edit(adj2, alive2, edits_of((PAR, 0, -1)), backend=backend)
    assert edge_set(r2.adj) == {(0, 1), (0, 2), (0, 4), (2, 3), (4, 3), (3, 1)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_add_parallel_beside_the_sink_feeds_the_sink(backend: str) -> None:
    """Case study 1 / Fig. 14: generalist -> {Extractor, Searcher} -> sink."""
    adj, alive = graph(5, [(0, 2), (2, 1)])  # source -> generalist -> sink
    r = ops.dag_edit(adj, alive, edits_of((PAR, 2, -1), (PAR, 2, -1)), backend=backend)
    assert r.accepted.all() and r.new_node.tolist() == [3, 4]
    assert edge_set(r.adj) == {(0, 2), (2, 1), (2, 3), (2, 4), (3, 1), (4, 1)}
    # an explicit sibling that is the sink does the same
    r2 = ops.dag_edit(adj, alive, edits_of((PAR, 2, 1)), backend=backend)
    assert edge_set(r2.adj) == {(0, 2), (2, 1), (2, 3), (3, 1)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_add_serial_inserts_between_node_and_its_successors(backend: str) -> None:
    adj, alive = graph(6, [*CHAIN, (0, 1)])
    r = ops.dag_edit(adj, alive, edits_of((SER, 0, -1)), backend=backend)
    assert r.accepted.tolist() == [True] and r.new_node.tolist() == [4]
    assert edge_set(r.adj) == {(0, 4), (4, 2), (4, 1), (2, 3), (3, 1)}  # A -> D -> {B, sink}
    # a node without successors gets D -> sink
    adj2, alive2 = graph(6, CHAIN, alive=[0, 1, 2, 3, 4])
    r2 = ops.dag_edit(adj2, alive2, edits_of((SER, 4, -1)), backend=backend)
    assert r2.new_node.tolist() == [5] and edge_set(r2.adj) == {*CHAIN, (4, 5), (5, 1)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_remove_successor_links_through_and_deletes_the_orphan(backend: str) -> None:
    adj, alive = graph(6, CHAIN)
    r = ops.dag_edit(adj, alive, edits_of((REM, 0, 2)), backend=backend)
    assert r.accepted.tolist() == [True] and r.new_node.tolist() == [-1]
    assert edge_set(r.adj) == {(0, 3), (3, 1)}
    assert r.alive.tolist() == [True, True, False, True, False, False]
    # B keeps another in-edge: it stays, with its out-edges
    adj2, alive2 = graph(6, [*CHAIN, (4, 2), (0, 4)])
    r2 = ops.dag_edit(adj2, alive2, edits_of((REM, 0, 2)), backend=backend)
    assert edge_set(r2.adj) == {(0, 3), (0, 4), (4, 2), (2, 3), (3, 1)} and r2.alive[2]


@pytest.mark.parametrize("backend", BACKENDS)
def test_remove_successor_links_at_most_max_out(backend: str) -> None:
    # 0 -> 2 -> {3, 4, 5} -> sink; max_out 2: after removing 0 -> 2, node 0 links 3 and 4 only
    edges = [(0, 2), (2, 3), (2, 4), (2, 5), (3, 1), (4, 1), (5, 1)]
    adj, alive = graph(7, edges)
    r = ops.dag_edit(adj, alive, edits_of((REM, 0, 2)), max_out=2, backend=backend)
    assert r.accepted.all()
    assert edge_set(r.adj) == {(0, 3), (0, 4), (3, 1), (4, 1), (5, 1)} and not r.alive[2]


@pytest.mark.parametrize("backend", BACKENDS)
def test_connect_to_aggregator_and_no_change(backend: str) -> None:
    adj, alive = graph(6, CHAIN)
    r = ops.dag_edit(adj, alive, edits_of((CON, 2, 99), (NOC, 77, -5)), backend=backend)
    assert r.accepted.tolist() == [True, True]
    assert r.reason.tolist() == [R["ok"], R["no_change"]]
    assert edge_set(r.adj) == {*CHAIN, (2, 1)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_edits_see_the_graph_the_previous_ones_left(backend: str) -> None:
    adj, alive = graph(6, CHAIN)
    r = ops.dag_edit(adj, alive, edits_of((SER, 2, -1), (CON, 4, -1), (REM, 2, 4)), backend=backend)
    # 2 -> D(4) -> 3; CONNECT adds 4 -> sink; REMOVE 2 -> 4 links 2 to 4's successors (sink, 3), deletes 4
    assert r.reason.tolist() == [R["ok"], R["ok"], R["ok"]] and r.new_node.tolist() == [4, -1, -1]
    assert edge_set(r.adj) == {(0, 2), (2, 3), (2, 1), (3, 1)} and not r.alive[4]


# ---------------------------------------------------------------------------------------------- rejections
# (graph edges, alive or None, edit, max_out, reason)
REJECTS = [
    ("padding", CHAIN, None, (-1, 0, 2), 5),
    ("bad_kind", CHAIN, None, (5, 0, 2), 5),
    ("bad_kind", CHAIN, None, (-7, 0, 2), 5),
    ("unknown_node", CHAIN, None, (PAR, 9, -1), 5),
    ("unknown_node", CHAIN, None, (SER, -1, -1), 5),
    ("unknown_node", CHAIN, None, (CON, 4, -1), 5),  # dead node
    ("unknown_node", CHAIN, None, (REM, 0, 5), 5),  # dead arg
    ("unknown_node", CHAIN, None, (PAR, 0, 6), 5),  # arg outside [0, N)
    ("not_a_successor", CHAIN, None, (REM, 0, 3), 5),
    ("not_a_successor", CHAIN, None, (PAR, 0, 3), 5),
    ("sink", CHAIN, None, (PAR, 1, -1), 5),  # the aggregator never edits
    ("sink", CHAIN, None, (REM, 3, 1), 5),  # ... nor loses an in-edge by REMOVE
    ("out_degree", [(0, 2), (0, 3), (2, 1), (3, 1)], None, (PAR, 0, 2), 2),
    ("out_degree", [(0, 2), (0, 3), (2, 1), (3, 1)], None, (SER, 0, -1), 2),
    ("out_degree", [(0, 2), (0, 3), (2, 1), (3, 1)], None, (CON, 0, -1), 2),
    ("duplicate_edge", CHAIN, None, (CON, 3, -1), 5),
    ("no_capacity", CHAIN, [0, 1, 2, 3, 4, 5], (PAR, 0, 2), 5),
    ("no_capacity", CHAIN, [0, 1, 2, 3, 4, 5], (SER, 2, -1), 5),
    # a cyclic input: 2 -> 3 -> 2. Serial on 2 would put D on that cycle; REMOVE(2, 3) would link 2 -> 2
    ("cycle", [(0, 2), (2, 3), (3, 2), (3, 1)], None, (SER, 2, -1), 5),
    ("cycle", [(0, 2), (2, 3), (3, 2), (3, 1)], None, (REM, 2, 3), 5),
    ("cycle", [(0, 2), (2, 3), (3, 2), (3, 1)], None, (PAR, 2, 3), 5),  # D copies 3 -> 2
    # the sink feeds 3 (only an unrepaired graph has that): 3 -> sink closes a cycle
    ("cycle", [(0, 2), (2, 1), (1, 3)], None, (CON, 3, -1), 5),
    # source -> {2, 3}, only 2 reaches the sink; max_out 1 leaves no room to link 2's successors
    ("last_path", [(0, 2), (0, 3), (2, 1)], None, (REM, 0, 2), 1),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(("why", "edges", "live", "edit", "max_out"), REJECTS)
def test_rejected_edit_reports_its_reason_and_changes_nothing(
    backend, why, edges, live, edit, max_out
) -> None:
    adj, alive = graph(6, edges, live)
    r = ops.dag_edit(adj, alive, edits_of(edit), max_out=max_out, backend=backend)
    assert ops.EDIT_REASONS[int(r.reason[0])] == why
    assert r.accepted.tolist() == [False] and r.new_node.tolist() == [-1]
    np.testing.assert_array_equal(r.adj, adj)
    np.testing.assert_array_equal(r.alive, alive)
    assert r.adj is not adj and r.alive is not alive


@pytest.mark.parametrize("backend", BACKENDS)
def test_all_reasons_are_reachable(backend: str) -> None:
    seen = {why for why, *_ in REJECTS} | {"ok", "no_change"}
    assert seen == set(ops.EDIT_REASONS)


# ------------------------------------------------------------------------------------------------- repair


@pytest.mark.parametrize("backend", BACKENDS)
def test_repair_breaks_cycles_with_back_edges(backend: str) -> None:
    adj, alive = graph(5, [(0, 2), (2, 3), (3, 2), (3, 4), (4, 2), (3, 1)])
    r = ops.dag_repair(adj, alive, backend=backend)
    assert edge_set(r.adj) == {
        (0, 2),
        (2, 3),
        (3, 1),
    }  # 3 -> 2 back edge, then 4 -> 2 back edge, 4 a dead end
    assert edge_set(r.pruned_edges) == {(3, 2), (4, 2), (3, 4)} and r.pruned_nodes.tolist() == [0, 0, 0, 0, 1]
    assert not r.added_edges.any() and ops.toposort(r.adj, active=r.alive).is_dag


@pytest.mark.parametrize("backend", BACKENDS)
def test_repair_prunes_dead_ends_and_reconnects_the_source(backend: str) -> None:
    adj, alive = graph(6, [(0, 2), (2, 3), (4, 1)])  # 3 is a dead end, 4 has no in-edge
    r = ops.dag_repair(adj, alive, backend=backend)
    assert edge_set(r.adj) == {(0, 1)} and edge_set(r.added_edges) == {(0, 1)}
    assert r.alive.tolist() == [True, True, False, False, False, False]
    assert r.pruned_nodes.tolist() == [False, False, True, True, True, False]
    assert edge_set(r.pruned_edges) == {(0, 2), (2, 3), (4, 1)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_repair_drops_consistency_violations(backend: str) -> None:
    adj, alive = graph(6, [(0, 2), (2, 1), (2, 2), (2, 0), (1, 2), (2, 5)], alive=[0, 1, 2])
    r = ops.dag_repair(adj, alive, backend=backend)
    assert edge_set(r.adj) == {(0, 2), (2, 1)}
    assert edge_set(r.pruned_edges) == {(2, 2), (2, 0), (1, 2), (2, 5)}


def _betas(n: int, means: dict[tuple[int, int], tuple[float, float]]) -> tuple[np.ndarray, np.ndarray]:
    ea = np.ones((n, n), np.float32)
    eb = np.ones((n, n), np.float32)
    for (s, d), (a, b) in means.items():
        ea[s, d], eb[s, d] = a, b
    return ea, eb


@pytest.mark.parametrize("backend", BACKENDS)
def test_repair_drops_low_success_edges_but_never_the_last_path(backend: str) -> None:
    # source -> {2, 3} -> sink. 0 -> 2 fails (mean 1/6, 4 observations): dropped, and 2 is left without an
    # in-edge. 0 -> 3 and 3 -> 1 fail with too few observations (1 and 2.9): kept.
    adj, alive = graph(5, [(0, 2), (0, 3), (2, 1), (3, 1)])
    ea, eb = _betas(5, {(0, 2): (1.0, 5.0), (0, 3): (1.0, 2.0), (3, 1): (1.0, 3.9)})
    r = ops.dag_repair(adj, alive, ea, eb, backend=backend)
    assert edge_set(r.adj) == {(0, 3), (3, 1)} and r.pruned_nodes.tolist() == [0, 0, 1, 0, 0]
    # every path fails: the first failing edge in C order goes, the other one is the last path and stays
    ea2, eb2 = _betas(5, {(0, 2): (1.0, 5.0), (0, 3): (1.0, 5.0)})
    r2 = ops.dag_repair(adj, alive, ea2, eb2, backend=backend)
    assert edge_set(r2.adj) == {(0, 3), (3, 1)}
    # a mean at the threshold stays; min_obs and prior count the observations
    ea3, eb3 = _betas(5, {(0, 2): (3.0, 7.0)})
    assert edge_set(ops.dag_repair(adj, alive, ea3, eb3, threshold=0.3, backend=backend).adj) == edge_set(adj)
    assert (0, 2) not in edge_set(ops.dag_repair(adj, alive, ea3, eb3, threshold=0.31, backend=backend).adj)
    kept = ops.dag_repair(adj, alive, ea3, eb3, threshold=0.31, min_obs=9, backend=backend).adj
    assert (0, 2) in edge_set(kept)
    assert (0, 2) in edge_set(
        ops.dag_repair(adj, alive, ea3, eb3, threshold=0.31, prior=4.0, backend=backend).adj
    )


@pytest.mark.parametrize("backend", BACKENDS)
def test_repair_caps_out_degree_dropping_the_worst_edges(backend: str) -> None:
    edges = [(0, d) for d in range(2, 9)] + [(d, 1) for d in range(2, 9)]
    adj, alive = graph(9, edges)
    r = ops.dag_repair(adj, alive, backend=backend)
    assert sorted(d for s, d in edge_set(r.adj) if s == 0) == [2, 3, 4, 5, 6]  # highest index dropped first
    ea, eb = _betas(9, {(0, 2): (1.0, 9.0), (0, 5): (1.0, 4.0), (0, 8): (9.0, 1.0)})
    r2 = ops.dag_repair(adj, alive, ea, eb, threshold=0.0, backend=backend)
    assert sorted(d for s, d in edge_set(r2.adj) if s == 0) == [3, 4, 6, 7, 8]
    assert r2.pruned_nodes.tolist() == [0, 0, 1, 0, 0, 1, 0, 0, 0]
    r3 = ops.dag_repair(adj, alive, max_out=1, backend=backend)
    assert edge_set(r3.adj) == {(0, 2), (2, 1)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_single_graph_and_batch_agree(backend: str) -> None:
    adj, alive = graph(6, CHAIN)
    edits = edits_of((PAR, 0, 2), (REM, 2, 3), (CON, 4, -1))
    one = ops.dag_edit(adj, alive, edits, backend=backend)
    many = ops.dag_edit(np.stack([adj] * 3), np.stack([alive] * 3), np.stack([edits] * 3), backend=backend)
    assert one.adj.shape == (6, 6) and one.reason.shape == (3,) and many.reason.shape == (3, 3)
    for f in ("adj", "alive", "accepted", "reason", "new_node"):
        for b in range(3):
            np.testing.assert_array_equal(getattr(many, f)[b], getattr(one, f))
    rep = ops.dag_repair(one.adj, one.alive, backend=backend)
    assert rep.adj.shape == (6, 6) and rep.pruned_nodes.shape == (6,)
    assert one.reason.dtype == np.int8 and one.new_node.dtype == np.int32 and one.accepted.dtype == bool


@pytest.mark.parametrize("backend", BACKENDS)
def test_empty_batches_and_no_edits(backend: str) -> None:
    adj, alive = graph(4, [(0, 2), (2, 1)])
    none = ops.dag_edit(adj, alive, np.zeros((0, 3), np.int32), backend=backend)
    assert none.reason.shape == (0,) and none.new_node.shape == (0,)
    np.testing.assert_array_equal(none.adj, adj)
    empty = ops.dag_edit(
        np.zeros((0, 4, 4), bool), np.zeros((0, 4), bool), np.zeros((0, 5, 3), np.int32), backend=backend
    )
    assert empty.adj.shape == (0, 4, 4) and empty.reason.shape == (0, 5)
    rep = ops.dag_repair(np.zeros((0, 4, 4), bool), np.zeros((0, 4), bool), backend=backend)
    assert rep.adj.shape == (0, 4, 4) and rep.pruned_nodes.shape == (0, 4)


# -------------------------------------------------------------------------------------------- input errors


def _bad_calls():
    adj, alive = graph(6, CHAIN)
    e = edits_of((PAR, 0, 2))
    ea, eb = _betas(6, {})
    dead_source = alive.copy()
    dead_source[0] = False
    dangling = adj.copy()
    dangling[3, 5] = True
    return [
        ("adj", errors.DTypeError, lambda b: ops.dag_edit(adj.astype(np.int8), alive, e, backend=b)),
        ("adj", errors.ShapeError, lambda b: ops.dag_edit(adj[:, :5], alive, e, backend=b)),
        ("alive", errors.ShapeError, lambda b: ops.dag_edit(adj, alive[:5], e, backend=b)),
        ("edits", errors.DTypeError, lambda b: ops.dag_edit(adj, alive, e.astype(np.int64), backend=b)),
        (
            "edits",
            errors.ShapeError,
            lambda b: ops.dag_edit(adj, alive, np.zeros((2, 4), np.int32), backend=b),
        ),
        ("source", errors.OutOfRangeError, lambda b: ops.dag_edit(adj, alive, e, source=6, backend=b)),
        ("sink", errors.InvalidArgumentError, lambda b: ops.dag_edit(adj, alive, e, sink=0, backend=b)),
        ("max_out", errors.OutOfRangeError, lambda b: ops.dag_edit(adj, alive, e, max_out=0, backend=b)),
        (
            "max_out",
            errors.InvalidArgumentError,
            lambda b: ops.dag_edit(adj, alive, e, max_out=2.0, backend=b),
        ),
        ("alive", errors.InvalidArgumentError, lambda b: ops.dag_edit(adj, dead_source, e, backend=b)),
        ("adj", errors.InvalidArgumentError, lambda b: ops.dag_edit(dangling, alive, e, backend=b)),
        ("alive", errors.InvalidArgumentError, lambda b: ops.dag_repair(adj, dead_source, backend=b)),
        ("edge_beta", errors.InvalidArgumentError, lambda b: ops.dag_repair(adj, alive, ea, backend=b)),
        ("edge_alpha", errors.ShapeError, lambda b: ops.dag_repair(adj, alive, ea[:, :3], eb, backend=b)),
        (
            "edge_alpha",
            errors.NonFiniteError,
            lambda b: ops.dag_repair(adj, alive, ea * np.nan, eb, backend=b),
        ),
        ("edge_beta", errors.OutOfRangeError, lambda b: ops.dag_repair(adj, alive, ea, eb * 0, backend=b)),
        ("threshold", errors.OutOfRangeError, lambda b: ops.dag_repair(adj, alive, threshold=1.5, backend=b)),
        ("min_obs", errors.OutOfRangeError, lambda b: ops.dag_repair(adj, alive, min_obs=-1, backend=b)),
        (
            "prior",
            errors.OutOfRangeError,
            lambda b: ops.dag_repair(adj, alive, prior=float("nan"), backend=b),
        ),
        (
            "adj",
            errors.ShapeError,
            lambda b: ops.dag_repair(np.zeros((1, 1), bool), np.ones(1, bool), backend=b),
        ),
    ]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("index", range(len(_bad_calls())))
def test_input_errors_name_the_argument(backend: str, index: int) -> None:
    arg, cls, call = _bad_calls()[index]
    with pytest.raises(cls) as info:
        call(backend)
    assert info.value.arg == arg, str(info.value)


@needs_core
def test_core_checks_its_inputs_too() -> None:
    adj, alive = graph(6, CHAIN)
    adj, alive = adj[None], alive[None]
    e = edits_of((PAR, 0, 2))[None]
    with pytest.raises(errors.InvalidArgumentError) as info:
        core.dag_edit(adj, alive, e, 0, 0, 5)
    assert info.value.arg == "sink"
    with pytest.raises(errors.OutOfRangeError):
        core.dag_edit(adj, alive, e, 0, 1, 0)
    with pytest.raises(errors.ShapeError):
        core.dag_edit(adj, alive[:, :3], e, 0, 1, 5)
    with pytest.raises(errors.OutOfRangeError) as info:
        core.dag_repair(adj, alive, None, None, 0, 1, 2.0, 3.0, 1.0, 5)
    assert info.value.arg == "threshold"


def test_cuda_backend_has_no_dag_kernels() -> None:
    adj, alive = graph(6, CHAIN)
    with pytest.raises(errors.BackendUnavailableError):
        ops.dag_edit(adj, alive, edits_of((NOC, 0, 0)), backend="cuda")
    with pytest.raises(errors.BackendUnavailableError):
        ops.dag_repair(adj, alive, backend="cuda")


# ---------------------------------------------------------------------------------------------- parity


def random_batch(
    rng: np.random.Generator, B: int, N: int, E: int, *, messy: bool
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Random graphs, edits and edge Betas. ``messy``: cycles, self-loops and edges out of the sink allowed
    (still no edge touching a dead node, which dag_edit refuses); else index-ordered DAGs."""
    alive = rng.random((B, N)) < rng.uniform(0.3, 1.0)
    alive[:, [SOURCE, SINK]] = True
    adj = rng.random((B, N, N)) < rng.uniform(0.02, 0.4)
    if not messy:
        rank = rng.permutation(N)  # a random topological order from the source to the sink
        rank[[SOURCE, SINK]] = -1, N
        adj &= (rank[:, None] < rank[None, :])[None]
    adj &= alive[:, :, None] & alive[:, None, :]
    kinds = rng.integers(-2, 6, (B, E))
    nodes = np.where(rng.random((B, E)) < 0.9, rng.integers(0, N, (B, E)), rng.integers(-2, N + 2, (B, E)))
    args = np.where(rng.random((B, E)) < 0.3, -1, rng.integers(-1, N + 1, (B, E)))
    edits = np.stack([kinds, nodes, args], axis=-1).astype(np.int32)
    ea = rng.uniform(0.05, 8.0, (B, N, N)).astype(np.float32)
    eb = rng.uniform(0.05, 8.0, (B, N, N)).astype(np.float32)
    return adj, alive, edits, ea, eb


def assert_same(got, want) -> None:
    for f, w in vars(want).items():
        g = getattr(got, f)
        assert g.dtype == w.dtype and g.shape == w.shape, f
        np.testing.assert_array_equal(g, w, err_msg=f)


@needs_core
@pytest.mark.parametrize("N", [2, 7, 32, 64, 65, 130])
@pytest.mark.parametrize("messy", [False, True])
def test_cpu_equals_reference_on_random_batches(N: int, messy: bool) -> None:
    rng = np.random.default_rng(N * 2 + messy)
    B = 6 if N > 100 else 24 if N > 64 else 64
    adj, alive, edits, ea, eb = random_batch(rng, B, N, 16, messy=messy)
    want = ops.dag_edit(adj, alive, edits, backend="reference")
    assert_same(ops.dag_edit(adj, alive, edits, backend="cpu"), want)
    assert len(set(want.reason.ravel().tolist())) >= 5  # the batch exercises many outcomes
    for max_out in (1, 3, 5):
        for betas in ((None, None), (ea, eb)):
            kw = {"max_out": max_out, "threshold": 0.35, "min_obs": 2.0}
            want_r = ops.dag_repair(adj, alive, *betas, backend="reference", **kw)
            assert_same(ops.dag_repair(adj, alive, *betas, backend="cpu", **kw), want_r)
            after = ops.dag_repair(want.adj, want.alive, *betas, backend="reference", **kw)
            assert_same(ops.dag_repair(want.adj, want.alive, *betas, backend="cpu", **kw), after)


@needs_core
def test_cpu_equals_reference_on_strided_inputs_and_other_ends() -> None:
    rng = np.random.default_rng(7)
    adj, alive, edits, ea, eb = random_batch(rng, 40, 20, 12, messy=True)
    # non-contiguous views of the same data: every other column / node, Fortran-ordered edits
    kw = {"source": 3, "sink": 7}
    alive[:, [3, 7]] = True
    holder = np.zeros((40, 20, 40), dtype=bool)
    holder[:, :, ::2] = adj
    adj_t = holder[:, :, ::2]
    alive_s = np.repeat(alive, 2, axis=1)[:, ::2]
    edits_f = np.asfortranarray(edits)
    assert not adj_t.flags.c_contiguous and not alive_s.flags.c_contiguous
    assert_same(
        ops.dag_edit(adj_t, alive_s, edits_f, backend="cpu", **kw),
        ops.dag_edit(adj_t, alive_s, edits_f, backend="reference", **kw),
    )
    ea_t, eb_t = ea.transpose(0, 2, 1), eb[:, ::-1, :]
    assert_same(
        ops.dag_repair(adj_t, alive_s, ea_t, eb_t, backend="cpu", **kw),
        ops.dag_repair(adj_t, alive_s, ea_t, eb_t, backend="reference", **kw),
    )


@needs_core
def test_cpu_threads_give_the_same_result_as_one_graph_at_a_time() -> None:
    rng = np.random.default_rng(11)
    adj, alive, edits, ea, eb = random_batch(rng, 2048, 32, 8, messy=False)  # big enough for the thread team
    batch = ops.dag_edit(adj, alive, edits, backend="cpu")
    rep = ops.dag_repair(batch.adj, batch.alive, ea, eb, backend="cpu")
    for b in rng.choice(2048, 16, replace=False):
        assert_same(
            ops.dag_edit(adj[b], alive[b], edits[b], backend="cpu"),
            type(batch)(*(x[b] for x in vars(batch).values())),
        )
        one = ops.dag_repair(batch.adj[b], batch.alive[b], ea[b], eb[b], backend="cpu")
        assert_same(one, type(rep)(*(x[b] for x in vars(rep).values())))


# ---------------------------------------------------------------------------------------------- properties


def check_repaired(adj: np.ndarray, alive: np.ndarray, max_out: int, backend: str) -> None:
    """A repaired graph: a DAG, source -> sink, out-degree <= max_out, nothing touching a dead node, every live
    node on a source -> sink path, and a fixpoint of the repair."""
    assert ops.toposort(adj, active=alive).is_dag
    assert not ops.toposort(adj).removed.any()  # no cycle through dead nodes either
    assert reaches(adj, SOURCE, SINK)
    assert (adj.sum(axis=1) <= max_out).all()
    assert not (adj & ~(alive[:, None] & alive[None, :])).any()
    for n in np.flatnonzero(alive):
        assert reaches(adj, SOURCE, int(n)) and reaches(adj, int(n), SINK), n
    again = ops.dag_repair(adj, alive, max_out=max_out, backend=backend)
    np.testing.assert_array_equal(again.adj, adj)
    np.testing.assert_array_equal(again.alive, alive)
    assert not again.pruned_edges.any() and not again.added_edges.any() and not again.pruned_nodes.any()


@st.composite
def scenarios(draw):
    """A random graph (DAG or messy), its edge Betas, a cap and up to 16 edits. Most edits are drawn against the
    graph the earlier ones leave (a live node, one of its successors), so many are accepted; the rest are raw
    values (bad kinds, unknown nodes, padding)."""
    n = draw(st.integers(2, 20))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    adj, alive, _, ea, eb = random_batch(rng, 1, n, 1, messy=draw(st.booleans()))
    adj, alive, ea, eb = adj[0], alive[0], ea[0], eb[0]
    max_out = draw(st.integers(1, 5))
    g, a = adj, alive
    rows = []
    for _ in range(draw(st.integers(0, 16))):
        if draw(st.integers(0, 4)) == 0:  # raw values
            rows.append(draw(st.tuples(st.integers(-2, 5), st.integers(-1, n), st.integers(-2, n))))
        else:
            kind = draw(st.sampled_from([PAR, PAR, SER, REM, REM, CON, NOC]))
            live = np.flatnonzero(a)
            node = int(live[draw(st.integers(0, len(live) - 1))])
            succ = np.flatnonzero(g[node])
            pick = draw(st.integers(-1, 4))
            arg = -1 if pick < 0 or len(succ) == 0 else int(succ[pick % len(succ)])
            rows.append((kind, node, arg))
        step = ops.dag_edit(g, a, edits_of(rows[-1]), max_out=max_out, backend="reference")
        g, a = step.adj, step.alive
    edits = np.array(rows, dtype=np.int32).reshape(-1, 3)
    return adj, alive, edits, ea, eb, max_out


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_property_edits_then_repair_leave_a_valid_dag(backend: str, scenario) -> None:
    adj, alive, edits, ea, eb, max_out = scenario
    batch = ops.dag_edit(adj, alive, edits, max_out=max_out, backend=backend)
    # one edit at a time gives the same graphs; a rejected edit leaves its graph unchanged
    g, a = adj, alive
    for e, row in enumerate(edits):
        step = ops.dag_edit(g, a, row[None], max_out=max_out, backend=backend)
        assert step.reason[0] == batch.reason[e] and step.new_node[0] == batch.new_node[e]
        if not step.accepted[0] or step.reason[0] == codes.REASON_NO_CHANGE:
            np.testing.assert_array_equal(step.adj, g)
            np.testing.assert_array_equal(step.alive, a)
        else:
            assert (step.adj != g).any() or (step.alive != a).any()
        assert not (step.adj & ~(step.alive[:, None] & step.alive[None, :])).any()  # consistency kept
        g, a = step.adj, step.alive
    np.testing.assert_array_equal(batch.adj, g)
    np.testing.assert_array_equal(batch.alive, a)
    for betas in ((None, None), (ea, eb)):
        rep = ops.dag_repair(g, a, *betas, max_out=max_out, backend=backend)
        check_repaired(rep.adj, rep.alive, max_out, backend)
        np.testing.assert_array_equal(rep.pruned_edges, g & ~rep.adj)
        np.testing.assert_array_equal(rep.added_edges, rep.adj & ~g)
        np.testing.assert_array_equal(rep.pruned_nodes, a & ~rep.alive)
        assert edge_set(rep.added_edges) <= {(SOURCE, SINK)}


@pytest.mark.parametrize("backend", BACKENDS)
@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_property_accepted_edits_keep_a_repaired_graph_valid(backend: str, scenario) -> None:
    """From a repaired graph every accepted edit keeps a DAG where the source reaches the sink within the cap."""
    adj, alive, edits, ea, eb, max_out = scenario
    rep = ops.dag_repair(adj, alive, ea, eb, max_out=max_out, backend=backend)
    g, a = rep.adj, rep.alive
    for row in edits:
        step = ops.dag_edit(g, a, row[None], max_out=max_out, backend=backend)
        g, a = step.adj, step.alive
        assert ops.toposort(g).is_dag and reaches(g, SOURCE, SINK)
        assert (g.sum(axis=1) <= max_out).all()
    final = ops.dag_repair(g, a, max_out=max_out, backend=backend)
    check_repaired(final.adj, final.alive, max_out, backend)
