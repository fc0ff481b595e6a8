"""Agent team and prompts of the Agent Q-Mix method, from data files.

The roles, system prompts and user prompt templates live in ``prompts/qmix/`` (``team.json`` names the files);
this module composes a team and renders its prompts. A team has ``n_agents`` slots: slots ``0 .. n-2`` hold the
domain's writer kind (``CodeWriter`` for code, ``MathSolver`` for maths, ``ReasoningAgent`` for multiple
choice) and the last slot an ``AnalyzeAgent`` (a team of one is a single writer). Writers take their role from
the domain's role pool by a deterministic rotation, ``pool[(role_offset + slot) % len(pool)]``, in place of the
original code's process-global cycle; a :class:`QMixTeam` also carries the system prompt of the FinalRefer
decision node. The multiple-choice (reasoning) team's agents, the AnalyzeAgent and an adversary included, get the
domain's format constraint (the option letter alone on the first line) after their system prompt, as the paper
describes (the original code gave it to FinalRefer only).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..._checks import is_int
from ...errors import InvalidArgumentError
from ..prompt_files import read_json, read_text

__all__ = [
    "DOMAINS",
    "QMixAgent",
    "QMixTeam",
    "final_prompt",
    "load_qmix_team",
    "role_offset_for",
    "worker_prompt",
]

_MAX_AGENTS = 16

DOMAINS = ("code", "math", "choice")
"""The task kinds Agent Q-Mix solves, each with its team: code, math and multiple choice (the reasoning team)."""


def _text(name: str) -> str:
    """A file of ``toporoute/methods/prompts/qmix``, stripped of surrounding blank space."""
    return read_text("qmix", name).strip()


def _spec() -> dict[str, Any]:
    """The parsed ``team.json``."""
    spec: dict[str, Any] = read_json("qmix", "team.json")
    return spec


def _template(key: str) -> str:
    """The user prompt template named ``key`` in ``team.json``."""
    return _text(_spec()["templates"][key])


@dataclass(frozen=True)
class QMixAgent:
    """One agent of a Q-Mix team.

    Attributes
    ----------
    name : str
        Kind and slot index, e.g. ``"CodeWriter_0"`` or ``"AnalyzeAgent_2"``.
    kind : str
        ``"CodeWriter"``, ``"MathSolver"``, ``"ReasoningAgent"`` or ``"AnalyzeAgent"``.
    role : str
        Role title, e.g. ``"Algorithm Designer"``; ``"Analyzer"`` for the AnalyzeAgent and ``"Adversary"`` for
        an adversarial agent.
    system : str
        The full system prompt.
    """

    name: str
    kind: str
    role: str
    system: str


@dataclass(frozen=True)
class QMixTeam:
    """The agents of one domain (tuple order = node order) and the FinalRefer system prompt.

    Attributes
    ----------
    domain : str
        One of :data:`DOMAINS`.
    agents : tuple of QMixAgent
        The agents, slot by slot.
    final_system : str
        System prompt of the FinalRefer decision node: the domain's decision role and format constraint.
    """

    domain: str
    agents: tuple[QMixAgent, ...]
    final_system: str

    @property
    def names(self) -> list[str]:
        """Names of the agents, in slot order."""
        return [agent.name for agent in self.agents]


def load_qmix_team(
    domain: str, *, n_agents: int = 3, role_offset: int = 0, adversarial_agent_index: int | None = None
) -> QMixTeam:
    """Compose the Q-Mix team of a domain.

    Parameters
    ----------
    domain : str
        One of :data:`DOMAINS`: ``"code"``, ``"math"`` or ``"choice"`` (two ReasoningAgents and an AnalyzeAgent
        for n = 3, every agent with the multiple-choice format constraint).
    n_agents : int, default 3
        Number of agents, 1 to 16. Slots ``0 .. n_agents-2`` are writers and the last slot is an AnalyzeAgent
        when ``n_agents >= 2``; a single agent is one writer.
    role_offset : int, default 0
        Rotation of the role pool: the writer at slot ``s`` gets role ``pool[(role_offset + s) % len(pool)]``.
        See :func:`role_offset_for` for a per-episode offset.
    adversarial_agent_index : int or None, default None
        Slot whose system prompt is replaced by the adversarial one (role ``"Adversary"``); None for no
        adversary.

    Returns
    -------
    QMixTeam
        The team.

    Raises
    ------
    InvalidArgumentError
        Unknown ``domain``, ``n_agents`` outside 1..16, a non-integer ``role_offset`` or an
        ``adversarial_agent_index`` outside ``0 .. n_agents-1``.
    """
    spec = _spec()
    if domain not in DOMAINS:
        raise InvalidArgumentError(f"domain must be one of {DOMAINS}, got {domain!r}", "domain")
    if not is_int(n_agents) or not 1 <= n_agents <= _MAX_AGENTS:
        raise InvalidArgumentError(
            f"n_agents must be an integer in 1..{_MAX_AGENTS}, got {n_agents!r}", "n_agents"
        )
    if not is_int(role_offset):
        raise InvalidArgumentError(f"role_offset must be an integer, got {role_offset!r}", "role_offset")
    if adversarial_agent_index is not None and (
        not is_int(adversarial_agent_index) or not 0 <= adversarial_agent_index < n_agents
    ):
        raise InvalidArgumentError(
            f"adversarial_agent_index must be None or an integer in 0..{n_agents - 1}, "
            f"got {adversarial_agent_index!r}",
            "adversarial_agent_index",
        )
    domain_spec = spec["domains"][domain]
    pool = domain_spec["roles"]
    analyzer = spec["analyzer"]
    adversary = spec["adversary"]
    constraint = _text(domain_spec["constraint"]) if "constraint" in domain_spec else ""
    n_writers = n_agents - 1 if n_agents >= 2 else 1
    agents = []
    for slot in range(n_agents):
        if slot < n_writers:
            kind = domain_spec["writer"]
            role_spec = pool[(role_offset + slot) % len(pool)]
        else:
            kind = analyzer["kind"]
            role_spec = analyzer
        if slot == adversarial_agent_index:
            role_spec = adversary
        system = _text(role_spec["file"])
        if constraint:
            system = f"{system}\n\n{constraint}"
        agents.append(QMixAgent(f"{kind}_{slot}", kind, role_spec["title"], system))
    return QMixTeam(domain, tuple(agents), _text(domain_spec["final"]))


def role_offset_for(seed: int, episode: str) -> int:
    """A deterministic role offset for one episode of one run.

    Parameters
    ----------
    seed : int
        Run seed.
    episode : str
        Episode identifier (e.g. a task id).

    Returns
    -------
    int
        A non-negative integer below ``2**63`` from the SHA-256 digest of ``seed`` and ``episode``: the same in
        every process, unlike :func:`hash`.
    """
    digest = hashlib.sha256(f"{int(seed)}\x00{episode}".encode()).digest()
    return int.from_bytes(digest[:8], "big") >> 1


def worker_prompt(
    team: QMixTeam, i: int, task: str, inbound: Sequence[tuple[str, str, str]], previous: str | None
) -> str:
    """The user prompt of agent ``i`` in one round.

    Parameters
    ----------
    team : QMixTeam
        The team.
    i : int
        Slot of the agent.
    task : str
        The task text.
    inbound : sequence of (str, str, str)
        ``(agent name, role, text)`` of the in-neighbours' outputs of this round, in the order to show them.
        Entries with empty text are skipped.
    previous : str or None
        The agent's own output of the previous round; None (or empty) for none.

    Returns
    -------
    str
        The task, then the other agents' outputs (only when there are any), then the agent's previous output
        (only when present), then the closing instruction of the agent's kind.

    Raises
    ------
    InvalidArgumentError
        ``i`` is not a slot of ``team``.
    """
    if not is_int(i) or not 0 <= i < len(team.agents):
        raise InvalidArgumentError(f"i must be an integer in 0..{len(team.agents) - 1}, got {i!r}", "i")
    sections = [_template("worker_task").format(task=task.strip())]
    items = [_agent_block(name, role, text) for name, role, text in inbound if text and text.strip()]
    if items:
        sections.append(_template("worker_inbound").format(items="\n\n".join(items)))
    if previous and previous.strip():
        sections.append(_template("worker_previous").format(previous=previous.strip()))
    sections.append(_spec()["closing"][team.agents[i].kind])
    return "\n\n".join(sections)


def final_prompt(team: QMixTeam, task: str, outputs: Sequence[tuple[str, str, str]]) -> str:
    """The user prompt of the FinalRefer decision node.

    Parameters
    ----------
    team : QMixTeam
        The team (its FinalRefer system prompt is ``team.final_system``).
    task : str
        The task text.
    outputs : sequence of (str, str, str)
        ``(agent name, role, text)`` of every agent's latest output, in the order to show them; an empty text
        is shown as a placeholder.

    Returns
    -------
    str
        The task, every agent's output, then the instruction to write the best final answer.
    """
    empty = _spec()["empty_output"]
    items = [
        _agent_block(name, role, text if text and text.strip() else empty) for name, role, text in outputs
    ]
    return _template("final_user").format(task=task.strip(), items="\n\n".join(items))


def _agent_block(name: str, role: str, text: str) -> str:
    """One agent's output as shown to another agent."""
    return _template("agent_output").format(name=name, role=role, text=text.strip())
