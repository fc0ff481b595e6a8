"""The settings of DyTopo's worker/manager loop and of its multi-round baselines (:class:`LoopConfig`), with
the command-line flags its fields declare."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..._checks import at_least, int_at_least, one_of, within
from ...errors import InvalidArgumentError
from ..episode import SamplingSettings
from ..options import option
from .graphs import FIXED_TOPOLOGIES
from .team import agent_names

__all__ = ["TAU_PRESETS", "TOPOLOGIES", "LoopConfig", "role_max_tokens"]

TOPOLOGIES = ("semantic", "random", *FIXED_TOPOLOGIES, "none")
TAU_PRESETS = {"code": 0.3, "math": 0.4}


def role_max_tokens(items: Sequence[str]) -> dict[str, int]:
    """``--role-max-tokens ROLE=N`` items as a mapping, with errors naming the bad item."""
    known = agent_names()
    out: dict[str, int] = {}
    for item in items:
        role, sep, value = item.partition("=")
        role = role.strip()
        if not sep or not role:
            raise InvalidArgumentError(
                f"--role-max-tokens takes ROLE=N (e.g. Solver=5000); got {item!r}", "role_max_tokens"
            )
        if role not in known:
            raise InvalidArgumentError(
                f"--role-max-tokens {item!r}: unknown role {role!r}; the roles: {', '.join(known)}",
                "role_max_tokens",
            )
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            raise InvalidArgumentError(
                f"--role-max-tokens {item!r}: N must be an integer >= 1; got {value!r}", "role_max_tokens"
            )
        if role in out:
            raise InvalidArgumentError(
                f"--role-max-tokens names {role!r} twice ({out[role]} and {n})", "role_max_tokens"
            )
        out[role] = n
    return out


@dataclass(frozen=True)
class LoopConfig(SamplingSettings):
    """Settings of the worker/manager loop (DyTopo's defaults; the baselines change ``topology`` and rounds).

    Parameters
    ----------
    temperature, top_p, max_tokens, seed : see :class:`~toporoute.methods.episode.SamplingSettings` (the
        paper: 0.3, 1.0, 3000-5000 tokens); ``seed`` also roots the random baseline's graphs.
    topology : {"semantic", "random", "chain", "star", "full", "none"}
        ``semantic`` is DyTopo's descriptor routing; ``none`` routes nothing (independent agents).
    tau : float, optional
        Edge threshold; None takes the domain preset (code 0.3, math 0.4).
    k_in : int
        Most providers per recipient (0: no cap). Also caps the random baseline.
    max_rounds : int
        T_max.
    halting : bool
        Stop when the manager says ``is_complete``; False runs exactly ``max_rounds`` rounds.
    manager : bool
        Call the manager after every round (False: no manager; the goal stays the initial one).
    inbox_order : {"relevance", "sigma"}
        Delivery order of a recipient's routed messages.
    private_routing : {"full", "addressed"}
        Send the whole private dict to every out-neighbour, or only the entries addressed to it.
    random_edges : int
        Edges per round of the random baseline when no DyTopo edge counts are given.
    manager_sink : bool
        Match the manager as a sink-only node (spec 8.6; semantic topology only): its latest need descriptor
        (before its first decision, the team file's) is matched against the workers' offers with the same
        ``tau`` and ``k_in``, it offers nothing, and the private messages routed to it go into its prompt. The
        round graph then has the manager as its last node. Off: the manager is not matched, its descriptors
        are only logged.
    skip_last_manager : bool
        Do not call the manager in the last round (t = T_max - 1, spec 8.14): its decision could only halt an
        episode that ends anyway. That round's record has no manager decision.
    role_prefix : bool
        Embed each descriptor as ``"<role title>: <descriptor>"`` (spec 8.18); off: the raw descriptor. The
        trace keeps the raw descriptors either way; empty descriptors stay empty (no edges).
    manager_goal_history : bool
        Show the manager the goals of the earlier rounds, oldest first, besides the current one (spec 8.10).
    role_max_tokens : mapping of str to int
        Completion-token limit of named agents (e.g. ``{"Solver": 5000}``; the spec's proposal for the math
        Solver), overriding ``max_tokens`` for them; keys are agent names of any domain's team (an agent of
        another domain's team is unaffected).
    """

    topology: str = "semantic"
    tau: float | None = option(
        None, shared=True, type=float, help="dytopo: edge threshold (default: code 0.3, math 0.4)"
    )
    k_in: int = option(3, help="most providers per recipient (0: no cap; default 3)")
    max_rounds: int = 10
    halting: bool = True
    manager: bool = True
    inbox_order: str = option(
        "relevance",
        choices=("relevance", "sigma"),
        help="delivery order of a recipient's routed messages (default relevance)",
    )
    private_routing: str = option(
        "full",
        choices=("full", "addressed"),
        help="send every private entry to each out-neighbour, or only those addressed to it (default full)",
    )
    initial_goal: str = "Define the initial approach and produce a first complete solution."
    random_edges: int = 3
    manager_sink: bool = option(
        False,
        help="dytopo: match the manager as a sink-only node by its need descriptor; the private messages "
        "routed to it go into its prompt (the baselines match nothing and keep it out)",
    )
    skip_last_manager: bool = option(False, help="no manager call in the last round")
    role_prefix: bool = option(
        False,
        help="dytopo: embed each descriptor as '<role title>: <descriptor>' (default: the raw descriptor)",
    )
    manager_goal_history: bool = option(
        False, help="show the manager the goals of the earlier rounds besides the current one"
    )
    role_max_tokens: dict[str, int] = option(
        factory=dict,
        repeat=True,
        convert=role_max_tokens,
        metavar="ROLE=N",
        help="completion tokens of one agent instead of --max-tokens, e.g. Solver=5000 (the spec's math "
        "Solver); repeat it for more roles",
    )

    def __post_init__(self) -> None:
        super().__post_init__()
        self._check_role_max_tokens()
        one_of("topology", self.topology, TOPOLOGIES)
        if self.tau is not None:
            within("tau", self.tau, -1, 1)
        at_least("k_in", self.k_in, 0)
        at_least("max_rounds", self.max_rounds, 1)
        at_least("random_edges", self.random_edges, 0)
        if self.manager_sink and (self.topology != "semantic" or not self.manager):
            raise InvalidArgumentError(
                "manager_sink matches the manager's descriptors, so it needs topology 'semantic' and the manager "
                f"on; got topology={self.topology!r}, manager={self.manager}",
                "manager_sink",
            )

    def _check_role_max_tokens(self) -> None:
        if not isinstance(self.role_max_tokens, Mapping):
            raise InvalidArgumentError(
                "role_max_tokens must map agent names to token counts; "
                f"got {type(self.role_max_tokens).__name__}",
                "role_max_tokens",
            )
        known = agent_names()
        unknown = sorted(str(r) for r in self.role_max_tokens if r not in known)
        if unknown:
            raise InvalidArgumentError(
                f"role_max_tokens names unknown role(s) {unknown}; the roles: {list(known)}",
                "role_max_tokens",
            )
        for role, n in self.role_max_tokens.items():
            int_at_least(f"role_max_tokens[{role!r}]", n, 1, field="role_max_tokens")
        # a copy in name order: the recorded params do not depend on the caller's order or later changes
        object.__setattr__(self, "role_max_tokens", dict(sorted(self.role_max_tokens.items())))

    def tau_for(self, domain: str) -> float:
        return TAU_PRESETS[domain] if self.tau is None else self.tau
