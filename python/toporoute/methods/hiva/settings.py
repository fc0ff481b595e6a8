"""HiVA's settings (spec §4, with the resolutions of §8) and the sampling of each kind of call."""

from __future__ import annotations

from dataclasses import dataclass

from ..._checks import above, at_least, within
from ...errors import InvalidArgumentError
from ...llm.types import Sampling
from ..episode import SandboxSettings, request_seed
from ..options import option, setting

__all__ = ["CALL_KINDS", "ENVIRONMENTS", "MODES", "HiVASettings"]

MODES = ("per_instance", "stream")
ENVIRONMENTS = ("auto", "self-critique")

CALL_KINDS: dict[str, tuple[float | None, int]] = {
    # kind: (temperature, most completion tokens); None: the settings' temperature (the agents')
    "agent": (None, 1000),
    "instruction": (1.0, 1000),
    "aggregator": (0.3, 1500),
    "loss": (0.3, 800),
    "global_gradient": (0.3, 800),
    "gradient": (0.3, 800),
    "prompt_update": (0.3, 800),
    "parallel": (0.2, 300),
    "decision": (0.3, 400),
    "new_agent": (0.5, 400),
    "tool_synthesis": (0.3, 1000),
    "tool_refine": (0.2, 1200),
    "sentiment": (0.0, 8),
    "critique": (0.3, 400),
}
"""Sampling per call kind (spec §4: the paper's instruction 1.0/1000 and tool 0.3/1000, the code's other
values; the sentiment and the self-critique are this implementation's)."""


