"""Reading TacoMAS's LLM outputs (spec §5), each defensively: a malformed output gives an error and the caller's
fallback, never an exception. Also the JSON schemas (and the judge's regular expression) of the structured calls,
and the encoding of a meta output into rows of :func:`toporoute.ops.team_project`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..._checks import is_number
from ...llm.structured import extract_json, strip_reasoning
from ...llm.types import Result
from ...types import team_codes as tc
from .team import Team, role_key

__all__ = [
    "COACH_SCHEMA",
    "JUDGE_REGEX",
    "JUDGE_SCHEMA",
    "TIME_CONTROLS",
    "Coaching",
    "Encoded",
    "MetaPlan",
    "Verdict",
    "encode_plan",
    "final_answer_text",
    "json_of",
    "meta_schema",
    "parse_coaching",
    "parse_meta",
    "parse_verdict",
]

TIME_CONTROLS = ("continue", "slow_again", "stop")


def _closed(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    """An object schema without other keys: under a guided engine the model cannot add a key whose unbounded
    string runs to ``max_tokens`` (the embedded model did, on open judge and coach schemas)."""
    return {"type": "object", "properties": properties, "required": required, "additionalProperties": False}


JUDGE_SCHEMA: dict[str, Any] = _closed(
    {"score": {"type": "number"}, "reason": {"type": "string", "maxLength": 160}}, ["score", "reason"]
)
"""The contribution judge's and the verifier's output (spec §5.7). No numeric bounds: an out-of-range score is
clamped by :func:`parse_verdict` (and recorded), not re-prompted."""

JUDGE_REGEX = r'\{"score": ?(0(\.[0-9]{1,3})?|1(\.0{1,3})?), ?"reason": ?"[^"\\\n]{0,200}"\}'
"""The same output as a regular expression, for engines that constrain regexes but not schemas."""

COACH_SCHEMA: dict[str, Any] = _closed(
    {"errors": {"type": "string", "maxLength": 240}, "plan": {"type": "string", "maxLength": 240}},
    ["errors", "plan"],
)

_ID = {"type": ["string", "null"], "maxLength": 40}
_TEXT = {"type": "string", "maxLength": 120}
_PLACEHOLDER = "^new_[A-Za-z0-9_]{1,32}$"
"""A newborn's placeholder in an edge of a guided meta reply (``new_<role>``)."""


def meta_schema(budget_pairs: int, budget_edges: int, ids: Sequence[str] = ()) -> dict[str, Any]:
    """The meta-LLM's output (spec §5.3) for a step's budgets and, given ``ids``, the team's agent ids.

    With ``ids``, a dead agent must be one of them (or null) and an edge end one of them or a newborn's
    placeholder ``new_<role>``: a guided engine then cannot name an agent that does not exist (a small model
    otherwise writes "1.0" or a role for an id, and every edit is rejected as ``unknown_node``); engines that do
    not guide still can, and the core rejects those with their reason.

    The operation lists may hold one pair and two edge edits more than the budgets, so that the core, not the
    schema, rejects an over-budget proposal with its reason, while a guided reply still closes within the meta
    call's 1024 tokens (a small model under a grammar otherwise repeats edits until it runs out of tokens); an
    engine that does not validate can send longer lists, cut at the settings' ``max_meta_ops``
    (``over_row_limit``). Objects are closed and strings bounded for the same reason, the feedback's keys
    included: they must name an agent of the team or a placeholder (without ``ids``, at most 40 characters), and
    are given as ``patternProperties``, which llguidance and xgrammar both enforce (llguidance ignores
    ``propertyNames``); a 135M model under an unbounded key otherwise writes one key until the token floor.
    """
    v_new = _closed(
        {
            "role": {"type": "string", "minLength": 1, "maxLength": 40},
            "goal": _TEXT,
            "tools": {"type": "array", "items": {"type": "string", "maxLength": 40}, "maxItems": 2},
        },
        ["role", "goal"],
    )
    end: dict[str, Any] = {"type": "string", "maxLength": 40}
    dead: dict[str, Any] = _ID
    keys = "^.{1,40}$"
    if ids:
        keys = "^(?:" + "|".join(re.escape(i) for i in ids) + "|" + _PLACEHOLDER[1:-1] + ")$"
        known = {"type": "string", "enum": list(ids)}
        end = {"anyOf": [known, {"type": "string", "pattern": _PLACEHOLDER}]}
        dead = {"anyOf": [known, {"type": "null"}]}
    pair = _closed({"v_dead": dead, "v_new": {"anyOf": [v_new, {"type": "null"}]}}, ["v_dead", "v_new"])
    edit = _closed(
        {"op": {"type": "string", "enum": ["edge_add", "edge_remove"]}, "from": end, "to": end},
        ["op", "from", "to"],
    )
    names = {"type": "array", "items": {"type": "string", "maxLength": 40}, "maxItems": 2}
    return _closed(
        {
            "birth_death_pairs": {"type": "array", "items": pair, "maxItems": budget_pairs + 1},
            "graph_edit": {"type": "array", "items": edit, "maxItems": budget_edges + 2},
            "graph_diff": _closed(
                {"nodes_added": names, "nodes_removed": names, "edges_added": names, "edges_removed": names},
                [],
            ),
            "agent_feedback": {
                "type": "object",
                "patternProperties": {keys: _closed({"prompt_delta": _TEXT, "memory_seed": _TEXT}, [])},
                "additionalProperties": False,
                "maxProperties": 4,
            },
            "global_rationale": {"type": "string", "maxLength": 200},
            "time_control": {"type": "string", "enum": list(TIME_CONTROLS)},
        },
        ["birth_death_pairs", "graph_edit", "agent_feedback", "global_rationale", "time_control"],
    )


