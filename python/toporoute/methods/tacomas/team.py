"""The TacoMAS team: slot arrays for the core ops plus each slot's agent (its capability state φ_v: role, goal,
constraint, memory, prompt deltas and score history), and the role table.

Pure state and bookkeeping, no LLM: the episode loop (:mod:`.method`) fills it. Arrays are per episode (never
shared), in the single-graph layout of the team ops: ``adj[src, dst]`` (row = sender), ``alive (N,)``,
``roles (N,)`` (role ids, -1 dead), ``generation (N,)``; ``protected (N,)`` marks the sink.

The initial team is one of the templates of ``prompts/tacomas/roles.json`` (spec §2 / A3). ``centralized``
(default, the paper's 5-role centralized template): the planner leads and is **the protected sink**; it exchanges
messages with the searcher, the calculator, the verifier and the reflector (each pair a 2-cycle, so every message
is the previous round's, spec A2), and its reply ends with a ``Final Answer:`` line (the system answer).
``pipeline``: planner -> searcher, planner -> calculator, searcher <-> verifier, calculator -> verifier,
verifier -> reflector, the reflector the sink. The sink's role is critical: its last agent can only be replaced
by one of the same role (and the sink never dies).

Every agent of a code or math task has that kind's tool (:func:`kind_tool`: the visible examples or a
calculator, run in the sandbox by the episode loop); choice tasks have none.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import InvalidArgumentError
from ..prompt_files import read_json, read_text

__all__ = ["Agent", "KindTool", "RoleTable", "Team", "kind_tool", "role_goal", "role_key"]


def _roles_file() -> dict[str, Any]:
    data: dict[str, Any] = read_json("tacomas", "roles.json")
    return data


def role_key(name: str) -> str:
    """A role name as the role table keys it: lower case, runs of other characters than letters and digits as
    one ``_`` (at most 40 characters); "" when nothing is left."""
    return re.sub(r"[^a-z0-9]+", "_", name.strip().lower()).strip("_")[:40]


def role_goal(role: str, kind: str) -> tuple[str, str]:
    """The (goal, constraint) of a template role for a task kind (``code``, ``math``, ``choice``); the
    ``default`` entry for other roles."""
    roles = _roles_file()["roles"]
    entry = roles.get(role, roles["default"])
    over = entry.get(kind, {})
    return str(over.get("goal", entry["goal"])), str(over.get("constraint", entry["constraint"]))


@dataclass(frozen=True)
class KindTool:
    """The tool every agent of a task kind has: its ``name``, the ``spec`` line the agents read, and its
    ``source`` (shipped with toporoute: ``tool_function(input_data, **kwargs)``, run only in the sandbox)."""

    name: str
    spec: str
    source: str


def kind_tool(kind: str) -> KindTool | None:
    """The tool of a task kind (``code``: the visible examples; ``math``: a calculator); None for others."""
    entry = _roles_file()["tools"].get(kind)
    if entry is None:
        return None
    method, _, name = str(entry["source"]).partition("/")
    return KindTool(str(entry["name"]), str(entry["spec"]), read_text(method, name))


@dataclass
class Agent:
    """One agent's identity and capability state φ_v.

    Attributes
    ----------
    id : str
        Its name: the role for the first agent of a role, ``role#n`` for the n-th (ids are never reused within
        an episode).
    role : str
    goal, constraint : str
    memory : list of str
        Coach plans and memory seeds, oldest first (bounded by the settings' ``memory_items``).
    prompt_deltas : list of str
        The meta-LLM's prompt deltas, appended to the system prompt (bounded).
    scores : dict of int to float
        The judged contribution c_v,t by round (rounds whose judge failed are missing).
    parent : str or None
        The agent it replaced (a replacement) or its parent (a pure birth); None for the template.
    born : int
        The round after which it was born (-1 for the template).
    last_output : str
    tools : list of str
        The tools it may call (its task kind's, see :func:`kind_tool`).
    """

    id: str
    role: str
    goal: str
    constraint: str
    memory: list[str] = field(default_factory=list)
    prompt_deltas: list[str] = field(default_factory=list)
    scores: dict[int, float] = field(default_factory=dict)
    parent: str | None = None
    born: int = -1
    last_output: str = ""
    tools: list[str] = field(default_factory=list)


@dataclass
class RoleTable:
    """Role names and their ids (ids are dense, in order of appearance; a new free-text role gets the next
    id)."""

    names: list[str] = field(default_factory=list)

    def id_of(self, name: str, *, add: bool = False) -> int:
        """The id of a role name (normalised with :func:`role_key`); -1 when unknown and not ``add``, or when
        the name is empty."""
        key = role_key(name)
        if not key:
            return -1
        if key in self.names:
            return self.names.index(key)
        if not add:
            return -1
        self.names.append(key)
        return len(self.names) - 1


class Team:
    """One episode's team.

    Parameters
    ----------
    capacity : int
        N, the node slots (N_max plus the fresh slots one slow step's replacements need; <= 64).
    kind : str
        The task kind (goals of the template roles, the agents' tool).
    template : str
        The starting team (``centralized`` or ``pipeline``).
    tools : bool
        Whether its agents have their task kind's tool (:func:`kind_tool`).

    Attributes
    ----------
    adj : ndarray, shape (N, N), bool
    alive : ndarray, shape (N,), bool
    roles : ndarray, shape (N,), int32
        Role ids (-1 for a dead slot).
    generation : ndarray, shape (N,), int32
        Bumped by the core each time a slot gets a new agent.
    protected : ndarray, shape (N,), bool
    sink : int
    agents : dict of int to Agent
        The alive slots' agents.
    born : dict of str to int
        The round after which each agent id ever seen was born (-1: the template).
    tools : list of str
        The tools every agent gets (its task kind's; none without ``tools``).
    """

    def __init__(
        self, capacity: int, kind: str, template: str = "centralized", *, tools: bool = True
    ) -> None:
        if not 5 <= capacity <= 64:
            raise InvalidArgumentError(f"capacity must be in [5, 64]; got {capacity}", "capacity")
        templates = _roles_file()["templates"]
        if template not in templates:
            raise InvalidArgumentError(
                f"template must be one of {tuple(templates)}; got {template!r}", "template"
            )
        data = templates[template]
        tool = kind_tool(kind) if tools else None
        self.tools = [tool.name] if tool is not None else []
        self.kind = kind
        self.capacity = capacity
        self.adj = np.zeros((capacity, capacity), bool)
        self.alive = np.zeros(capacity, bool)
        self.roles = np.full(capacity, -1, np.int32)
        self.generation = np.zeros(capacity, np.int32)
        self.protected = np.zeros(capacity, bool)
        self.table = RoleTable()
        self.agents: dict[int, Agent] = {}
        self.born: dict[str, int] = {}
        self._counts: dict[str, int] = {}
        for slot, role in enumerate(data["agents"]):
            goal, constraint = role_goal(role, kind)
            over = data["roles"].get(role, {})
            goal = str(over.get(kind, {}).get("goal", over.get("goal", goal)))
            constraint = str(over.get(kind, {}).get("constraint", over.get("constraint", constraint)))
            self.place(slot, role, goal, constraint, born=-1)
        slot_of = {self.agents[s].id: s for s in self.agents}
        for src, dst in data["edges"]:
            self.adj[slot_of[src], slot_of[dst]] = True
        self.sink = slot_of[data["sink"]]
        self.protected[self.sink] = True

    # ------------------------------------------------------------------------------------------ identity

    def new_id(self, role: str) -> str:
        """The next id of ``role``: ``role`` itself first, then ``role#2``, ``role#3``, ..."""
        n = self._counts.get(role, 0) + 1
        self._counts[role] = n
        return role if n == 1 else f"{role}#{n}"

    def place(
        self,
        slot: int,
        role: str,
        goal: str,
        constraint: str,
        *,
        born: int,
        parent: str | None = None,
    ) -> Agent:
        """Puts a new agent of ``role`` in ``slot`` (the arrays' alive / roles entries included)."""
        key = role_key(role) or "agent"
        agent = Agent(
            self.new_id(key), key, goal, constraint, parent=parent, born=born, tools=list(self.tools)
        )
        self.agents[slot] = agent
        self.alive[slot] = True
        self.roles[slot] = self.table.id_of(key, add=True)
        self.born[agent.id] = born
        return agent

    def slot_of(self, agent_id: str) -> int | None:
        """The slot of an alive agent id (None when no alive agent has it)."""
        for slot, a in self.agents.items():
            if a.id == agent_id:
                return slot
        return None

    def ids(self) -> list[str]:
        """The alive agents' ids in slot order."""
        return [self.agents[s].id for s in self.slots()]

    def slots(self) -> list[int]:
        """The alive slots, ascending."""
        return [int(s) for s in np.flatnonzero(self.alive)]

    def name(self, slot: int) -> str:
        return self.agents[slot].id

    @property
    def sink_agent(self) -> Agent:
        return self.agents[self.sink]

    def critical(self) -> np.ndarray:
        """``(R,)`` bool over role ids: the sink's role is critical (its last agent is never removed)."""
        out = np.zeros(max(1, len(self.table.names)), bool)
        out[self.roles[self.sink]] = True
        return out

    def in_neighbours(self, slot: int) -> list[int]:
        return [int(u) for u in np.flatnonzero(self.adj[:, slot] & self.alive)]

    def edges(self) -> list[tuple[int, int]]:
        """The alive edges as (src, dst) slots, row-major."""
        src, dst = np.nonzero(self.adj & self.alive[:, None] & self.alive[None, :])
        return [(int(s), int(d)) for s, d in zip(src, dst)]

    # ------------------------------------------------------------------------------------------ capability

    def remember(self, slot: int, note: str, limit: int) -> None:
        """Appends ``note`` to the agent's memory, keeping the last ``limit`` entries."""
        _keep_last(self.agents[slot].memory, note, limit)

    def add_prompt_delta(self, slot: int, delta: str, limit: int) -> None:
        """Appends ``delta`` to the agent's prompt deltas, keeping the last ``limit`` ones."""
        _keep_last(self.agents[slot].prompt_deltas, delta, limit)

    def score_history(self, rounds: int) -> tuple[np.ndarray, np.ndarray]:
        """``(history (T, N) float32, present (T, N) bool)`` over rounds 0..rounds-1 for the current slots'
        agents (a slot's history is its current agent's: a newborn has none before its birth)."""
        n = self.capacity
        hist = np.zeros((rounds, n), np.float32)
        present = np.zeros((rounds, n), bool)
        for slot, a in self.agents.items():
            for t, c in a.scores.items():
                if 0 <= t < rounds:
                    hist[t, slot] = c
                    present[t, slot] = True
        return hist, present

    # ------------------------------------------------------------------------------------------ snapshots

    def snapshot(self) -> dict[str, Any]:
        """The team's arrays (copies) and its agents' ids by slot, to diff a slow step against."""
        return {
            "adj": self.adj.copy(),
            "alive": self.alive.copy(),
            "generation": self.generation.copy(),
            "ids": {s: a.id for s, a in self.agents.items()},
        }

    def team_json(self) -> list[dict[str, Any]]:
        """The ``team`` block of a round record: one entry per alive agent, in slot order."""
        return [
            {
                "id": a.id,
                "slot": s,
                "gen": int(self.generation[s]),
                "role": a.role,
                "goal": a.goal,
                "sink": s == self.sink,
                "parent": a.parent,
                "born": a.born,
                "tools": list(a.tools),
            }
            for s in self.slots()
            for a in (self.agents[s],)
        ]

    def graph_json(self, pi: dict[str, float] | None = None) -> dict[str, Any]:
        """The graph JSON the meta-LLM reads: agents (id, role, goal, recent scores, π), edges and the sink."""
        pi = pi or {}
        return {
            "sink": self.sink_agent.id,
            "agents": [
                {
                    "id": a.id,
                    "role": a.role,
                    "goal": a.goal,
                    "scores": [round(a.scores[t], 3) for t in sorted(a.scores)][-3:],
                    "pi": round(pi.get(a.id, 0.0), 3),
                }
                for a in (self.agents[s] for s in self.slots())
            ],
            "edges": [[self.name(s), self.name(d)] for s, d in self.edges()],
        }


def _keep_last(entries: list[str], text: str, limit: int) -> None:
    """Appends ``text`` (stripped; a blank one is dropped) to ``entries``, then keeps the last ``limit``."""
    text = text.strip()
    if not text or limit <= 0:
        return
    entries.append(text)
    del entries[: max(0, len(entries) - limit)]
