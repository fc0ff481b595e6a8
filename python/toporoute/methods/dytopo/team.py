"""Agent teams of the worker/manager methods: roles, system prompts and output schemas, from data files.

The teams and prompt templates live in ``prompts/`` (``teams.json``, ``system.txt``, ``*_user.txt``); this
module only renders them. Field names are the paper's (``public_content``, ``private_content``, ``q_vector``,
``k_vector``, ``answer``, ``is_complete``, ``next_goal``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from ...errors import InvalidArgumentError
from ..episode import DOMAINS
from ..prompt_files import read_json, read_text

__all__ = ["DOMAINS", "AgentSpec", "Team", "agent_names", "agent_spec", "load_team", "prompt_text"]

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
    """One agent: its name, role title, system prompt, output schema and completion-token limit.

    ``query`` is the need the team file gives the agent before it has stated one (the manager's, used when it
    is matched as a sink node); empty for the others.
    """

    name: str
    title: str
    system: str
    schema: dict[str, Any]
    fields: tuple[str, ...]
    max_tokens: int
    is_manager: bool = False
    query: str = ""


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
        entry["name"],
        entry["title"],
        system,
        _schema(fields, manager, max_tokens),
        tuple(fields),
        max_tokens,
        manager,
        str(entry.get("query", "")),
    )


def agent_spec(
    name: str, title: str, description: str, *, manager: bool = False, max_tokens: int = 4096
) -> AgentSpec:
    """An agent outside the team files (the framework adapters' own roles, :mod:`toporoute.integrations`),
    with the same system prompt, fields and output schema as a team agent of that kind."""
    entry = {"name": name, "title": title, "description": description}
    return _agent(entry, manager, max_tokens)


def agent_names() -> tuple[str, ...]:
    """The names of every agent of every domain's team (workers and managers), sorted."""
    teams = read_json("dytopo", "teams.json")
    names = {t["manager"]["name"] for t in teams.values()}
    names.update(w["name"] for t in teams.values() for w in t["workers"])
    return tuple(sorted(names))


@cache
def _load_team(domain: str, max_tokens: int, role_max_tokens: tuple[tuple[str, int], ...]) -> Team:
    spec = read_json("dytopo", "teams.json")[domain]
    own = dict(role_max_tokens)

    def agent(entry: dict[str, Any], manager: bool) -> AgentSpec:
        return _agent(entry, manager, own.get(entry["name"], max_tokens))

    workers = tuple(agent(w, False) for w in spec["workers"])
    return Team(domain, workers, agent(spec["manager"], True), spec["answer_agent"])


def load_team(domain: str, max_tokens: int = 4096, role_max_tokens: Mapping[str, int] | None = None) -> Team:
    """The team of ``domain`` (``"code"``: Developer, Researcher, Tester, Designer; ``"math"``: ProblemParser,
    Solver, Verifier; each with a Manager).

    Each agent's reply is limited to ``role_max_tokens[name]`` completion tokens where given (names of other
    domains' agents are ignored), else ``max_tokens``; its output schema is sized for that limit.
    """
    if domain not in DOMAINS:
        raise InvalidArgumentError(f"domain must be one of {DOMAINS}; got {domain!r}", "domain")
    return _load_team(domain, max_tokens, tuple(sorted((role_max_tokens or {}).items())))