@dataclass(frozen=True)
class HiVASettings(SandboxSettings):
    """Settings of HiVA (``toporoute run hiva``).

    Parameters
    ----------
    iterations : int
        T, the STEV iterations per task (the paper's default 10).
    top_k : int
        Successors the bandit picks at each executed node (1 to 5; default 2).
    initial_workers : int
        The initial fan-out: worker agents (0 to 4; default 2) wired from the source to the aggregator beside
        the source's own edge to it, so that the source's routing has ``initial_workers + 1`` candidates and,
        with the default top-k 2, the bandit chooses from the first iteration on. 0 is Algorithm 1's start
        (``v_s → v_a`` only), where every node routes to all its successors until edits add a third one.
    mode : {"per_instance", "stream"}
        ``per_instance``: a fresh graph per task, T iterations, the best answer returned. ``stream``: the graph,
        the Beta beliefs, the synergy, the prompts and the tools carry over from task to task (episodes then run
        one at a time, in the order they start).
    max_agents : int
        Node capacity N of the graph (2 to 256; default 32).
    max_out : int
        Most successors per agent (5).
    early_stop : bool
        per_instance: stop once the environment's own signal says the answer succeeds (visible examples
        passed; the self-critique's PASS for math).
    oracle_feedback : bool
        Feed back the task's hidden tests (code) or the gold answer (math) instead of the visible examples /
        the self-critique: an oracle, recorded in the run's params and labelled in the report. The best answer
        is still chosen by the non-oracle signal.
    bandit_mode : {"thompson", "mean"}
        θ drawn from Beta(α, β), or its mean (deterministic).
    similarity : {"embedding", "lexical"}
        The task/agent similarity behind the distance Ψ1 and the Beta update's KM (spec §3.1 no-KG fallback):
        ``embedding`` (default) the cosine of the task's and the agent prompt's embeddings (the descriptor
        encoder, all-MiniLM-L6-v2), ``lexical`` the cosine of their word sets (no encoder). Ψ1's concept
        Jaccard is over words either way (no knowledge graph of concepts).
    lam, eta, delta : float
        λ (knowledge distance), η (synergy exponent) and δ (knowledge term of the Beta update).
    omega : tuple of 4 floats
        ω_1..ω_4 of the distance, renormalised over the indicators that exist
        (:func:`~toporoute.methods.hiva.graph.distance_weights`): without a knowledge graph Ψ1 alone, so Σ ω Ψ
        spans [0, 1] (Ψ2 and Ψ4 need the graph; Ψ3's fallback would count θ's success history twice).
    distance_threshold : float
        Candidates with Σ ω Ψ above it are dropped (the best one always kept).
    gamma : float
        Decay of the Beta beliefs towards the prior per iteration without an update (0.6).
    synergy_lr : float
        γ', the synergy learning rate (0.1).
    c0 : float
        Initial synergy of every pair.
    prune_threshold, min_obs : float, int
        Repair drops an edge whose success mean is under ``prune_threshold`` after ``min_obs`` observations.
    w_prompt, w_tool : float
        Feedback weights: with both prompt and tool feedback the prompt is updated and the tool with probability
        ``w_tool / w_prompt`` (seeded), unless ``apply_both``.
    apply_both : bool
    parallel_threshold : float
        An ADD_PARALLEL whose parallelisability score is under it becomes ADD_SERIAL (0.5).
    synthesize_tools : bool
        New agents get a tool written by the LLM (Fig. 12) from their description (else the built-in tool).
    topology : bool
        Topological evolution (TEV): the parallelisability analyses, the topology decisions, their edits and the
        repair. False is the paper's "w/o TEV" ablation: the graph stays as it starts.
    semantic : bool
        Semantic evolution (SEV): the prompt updates (Fig. 9) and tool refinements (Fig. 13). False is the
        paper's "w/o SEV": the agents keep their prompts and tools (new agents still get theirs).
    broadcast : bool
        Route every executed node to all its successors, with no bandit (the paper's "w/o KABB").
    tools : bool
        Agents and the aggregator run their tools, and new agents get one. False is the paper's "w/o Tool": no
        tool runs, is refined or is written.
    environment : {"auto", "self-critique"}
        What judges an answer: ``auto`` the visible examples for code and the self-critique for math (there is
        no programmatic environment for math without the gold answer, so math's default *is* the paper's "w/o
        Env"); ``self-critique`` the self-critique for code too (the paper's "w/o Env").
    guided : bool
        Constrain the short structured outputs (decision, sentiment, gradient, parallelisability, verdict) with
        regular expressions where the engine supports it (``--no-guide-regex``: free-form outputs, the paper's).
    tool_timeout_s, tool_retries, tool_memory_mb : limits of one sandboxed tool call (30 s, 3 retries).
    tool_workers : int
        Most tool or test processes at once.
    test_timeout_s, test_memory_mb : limits of the environment's sandboxed test runs (see
        :class:`~toporoute.methods.episode.SandboxSettings`).
    temperature : float
        The agents' temperature (forward pass; 1.0, the paper's); the other calls use :data:`CALL_KINDS`.
    max_tokens : int
        Cap on every call's completion tokens (each kind has its own limit under it).
    """

    iterations: int = option(
        10,
        ints=(1, 10_000),
        unset=True,
        help="T, STEV iterations per task (default 10; wins over --rounds, which sets T when this is not given)",
    )
    top_k: int = option(2, ints=(1, 5), help="successors the bandit picks per agent (default 2)")
    initial_workers: int = option(
        2,
        ints=(0, 4),
        help="worker agents wired from the source to the aggregator at the start, so the bandit chooses from "
        "the first iteration (default 2; 0: the source wired to the aggregator only, Algorithm 1)",
    )
    mode: str = option(
        "per_instance",
        choices=MODES,
        help="a fresh graph per task (default), or one graph carried over the tasks in order",
    )
    max_agents: int = option(
        32, ints=(2, 256), shared=True, help="hiva: node capacity of the graph (default 32)"
    )
    max_out: int = option(5, ints=(1, 255), help="most successors per agent, in edits and repair (default 5)")
    early_stop: bool = option(False, help="stop a task once its visible examples pass")
    oracle_feedback: bool = option(
        False,
        help="feed back the hidden tests (code) or the gold answer (math): an oracle, recorded and labelled "
        "(default: the prompt's visible examples; the self-critique for math)",
    )
    bandit_mode: str = option(
        "thompson",
        choices=("thompson", "mean"),
        help="θ drawn from the Beta beliefs or their mean (default thompson)",
    )
    similarity: str = option(
        "embedding",
        choices=("embedding", "lexical"),
        help="task/agent similarity of the routing distance and the Beta update: the cosine of their "
        "embeddings (default; the descriptor encoder) or of their word sets",
    )
    lam: float = 1.0
    eta: float = 1.0
    delta: float = 0.5
    omega: tuple[float, float, float, float] = (0.25, 0.25, 0.25, 0.25)
    distance_threshold: float = 0.75
    gamma: float = 0.6
    synergy_lr: float = 0.1
    c0: float = 1.0
    prune_threshold: float = 0.3
    min_obs: int = setting(3, ints=(0, 10**9))
    w_prompt: float = 0.7
    w_tool: float = 0.3
    apply_both: bool = False
    parallel_threshold: float = 0.5
    synthesize_tools: bool = option(
        True,
        name="--no-tool-synthesis",
        off=True,
        help="new agents get the built-in tool, not an LLM-written one",
    )
    topology: bool = option(
        True, name="--no-topology", off=True, help="w/o TEV: no topology decisions, edits or repair"
    )
    semantic: bool = option(
        True, name="--no-semantic", off=True, help="w/o SEV: no prompt updates or tool refinements"
    )
    broadcast: bool = option(False, help="w/o KABB: route to every successor, no bandit")
    tools: bool = option(
        True, name="--no-tools", off=True, help="w/o Tool: no tool runs, refinements or new tools"
    )
    environment: str = option(
        "auto",
        choices=ENVIRONMENTS,
        help="what judges an answer: auto (default: code's visible examples, math's self-critique) or "
        "self-critique (the paper's w/o Env, for code too)",
    )
    guided: bool = option(
        True,
        name="--no-guide-regex",
        off=True,
        help="no regular-expression guides (guided decoding) for the short outputs: free-form, as the paper",
    )
    tool_timeout_s: float = option(
        30.0, name="--tool-timeout", help="seconds per sandboxed tool call (default 30)"
    )
    tool_retries: int = setting(3, ints=(0, 10))
    tool_memory_mb: int = setting(512, ints=(64, 1 << 20))
    tool_workers: int = setting(2, ints=(1, 64))
    temperature: float = 1.0
    max_tokens: int = 4096

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "omega", tuple(float(w) for w in self.omega))
        if len(self.omega) != 4 or any(not w >= 0 for w in self.omega):
            raise InvalidArgumentError(f"omega must be 4 weights >= 0; got {self.omega!r}", "omega")
        for name in ("lam", "eta", "delta", "synergy_lr", "w_tool", "distance_threshold"):
            at_least(name, getattr(self, name), 0)
        for name in ("c0", "w_prompt", "tool_timeout_s"):
            above(name, getattr(self, name), 0)
        for name in ("gamma", "prune_threshold", "parallel_threshold"):
            within(name, getattr(self, name), 0, 1)

    def params(self) -> dict[str, object]:
        d = super().params()
        d["omega"] = list(self.omega)
        return d

    def ablations(self, domain: str) -> list[str]:
        """The paper's Table 2 labels of what this run leaves out on ``domain`` ([]: the full method)."""
        return [
            label
            for on, label in (
                (not self.topology, "w/o TEV"),
                (not self.semantic, "w/o SEV"),
                (self.broadcast, "w/o KABB"),
                (self.environment_of(domain) == "self-critique", "w/o Env"),
                (not self.tools, "w/o Tool"),
            )
            if on
        ]

    def environment_of(self, domain: str) -> str:
        """The environment of ``domain``: ``public-tests`` (code under ``auto``) or ``self-critique``."""
        return "public-tests" if domain == "code" and self.environment == "auto" else "self-critique"

    def call(self, kind: str, episode: str, iteration: int, who: str) -> Sampling:
        """The sampling of one call of ``kind`` (see :data:`CALL_KINDS`), capped at ``max_tokens`` and seeded
        by (seed, episode, iteration, kind and caller)."""
        if kind not in CALL_KINDS:
            raise InvalidArgumentError(f"call kind must be one of {tuple(CALL_KINDS)}; got {kind!r}", "kind")
        temperature, most = CALL_KINDS[kind]
        return Sampling(
            max_tokens=min(most, self.max_tokens),
            temperature=self.temperature if temperature is None else temperature,
            top_p=self.top_p,
            seed=request_seed(self.seed, episode, iteration, kind, who),
        )