def json_of(result: Result) -> tuple[Any, str | None]:
    """The JSON value of a result: the structured layer's validated value, else the one in its text; ``(None,
    why)`` when the call failed or holds none."""
    if not result.ok:
        return None, (result.error.message if result.error else "the call failed")
    if result.parsed is not None:
        return result.parsed, None
    body = strip_reasoning(result.text)
    try:
        return extract_json(body), None
    except ValueError as exc:
        return None, f"no JSON object: {exc}"


# ------------------------------------------------------------------------------------------------ judge, coach


@dataclass(frozen=True)
class Verdict:
    """A judge's or the verifier's ``{"score", "reason"}``: ``score`` None when unusable (then ``error``);
    an out-of-range score is clamped to [0, 1], with ``error`` saying so."""

    score: float | None
    reason: str
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _no_object(value: Any, why: str | None) -> str | None:
    """Why a JSON value from :func:`json_of` (``why``: its own error) is no object to read, or None."""
    if why is not None:
        return why
    return None if isinstance(value, dict) else f"expected a JSON object; got {type(value).__name__}"


def parse_verdict(value: Any, why: str | None = None) -> Verdict:
    """The verdict in a JSON value (from :func:`json_of`)."""
    error = _no_object(value, why)
    if error is not None:
        return Verdict(None, "", error)
    reason = value.get("reason")
    reason = reason.strip()[:300] if isinstance(reason, str) else ""
    raw = value.get("score")
    if isinstance(raw, bool) or raw is None:
        return Verdict(None, reason, f"score must be a number; got {raw!r}")
    try:
        score = float(raw)
    except (TypeError, ValueError):
        return Verdict(None, reason, f"score must be a number; got {raw!r}")
    if math.isnan(score):
        return Verdict(None, reason, "score is NaN")
    if not 0.0 <= score <= 1.0:
        clamped = min(1.0, max(0.0, score))
        return Verdict(clamped, reason, f"score {score!r} out of [0, 1]: clamped to {clamped:g}")
    return Verdict(score, reason)


@dataclass(frozen=True)
class Coaching:
    """The coach's ``{"errors", "plan"}``; ``error`` when unusable (then nothing goes to the memory)."""

    errors: str
    plan: str
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def parse_coaching(value: Any, why: str | None = None) -> Coaching:
    """The coaching in a JSON value (from :func:`json_of`)."""
    error = _no_object(value, why)
    if error is not None:
        return Coaching("", "", error)
    errors, plan = value.get("errors"), value.get("plan")
    if not isinstance(plan, str) or not plan.strip():
        return Coaching(
            errors.strip()[:600] if isinstance(errors, str) else "", "", "no plan (a non-empty string)"
        )
    return Coaching(errors.strip()[:600] if isinstance(errors, str) else "", plan.strip()[:600])


