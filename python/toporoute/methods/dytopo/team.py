"""Agent teams of the worker/manager methods: roles, system prompts and output schemas, from data files.

The teams and prompt templates live in ``prompts/`` (``teams.json``, ``system.txt``, ``*_user.txt``); this
module only renders them. Field names are the paper's (``public_content``, ``private_content``, ``q_vector``,
``k_vector``, ``answer``, ``is_complete``, ``next_goal``).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from typing import Any

from ...errors import InvalidArgumentError
from ..episode import DOMAINS
from ..prompt_files import read_json, read_text

__all__ = ["DOMAINS", "AgentSpec", "Team", "load_team", "prompt_text"]

# String caps (characters), so that a model stuck repeating itself cannot run a field to max_tokens and leave
# invalid JSON behind: guided decoding closes a string at its cap. The caps share a budget of about 3.5
# characters per completion token (public message 60%, four private entries 5% each, descriptors 10% each),
# and never exceed what the prompts ask for (at most 2000 words: 12000 characters).
_MAX_TEXT = 12000
_MAX_DESCRIPTOR = 300
_MAX_PRIVATE_ENTRIES = 4


def _caps(max_tokens: int) -> tuple[int, int, int]:
    """(public text, private entry, descriptor) caps in characters for ``max_tokens`` per reply."""
    budget = 3.5 * max_tokens

    def clamp(share: float, low: int, high: int) -> int:
        return int(min(high, max(low, share * budget)))

    return clamp(0.6, 100, _MAX_TEXT), clamp(0.05, 40, _MAX_TEXT // 4), clamp(0.1, 60, _MAX_DESCRIPTOR)


_COMMON_FIELDS = {
    "private_content": '{"TargetRole": "Instruction"} (what you want specific teammates to do)',
    "q_vector": "String. REQUIRED. One sentence: what you need next (query), e.g. 'I need ...'.",
    "k_vector": "String. REQUIRED. One sentence: what you provide (key), e.g. 'I provide ...'.",
}
_MANAGER_FIELDS = {
    "is_complete": "Boolean.",
    "next_goal": "String. The goal of the next round.",
}
_COMMON_RULES = (
    "Keep q_vector and k_vector to one short sentence each.",
    "Output the JSON object and nothing else.",
)


def prompt_text(name: str) -> str:
    """A prompt file of ``toporoute/methods/prompts/dytopo``."""
    return read_text("dytopo", name)


@dataclass(frozen=True)
class AgentSpec:
    """One agent: its name, role title, system prompt and output schema."""

    name: str
    title: str
    system: str
    schema: dict[str, Any]
    fields: tuple[str, ...]
    is_manager: bool = False


@dataclass(frozen=True)
class Team:
    """The workers (index order = node order of every graph) and the manager of one domain."""

    domain: str
    workers: tuple[AgentSpec, ...]
    manager: AgentSpec
    answer_agent: str

    @property
    def names(self) -> list[str]:
        return [w.name for w in self.workers]


def _schema(fields: dict[str, str], manager: bool, max_tokens: int) -> dict[str, Any]:
    text_cap, private_cap, descriptor_cap = _caps(max_tokens)
    props: dict[str, Any] = {}
    for name in fields:
        if name == "private_content":
            props[name] = {
                "type": "object",
                "additionalProperties": {"type": "string", "maxLength": private_cap},
                "maxProperties": _MAX_PRIVATE_ENTRIES,
            }
        elif name in ("q_vector", "k_vector"):
            props[name] = {"type": "string", "maxLength": descriptor_cap}
        elif name == "is_complete":
            props[name] = {"type": "boolean"}
        else:
            props[name] = {"type": "string", "maxLength": text_cap}
    return {
        "type": "object",
        "properties": props,
        "required": list(fields),
        "additionalProperties": False,
        "title": "ManagerOutput" if manager else "WorkerOutput",
    }


def _agent(entry: dict[str, Any], manager: bool, max_tokens: int) -> AgentSpec:
    fields = {"public_content": "String. Your contribution to the task."}
    fields.update(_COMMON_FIELDS)
    if manager:
        fields.update(_MANAGER_FIELDS)
    fields.update(entry.get("fields", {}))
    # answer (math Solver) sits before the descriptors, as in the paper's prompt
    order = [
        "public_content",
        "private_content",
        "answer",
        "q_vector",
        "k_vector",
        "is_complete",
        "next_goal",
    ]
    fields = {k: fields[k] for k in order if k in fields}
    rules = list(entry.get("rules") or [f"Your main job: {entry['description']}"]) + list(_COMMON_RULES)
    system = (
        prompt_text("system.txt")
        .format(
            name=entry["name"],
            title=entry["title"],
            description=entry["description"],
            fields="{\n" + ",\n".join(f'  "{k}": {v}' for k, v in fields.items()) + "\n}",
            rules="\n".join(f"{i}. {r}" for i, r in enumerate(rules, 1)),
        )
        .strip()
    )
    return AgentSpec(
        entry["name"], entry["title"], system, _schema(fields, manager, max_tokens), tuple(fields), manager
    )


@cache
def load_team(domain: str, max_tokens: int = 4096) -> Team:
    """The team of ``domain`` (``"code"``: Developer, Researcher, Tester, Designer; ``"math"``: ProblemParser,
    Solver, Verifier; each with a Manager), with output schemas sized for ``max_tokens`` per reply."""
    if domain not in DOMAINS:
        raise InvalidArgumentError(f"domain must be one of {DOMAINS}; got {domain!r}", "domain")
    spec = read_json("dytopo", "teams.json")[domain]
    workers = tuple(_agent(w, False, max_tokens) for w in spec["workers"])
    return Team(domain, workers, _agent(spec["manager"], True, max_tokens), spec["answer_agent"])
