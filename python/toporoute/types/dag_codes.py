"""Codes of the DAG evolution ops (:func:`toporoute.ops.dag_edit`, :func:`toporoute.ops.dag_repair`): the edit
kinds of an ``edits[b, e] = (kind, node, arg)`` row and the reason codes of each edit's outcome.

The one definition shared by the facade, the numpy reference and the tests; ``cpp/include/toporoute/dag.hpp``
mirrors it (``EditKind``, ``EditReason``) and ``tests/ops/test_hiva_dag.py`` checks that the compiled core
agrees.
"""

from __future__ import annotations

__all__ = [
    "EDIT_ADD_PARALLEL",
    "EDIT_ADD_SERIAL",
    "EDIT_CONNECT_TO_AGGREGATOR",
    "EDIT_KINDS",
    "EDIT_NO_CHANGE",
    "EDIT_PADDING",
    "EDIT_REASONS",
    "EDIT_REMOVE_SUCCESSOR",
    "REASON_BAD_KIND",
    "REASON_CYCLE",
    "REASON_DUPLICATE_EDGE",
    "REASON_LAST_PATH",
    "REASON_NOT_A_SUCCESSOR",
    "REASON_NO_CAPACITY",
    "REASON_NO_CHANGE",
    "REASON_OK",
    "REASON_OUT_DEGREE",
    "REASON_PADDING",
    "REASON_SINK",
    "REASON_UNKNOWN_NODE",
]

# Edit kinds (column 0 of an edit row).
EDIT_PADDING = -1
"""A padding row: skipped (``accepted`` False, reason ``"padding"``)."""
EDIT_NO_CHANGE = 0
"""Accepted; the graph does not change (reason ``"no_change"``)."""
EDIT_ADD_PARALLEL = 1
"""``A->B->C`` becomes ``A->(B, D)->C``: a new node D beside the sibling ``arg`` (-1: the lowest-index
successor of A that is not the sink)."""
EDIT_ADD_SERIAL = 2
"""``A->B->C`` becomes ``A->D->B->C``: a new node D takes over A's out-edges."""
EDIT_REMOVE_SUCCESSOR = 3
"""Remove ``A->arg``, link A to arg's successors, delete arg when it has no in-edge left."""
EDIT_CONNECT_TO_AGGREGATOR = 4
"""Add ``A->sink``."""

EDIT_KINDS: tuple[str, ...] = (
    "no_change",
    "add_parallel",
    "add_serial",
    "remove_successor",
    "connect_to_aggregator",
)
"""Names of the edit kinds, indexed by kind code (0 .. 4)."""

# Reason codes (the ``reason`` output), indexed into EDIT_REASONS.
REASON_OK = 0
REASON_NO_CHANGE = 1
REASON_PADDING = 2
REASON_UNKNOWN_NODE = 3
REASON_BAD_KIND = 4
REASON_NOT_A_SUCCESSOR = 5
REASON_SINK = 6
REASON_OUT_DEGREE = 7
REASON_CYCLE = 8
REASON_LAST_PATH = 9
REASON_DUPLICATE_EDGE = 10
REASON_NO_CAPACITY = 11

EDIT_REASONS: tuple[str, ...] = (
    "ok",
    "no_change",
    "padding",
    "unknown_node",
    "bad_kind",
    "not_a_successor",
    "sink",
    "out_degree",
    "cycle",
    "last_path",
    "duplicate_edge",
    "no_capacity",
)
"""Names of the reason codes, indexed by code: ``EDIT_REASONS[reason[b, e]]``."""