# ------------------------------------------------------------------------------------------------ meta


@dataclass(frozen=True)
class MetaPlan:
    """A meta output, read leniently: every list item is kept (as it came) for :func:`encode_plan` to judge.

    ``error`` says why the output is unusable as a whole (then no edit, no feedback, ``time_control``
    "continue").
    """

    pairs: list[Any] = field(default_factory=list)
    edits: list[Any] = field(default_factory=list)
    feedback: dict[str, Any] = field(default_factory=dict)
    rationale: str = ""
    time_control: str = "continue"
    error: str | None = None
    notes: list[str] = field(default_factory=list)


def parse_meta(value: Any, why: str | None = None) -> MetaPlan:
    """The plan in a meta output's JSON value; a missing or malformed part is noted and left empty (a bad
    ``time_control`` is "continue")."""
    error = _no_object(value, why)
    if error is not None:
        return MetaPlan(error=error)
    notes: list[str] = []

    def listed(key: str) -> list[Any]:
        got = value.get(key, [])
        if got is None:
            return []
        if not isinstance(got, list):
            notes.append(f"{key} must be a list; got {type(got).__name__}")
            return []
        return got

    feedback = value.get("agent_feedback") or {}
    if not isinstance(feedback, dict):
        notes.append(f"agent_feedback must be an object; got {type(feedback).__name__}")
        feedback = {}
    tc_raw = value.get("time_control", "continue")
    time_control = tc_raw.strip().lower() if isinstance(tc_raw, str) else ""
    if time_control not in TIME_CONTROLS:
        notes.append(f"time_control {tc_raw!r} is not one of {TIME_CONTROLS}: continue")
        time_control = "continue"
    rationale = value.get("global_rationale", "")
    return MetaPlan(
        listed("birth_death_pairs"),
        listed("graph_edit"),
        feedback,
        rationale.strip()[:600] if isinstance(rationale, str) else "",
        time_control,
        None,
        notes,
    )


@dataclass
class Encoded:
    """A plan as rows of ``ops.team_project`` plus one trace entry per proposed operation.

    Attributes
    ----------
    rows : ndarray, shape (P, 4), int32
        ``(kind, a, b, role)`` rows of the operations that could be encoded, in proposal order (pairs first).
    ops : list of dict
        Every proposed operation in proposal order: ``op``, ``text`` (the item as JSON), ``row`` (its row, or
        None when it could not be encoded), ``reason`` (a parse-level reason when not encoded), ``goal`` and
        ``role`` of a newborn.
    placeholders : dict of str to int
        Names that stand for a newborn (``new_<role>``, ``<role>`` when no alive agent has that id), to its row.
    """

    rows: np.ndarray
    ops: list[dict[str, Any]]
    placeholders: dict[str, int]


_OUT_OF_RANGE = 1 << 20  # a slot no team has: the core rejects the row as unknown_node


def _text(item: Any) -> str:
    try:
        return json.dumps(item, ensure_ascii=False)[:400]
    except (TypeError, ValueError):
        return repr(item)[:400]


def _ref(value: Any) -> str | None:
    if value is None:
        return None
    if is_number(value):
        return str(value)
    if isinstance(value, str):
        v = value.strip()
        return None if v.lower() in ("", "null", "none") else v
    return repr(value)


