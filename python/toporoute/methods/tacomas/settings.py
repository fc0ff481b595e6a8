"""TacoMAS's settings (spec §3/§4 with the resolutions of §8) and the sampling of each kind of call."""

from __future__ import annotations

from dataclasses import dataclass

from ..._checks import above, at_least, within
from ...errors import InvalidArgumentError
from ...llm.routed import parse_engine_spec
from ...llm.types import Sampling
from ..episode import SandboxSettings, request_seed
from ..options import option, setting

__all__ = ["CALL_KINDS", "FINALS", "META_KINDS", "SCORERS", "TEMPLATES", "TacoMASSettings"]

SCORERS = ("verifier", "tests", "oracle")
"""The answer scorers of s_t (spec A1): a reference-free LLM verifier (default), the prompt's visible examples
run in the sandbox (code), or the task's own scorer with its hidden tests / gold answer (an oracle)."""

FINALS = ("last", "best")
"""The final answer: the sink's answer of the last round (default), or that of the round with the highest answer
score (the oracle's only when the scorer is the oracle)."""

TEMPLATES = ("centralized", "pipeline")
"""The starting teams (``prompts/tacomas/roles.json``): the paper's 5-role centralized template, a leader (the
planner, the protected sink) exchanging messages with four workers (default), or the earlier pipeline whose
reflector sink reads only the verifier."""

META_KINDS = ("judge", "coach", "meta", "verifier")
"""The call kinds that go to the meta engine when ``meta_model`` names one (the paper's stronger meta-LLM judges,
coaches and edits; the agents, their tool follow-ups and their self-reflections stay on the agents' engine)."""

CALL_KINDS: dict[str, tuple[float | None, int, int]] = {
    # kind: (temperature, most completion tokens, least completion tokens); None: the agents'
    # temperature for the agents and their self-reflections, the meta temperature for the coach and the meta-LLM
    "agent": (None, 1024, 1),
    "reflect": (None, 160, 1),
    "judge": (0.0, 240, 240),
    "verifier": (0.0, 240, 240),
    "coach": (None, 512, 512),
    "meta": (None, 1024, 1024),
}
"""Sampling per call kind. The agents use ``temperature`` (0.0, as the published configuration), the meta-LLM
``meta_temperature`` (0.3). A self-reflection (``reflect``, the paper's Listing 5: two or three sentences) gets at
most 160 tokens. The agents' replies are capped at ``max_tokens``; a JSON call (judge, verifier,
coach, meta) always gets the tokens of the longest reply its schema or regex admits at one token per character
(:mod:`~toporoute.methods.tacomas.parsing`'s string bounds), so that its object can close whatever
``--max-tokens`` says: a guided reply that runs to the cap is no JSON at all and costs the call's re-prompts
(the embedded model writes one-token characters such as ``1.1.1.`` up to a string's bound)."""


