"""Codes of the team edit projection (:func:`toporoute.ops.team_project`): the operation kinds of an
``edits[b, p] = (kind, a, b, role)`` row, the reason codes of each row's outcome and the placeholder encoding.

The one definition shared by the facade, the numpy reference and the tests; ``cpp/include/toporoute/team_project.hpp``
mirrors it (``TeamKind``, ``TeamReason``) and ``tests/ops/test_team_project.py`` checks that the compiled core agrees.
"""

from __future__ import annotations

__all__ = [
    "REASON_BAD_KIND",
    "REASON_BAD_ROLE",
    "REASON_BUDGET_EDGES",
    "REASON_BUDGET_NODES",
    "REASON_BUDGET_PURE",
    "REASON_CONFLICT",
    "REASON_CRITICAL_ROLE",
    "REASON_DEAD_NODE",
    "REASON_DUPLICATE",
    "REASON_EDGE_EXISTS",
    "REASON_EDGE_MISSING",
    "REASON_MAX_NODES",
    "REASON_MIN_NODES",
    "REASON_NO_CAPACITY",
    "REASON_OK",
    "REASON_PADDING",
    "REASON_PLACEHOLDER",
    "REASON_PROTECTED",
    "REASON_SELF_LOOP",
    "REASON_SINK",
    "REASON_UNKNOWN_NODE",
    "TEAM_BEST_SCORER",
    "TEAM_BIRTH",
    "TEAM_DEATH",
    "TEAM_EDGE_ADD",
    "TEAM_EDGE_REMOVE",
    "TEAM_KINDS",
    "TEAM_MAX_NODES",
    "TEAM_PADDING",
    "TEAM_REASONS",
    "TEAM_REPLACE",
    "placeholder",
    "placeholder_row",
]

# Operation kinds (column 0 of an edit row).
TEAM_PADDING = -1
"""A padding row: skipped (``accepted`` False, reason ``"padding"``)."""
TEAM_REPLACE = 0
"""Birth/death pair: ``a`` dies and a new node of role ``role`` takes a fresh slot, inheriting ``a``'s edges."""
TEAM_BIRTH = 1
"""Pure birth of a node of role ``role``; ``a`` is the parent slot or :data:`TEAM_BEST_SCORER`."""
TEAM_DEATH = 2
"""Pure death of ``a``."""
TEAM_EDGE_ADD = 3
"""Add the edge ``a -> b`` (slots or placeholders)."""
TEAM_EDGE_REMOVE = 4
"""Remove the edge ``a -> b`` (slots or placeholders)."""

TEAM_KINDS: tuple[str, ...] = ("replace", "birth", "death", "edge_add", "edge_remove")
"""Names of the operation kinds, indexed by kind code (0 .. 4)."""

TEAM_BEST_SCORER = -1
"""Parent of a pure birth meaning "the best scorer among the surviving nodes other than the sink"."""

TEAM_MAX_NODES = 64
"""Node capacity N of one graph (a 64-bit bitset row per node in the compiled core)."""


def placeholder(row: int) -> int:
    """The node reference ``-2 - row``: the node born by row ``row`` (a REPLACE or BIRTH) of the same graph."""
    return -2 - row


def placeholder_row(ref: int) -> int:
    """The row a placeholder reference ``ref <= -2`` names (the inverse of :func:`placeholder`)."""
    return -2 - ref


# Reason codes (the ``reason`` output), indexed into TEAM_REASONS.
REASON_OK = 0
REASON_PADDING = 1
REASON_BAD_KIND = 2
REASON_UNKNOWN_NODE = 3
REASON_PLACEHOLDER = 4
REASON_SELF_LOOP = 5
REASON_DUPLICATE = 6
REASON_CONFLICT = 7
REASON_EDGE_EXISTS = 8
REASON_EDGE_MISSING = 9
REASON_DEAD_NODE = 10
REASON_SINK = 11
REASON_PROTECTED = 12
REASON_CRITICAL_ROLE = 13
REASON_MIN_NODES = 14
REASON_MAX_NODES = 15
REASON_NO_CAPACITY = 16
REASON_BUDGET_NODES = 17
REASON_BUDGET_PURE = 18
REASON_BUDGET_EDGES = 19
REASON_BAD_ROLE = 20

TEAM_REASONS: tuple[str, ...] = (
    "ok",
    "padding",
    "bad_kind",
    "unknown_node",
    "placeholder",
    "self_loop",
    "duplicate",
    "conflict",
    "edge_exists",
    "edge_missing",
    "dead_node",
    "sink",
    "protected",
    "critical_role",
    "min_nodes",
    "max_nodes",
    "no_capacity",
    "budget_nodes",
    "budget_pure",
    "budget_edges",
    "bad_role",
)
"""Names of the reason codes, indexed by code: ``TEAM_REASONS[reason[b, p]]``."""