def encode_plan(plan: MetaPlan, team: Team, row_limit: int) -> Encoded:
    """Encodes ``plan`` for ``ops.team_project`` against the team (its role table grows by the new roles).

    Pairs become REPLACE (``v_dead`` and ``v_new``), BIRTH (``v_dead`` null: parent -1, the best scorer) or DEATH
    (``v_new`` null) rows; edge edits become EDGE_ADD / EDGE_REMOVE rows. An id resolves to an alive agent's
    slot, else to a newborn's placeholder ``-2 - row`` (``new_<role>``, ``<role>``, ``new``, ``new_<k>`` for
    the k-th newborn), else to an out-of-range slot, so that the core rejects the row as ``unknown_node`` with
    its reason. Items that cannot be encoded get a parse-level reason: ``unparsed`` (not an object, no
    operation, both sides null, an unknown ``op``), ``unknown_role_name`` (a newborn without a usable role);
    operations after the first ``row_limit`` get ``over_row_limit``.
    """
    rows: list[list[int]] = []
    ops: list[dict[str, Any]] = []
    placeholders: dict[str, int] = {}
    births = 0
    alive_ids = set(team.ids())

    for item in plan.pairs:
        entry: dict[str, Any] = {"op": "replace", "text": _text(item), "row": None, "reason": None}
        ops.append(entry)
        if len(ops) > row_limit:
            entry.update(reason="over_row_limit")
            continue
        if not isinstance(item, dict):
            entry.update(op="birth", reason="unparsed")
            continue
        dead, new = _ref(item.get("v_dead")), item.get("v_new")
        if new is not None and not isinstance(new, dict):
            entry.update(reason="unparsed")
            continue
        if dead is None and new is None:
            entry.update(op="birth", reason="unparsed")
            continue
        entry["op"] = "death" if new is None else "birth" if dead is None else "replace"
        role_id = -1
        if new is not None:
            role_raw = new.get("role")
            role = role_key(role_raw) if isinstance(role_raw, str) else ""
            if not role:
                entry.update(reason="unknown_role_name")
                continue
            role_id = team.table.id_of(role, add=True)
            goal = new.get("goal")
            entry.update(role=role, goal=goal.strip()[:400] if isinstance(goal, str) else "")
        a = -1 if dead is None else _slot(team, dead)
        kind = tc.TEAM_DEATH if new is None else tc.TEAM_BIRTH if dead is None else tc.TEAM_REPLACE
        entry["row"] = len(rows)
        rows.append([kind, a, 0, role_id])
        if new is not None:
            births += 1
            for name in (f"new_{entry['role']}", f"new_{births}", "new", entry["role"]):
                if name not in alive_ids:
                    placeholders.setdefault(name, entry["row"])
    for item in plan.edits:
        entry = {"op": "edge_add", "text": _text(item), "row": None, "reason": None}
        ops.append(entry)
        if len(ops) > row_limit:
            entry.update(reason="over_row_limit")
            continue
        if not isinstance(item, dict):
            entry.update(reason="unparsed")
            continue
        op = str(item.get("op", "")).strip().lower()
        if op not in ("edge_add", "edge_remove"):
            entry.update(reason="unparsed")
            continue
        entry["op"] = op
        src, dst = _ref(item.get("from")), _ref(item.get("to"))
        if src is None or dst is None:
            entry.update(reason="unparsed")
            continue
        kind = tc.TEAM_EDGE_ADD if op == "edge_add" else tc.TEAM_EDGE_REMOVE
        entry["row"] = len(rows)
        rows.append([kind, _node(team, src, placeholders), _node(team, dst, placeholders), 0])
    arr = np.asarray(rows, np.int32).reshape(len(rows), 4)
    return Encoded(arr, ops, placeholders)


def _slot(team: Team, ref: str) -> int:
    slot = team.slot_of(ref)
    return _OUT_OF_RANGE if slot is None else slot


def _node(team: Team, ref: str, placeholders: dict[str, int]) -> int:
    slot = team.slot_of(ref)
    if slot is not None:
        return slot
    key = role_key(ref)
    for name in (ref, key, f"new_{key}"):
        if name in placeholders:
            return -2 - placeholders[name]
    return _OUT_OF_RANGE


# ------------------------------------------------------------------------------------------------ answers

_FINAL = re.compile(r"final\s+answer\s*:", re.IGNORECASE)


def final_answer_text(text: str) -> str | None:
    """The text after the last ``Final Answer:`` marker (None when the reply has none)."""
    found = list(_FINAL.finditer(text))
    if not found:
        return None
    return text[found[-1].end() :].strip()