@dataclass(frozen=True)
class TacoMASSettings(SandboxSettings):
    """Settings of TacoMAS (``toporoute run tacomas``).

    Parameters
    ----------
    rounds : int
        R, the most rounds per task (10; ``--rounds``).
    k : int
        K, the slow (topology) step's cadence: after round t when ``(t + 1) % K == 0`` and s_t < τ (2).
    tau : float
        τ: the run stops once the answer score s_t >= τ (1.0: full marks of the answer scorer; spec A8).
    coach_every : int
        The coach runs after every ``coach_every``-th round (1: every round, the paper); 0: only in the rounds
        that end with a slow step (spec A9's cheap mode).
    budget_edges : int
        B_E, explicit edge edits per slow step (4; inherited and repair edges do not count, spec A4).
    budget_pairs : int
        B_V, birth/death pairs per slow step (2).
    max_pure_births, max_pure_deaths : int
        Pure births (``v_dead: null``) and pure deaths (``v_new: null``) per slow step (1 each, spec A5).
    max_agents, min_agents : int
        N_max and N_min of the team (20 and 2).
    scorer : {"verifier", "tests", "oracle"}
        The answer scorer of s_t (spec A1): see :data:`SCORERS`. ``tests`` falls back to the verifier for a task
        without visible examples (recorded per round); ``oracle`` is recorded in the run and labelled.
    final : {"last", "best"}
        See :data:`FINALS`.
    max_meta_ops : int
        The most operations (birth/death pairs plus edge edits) read from one meta output; the rest are recorded
        as ``over_row_limit``.
    memory_items : int
        The most memory entries (coach plans, memory seeds) an agent keeps (the oldest go first).
    prompt_deltas : int
        The most prompt deltas an agent keeps.
    message_chars : int
        Characters of one incoming message (6000: an agent's whole reply at the default cap, so a program is
        never cut in transit; the published runtime's 1200 cut HumanEval programs).
    template : {"centralized", "pipeline"}
        The starting team (:data:`TEMPLATES`).
    tool_calls : int
        The most tool calls per agent per round (1; the published runtime allows 6; 0: no tools). A code agent's
        tool runs the prompt's visible examples on the last ``python`` block of its reply, a math agent's is a
        calculator on the arithmetic of its reply, both in the sandbox (``tasks.tools.run_tool``); after each call
        the agent sees the result and gives its message again (a ReAct step). Choice tasks have no tool.
    reflect : bool
        The fast self-reflection after each round (the paper's Listing 5): each agent names one capability update
        from its output and judged score, kept in its memory (True; ``--no-reflect``).
    meta_model : str
        An engine for the judge, the coach, the meta-LLM and the verifier (:data:`META_KINDS`) besides the
        agents' (the paper's stronger meta model): ``[ENGINE:]MODEL[@BASE_URL]`` as ``--engine``, ``--model`` and
        ``--base-url`` take them (``openai:gpt-4o@https://api.openai.com/v1``, ``vllm:/models/qwen``, a bare
        model on the run's engine); "" (default): the agents' engine serves every call.
    eta, window, death_threshold : float, int, float
        The replicator weights' η (1.0), the trend window (3 rounds) and the death hint (< 0.2) of
        ``ops.team_scores``.
    meta_temperature : float
        The meta-LLM's temperature (0.3); the coach uses it too.
    guided : bool
        Send the judge's and the verifier's regular expression besides their JSON schema (for engines that
        constrain regexes but not schemas).
    test_timeout_s, test_memory_mb : limits of the ``tests`` and ``oracle`` scorers' sandboxed runs (see
        :class:`~toporoute.methods.episode.SandboxSettings`).
    temperature : float
        The agents' temperature (0.0).
    max_tokens : int
        Cap on the agents' completion tokens and on the other kinds' (see :data:`CALL_KINDS`).
    """

    rounds: int = setting(10, ints=(1, 10_000))
    k: int = option(2, ints=(1, 10_000), help="K, a slow (topology) step after every K-th round (default 2)")
    tau: float = option(
        1.0,
        shared=True,
        help="tacomas: τ, stop once the answer score s_t reaches it (default 1.0, full marks)",
    )
    coach_every: int = option(
        1,
        ints=(0, 10_000),
        help="coach after every N-th round (default 1; 0: only in the rounds that end with a slow step)",
    )
    budget_edges: int = option(4, ints=(0, 64), help="B_E, edge edits per slow step (default 4)")
    budget_pairs: int = option(2, ints=(0, 32), help="B_V, birth/death pairs per slow step (default 2)")
    max_pure_births: int = setting(1, ints=(0, 32))
    max_pure_deaths: int = setting(1, ints=(0, 32))
    max_agents: int = option(
        20, ints=(5, 62), shared=True, help="tacomas: N_max, the most agents of the team (default 20)"
    )
    min_agents: int = setting(2, ints=(1, 62))
    scorer: str = option(
        "verifier",
        choices=SCORERS,
        help="answer score s_t: a reference-free LLM verifier (default), the prompt's visible examples in the "
        "sandbox (code; else the verifier), or the hidden tests / gold answer (an oracle, labelled)",
    )
    final: str = option(
        "last",
        choices=FINALS,
        help="answer: the sink's of the last round (default) or of the round with the best answer score",
    )
    max_meta_ops: int = setting(32, ints=(1, 1024))
    memory_items: int = setting(6, ints=(0, 1000))
    prompt_deltas: int = setting(3, ints=(0, 1000))
    message_chars: int = setting(6000, ints=(50, 1_000_000))
    template: str = option(
        "centralized",
        choices=TEMPLATES,
        help="the starting team: the paper's centralized leader and four workers (default) or the pipeline "
        "whose reflector reads only the verifier",
    )
    tool_calls: int = option(
        1,
        ints=(0, 6),
        help="tool calls per agent per round, each followed by the agent's revised message (default 1; 0: no "
        "tools): visible examples for code, a calculator for math, in the sandbox",
    )
    reflect: bool = option(
        True,
        name="--no-reflect",
        off=True,
        help="skip the agents' fast self-reflection after each round (the paper's Listing 5)",
    )
    meta_model: str = option(
        "",
        metavar="SPEC",
        help="a second engine for the judge, coach, meta-LLM and verifier: [ENGINE:]MODEL[@BASE_URL] "
        "(default: the agents' engine); recorded in run.json",
    )
    eta: float = 1.0
    window: int = setting(3, ints=(2, 1000))
    death_threshold: float = 0.2
    meta_temperature: float = 0.3
    guided: bool = True
    temperature: float = 0.0
    max_tokens: int = 4096

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.min_agents > self.max_agents:
            raise InvalidArgumentError(
                f"min_agents must be <= max_agents ({self.max_agents}); got {self.min_agents}", "min_agents"
            )
        if self.max_agents + self.budget_pairs > 64:
            raise InvalidArgumentError(
                "max_agents + budget_pairs must be <= 64 (the node capacity of the team ops: a replacement "
                f"needs a fresh slot); got {self.max_agents} + {self.budget_pairs}",
                "max_agents",
            )
        within("tau", self.tau, 0, 1)
        within("death_threshold", self.death_threshold, 0, 1)
        above("eta", self.eta, 0)
        at_least("meta_temperature", self.meta_temperature, 0)
        if self.meta_model:
            parse_engine_spec(self.meta_model)

    @property
    def capacity(self) -> int:
        """Node slots of the team arrays: N_max plus a fresh slot per replacement of one slow step."""
        return self.max_agents + self.budget_pairs

    def call(self, kind: str, episode: str, round: int, who: str) -> Sampling:
        """The sampling of one call of ``kind`` (see :data:`CALL_KINDS`), seeded by (seed, episode, round,
        kind, caller)."""
        if kind not in CALL_KINDS:
            raise InvalidArgumentError(f"call kind must be one of {tuple(CALL_KINDS)}; got {kind!r}", "kind")
        temperature, most, least = CALL_KINDS[kind]
        if temperature is None:
            temperature = self.temperature if kind in ("agent", "reflect") else self.meta_temperature
        return Sampling(
            max_tokens=min(most, max(self.max_tokens, least)),
            temperature=temperature,
            top_p=self.top_p,
            seed=request_seed(self.seed, episode, round, kind, who),
        )
