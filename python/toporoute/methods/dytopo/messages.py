"""Agent outputs and memories of the worker/manager methods (pure functions, no LLM calls).

Parsing follows the DyTopo spec's resolutions: descriptor field aliases are accepted (``q_vector``/``q_desc``/
``query``, ``k_vector``/``k_desc``/``key``); an output that is not valid JSON after the re-prompts becomes the
public message as raw text, with empty private message and descriptors (the agent neither sends nor receives)
and a ``parse_error``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...llm.structured import extract_json, strip_reasoning
from ...llm.types import Result

__all__ = [
    "ManagerOutput",
    "MemoryBlock",
    "Routed",
    "WorkerOutput",
    "format_memory",
    "format_routed",
    "parse_manager",
    "parse_worker",
]

_Q_ALIASES = ("q_vector", "q_desc", "query")
_K_ALIASES = ("k_vector", "k_desc", "key")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False)


def _first(obj: Mapping[str, Any], names: Sequence[str]) -> str:
    for n in names:
        if n in obj and obj[n] is not None:
            return _text(obj[n]).strip()
    return ""


def _private(value: Any) -> dict[str, str]:
    if isinstance(value, Mapping):
        return {str(k): _text(v) for k, v in value.items() if _text(v).strip()}
    text = _text(value).strip()
    return {"": text} if text else {}


@dataclass(frozen=True)
class WorkerOutput:
    """One worker's round output O_i: public and private messages, need/offer descriptors, optional answer."""

    public: str
    private: dict[str, str] = field(default_factory=dict)
    query: str = ""
    key: str = ""
    answer: str | None = None
    parse_error: str | None = None

    def private_text(self, recipient: str | None = None, mode: str = "full") -> str:
        """The private message as routed to ``recipient``.

        ``mode="full"`` sends every entry (as ``-> Role: text`` lines); ``"addressed"`` only the entries whose
        key names the recipient, falling back to full when none does.
        """
        items = list(self.private.items())
        if mode == "addressed" and recipient is not None:
            mine = [(k, v) for k, v in items if k.strip().lower() == recipient.lower()]
            items = mine or items
        return "\n".join(f"-> {k}: {v}" if k else v for k, v in items)


@dataclass(frozen=True)
class ManagerOutput:
    """The manager's round decision."""

    public: str
    is_complete: bool
    next_goal: str
    query: str = ""
    key: str = ""
    parse_error: str | None = None


def _value(result: Result) -> tuple[Mapping[str, Any] | None, str | None]:
    """The JSON object of a result: the validated value, else a lenient parse of the raw text."""
    if result.parsed is not None and isinstance(result.parsed, Mapping):
        return result.parsed, None
    why = result.error.message if result.error is not None else "no JSON object"
    try:
        value = extract_json(strip_reasoning(result.text))
    except ValueError:
        return None, why
    return (value, why) if isinstance(value, Mapping) else (None, why)


def parse_worker(result: Result) -> WorkerOutput:
    """A worker's output from its LLM result (never raises; failures become ``parse_error``)."""
    obj, why = _value(result)
    if obj is None:
        return WorkerOutput(public=strip_reasoning(result.text).strip(), parse_error=why)
    answer = obj.get("answer")
    return WorkerOutput(
        public=_text(obj.get("public_content")).strip(),
        private=_private(obj.get("private_content")),
        query=_first(obj, _Q_ALIASES),
        key=_first(obj, _K_ALIASES),
        answer=None if answer is None else _text(answer).strip(),
        parse_error=why,
    )


def parse_manager(result: Result, previous_goal: str) -> ManagerOutput:
    """The manager's decision; an unusable output keeps the previous goal and does not halt (spec 8.11)."""
    obj, why = _value(result)
    if obj is None:
        return ManagerOutput(strip_reasoning(result.text).strip(), False, previous_goal, parse_error=why)
    complete = obj.get("is_complete")
    goal = _text(obj.get("next_goal")).strip()
    return ManagerOutput(
        public=_text(obj.get("public_content")).strip(),
        is_complete=complete is True or (isinstance(complete, str) and complete.strip().lower() == "true"),
        next_goal=goal or previous_goal,
        query=_first(obj, _Q_ALIASES),
        key=_first(obj, _K_ALIASES),
        parse_error=why,
    )


@dataclass(frozen=True)
class Routed:
    """One private message delivered to a recipient."""

    sender: str
    title: str
    score: float | None
    text: str


@dataclass(frozen=True)
class MemoryBlock:
    """What one round appended to an agent's memory H_i: its own public message and its routed inbox."""

    round: int
    public: str
    routed: tuple[Routed, ...]


def format_routed(routed: Sequence[Routed]) -> str:
    """Routed private messages as prompt text, one ``From <name> (<role>), relevance=<score>:`` entry each."""
    lines = []
    for m in routed:
        rel = "" if m.score is None else f", relevance={m.score:.2f}"
        lines.append(f"From {m.sender} ({m.title}){rel}:\n{m.text}")
    return "\n".join(lines)


def format_memory(blocks: Sequence[MemoryBlock]) -> str:
    """Memory H_i as prompt text, labelled by round (1-based in the text)."""
    if not blocks:
        return "(empty: this is the first round)"
    parts = []
    for b in blocks:
        parts.append(f"### Round {b.round + 1}: your public message\n{b.public or '(none)'}")
        if b.routed:
            parts.append(f"### Messages routed to you (round {b.round + 1})\n" + format_routed(b.routed))
    return "\n\n".join(parts)
