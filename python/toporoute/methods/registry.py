"""The methods ``toporoute run`` knows, each with its builder and its own command-line options.

A method is registered as a :class:`MethodSpec`: a name, a one-line summary, a builder that makes the method
from its settings, and an :class:`OptionGroup` (shared by methods that take the same options, as DyTopo and its
worker-loop baselines do). The CLI lists the registry, shows a method's options in their own group of
``toporoute run METHOD --help``, and turns the parsed options into settings with the group's ``read``;
:func:`make_method` is the same path from Python.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError, ToporouteError
from ..types.qmix_params import ADJ_MODES, QMixConfig
from .episode import DOMAINS, Method
from .prompting import KINDS as _PROMPTING_KINDS

if TYPE_CHECKING:
    from ..embed import Encoder

__all__ = [
    "METHODS",
    "REGISTRY",
    "MethodSpec",
    "OptionGroup",
    "QMixNetworkChoice",
    "add_qmix_loop_options",
    "add_qmix_network_options",
    "make_method",
    "read_qmix_loop_options",
    "read_qmix_network_options",
]

log = logging.getLogger("toporoute")

# the original's GNN dropout, also the default (TrainConfig.dropout; the trainer's module imports torch)
_QMIX_DROPOUT = 0.1

Builder = Callable[[dict[str, Any], "int | None", "Encoder | None"], Method]


@dataclass(frozen=True)
class OptionGroup:
    """Command-line options of one or more methods.

    ``add`` declares them on an argparse group; ``read`` turns the parsed namespace into the methods' settings
    (keyword arguments of :func:`make_method`), given the run directory.
    """

    title: str
    add: Callable[[argparse._ArgumentGroup], None]
    read: Callable[[argparse.Namespace, Path], dict[str, Any]]


@dataclass(frozen=True)
class MethodSpec:
    """A registered method.

    Attributes
    ----------
    name : str
    summary : str
        One line for ``toporoute run --help``.
    build : callable
        ``build(settings, rounds, encoder) -> Method``; ``settings`` are the method's keyword settings.
    options : OptionGroup or None
    uses_encoder : bool
        The method embeds descriptors (the CLI loads and warms the encoder once for it).
    after : tuple of str
        Methods that must run before it in one command (the random baseline reads DyTopo's edge counts).
    kinds : tuple of str
        The task kinds it solves (``toporoute run`` refuses other tasks before it starts).
    """

    name: str
    summary: str
    build: Builder
    options: OptionGroup | None = None
    uses_encoder: bool = False
    after: tuple[str, ...] = ()
    kinds: tuple[str, ...] = DOMAINS


# ------------------------------------------------------------------------------------------------ option groups


def _add_shared(g: argparse._ArgumentGroup, flag: str, help: str, **kw: Any) -> None:
    """Adds ``flag`` (default None) unless another method group of the same command already did (DyTopo's and
    TacoMAS's ``--tau``, HiVA's and TacoMAS's ``--max-agents``): then the flag's help gains this group's meaning
    and its one value goes to both methods. Each reader applies its own default for None."""
    existing = g._option_string_actions.get(flag)  # an argument group shares its parser's table
    if existing is not None:
        existing.help = f"{existing.help}; {help}"
        return
    g.add_argument(flag, default=None, help=help, **kw)


def _add_loop_options(g: argparse._ArgumentGroup) -> None:
    _add_shared(g, "--tau", "dytopo: edge threshold (default: code 0.3, math 0.4)", type=float)
    g.add_argument("--k-in", type=int, default=3, help="most providers per recipient (0: no cap; default 3)")
    g.add_argument(
        "--inbox-order",
        choices=("relevance", "sigma"),
        default="relevance",
        help="delivery order of a recipient's routed messages (default relevance)",
    )
    g.add_argument(
        "--private-routing",
        choices=("full", "addressed"),
        default="full",
        help="send every private entry to each out-neighbour, or only those addressed to it (default full)",
    )
    g.add_argument(
        "--manager-sink",
        action="store_true",
        help="dytopo: match the manager as a sink-only node by its need descriptor; the private messages "
        "routed to it go into its prompt (the baselines match nothing and keep it out)",
    )
    g.add_argument("--skip-last-manager", action="store_true", help="no manager call in the last round")
    g.add_argument(
        "--role-prefix",
        action="store_true",
        help="dytopo: embed each descriptor as '<role title>: <descriptor>' (default: the raw descriptor)",
    )
    g.add_argument(
        "--manager-goal-history",
        action="store_true",
        help="show the manager the goals of the earlier rounds besides the current one",
    )
    g.add_argument(
        "--role-max-tokens",
        action="append",
        default=[],
        metavar="ROLE=N",
        help="completion tokens of one agent instead of --max-tokens, e.g. Solver=5000 (the spec's math "
        "Solver); repeat it for more roles",
    )


def _role_max_tokens(items: list[str]) -> dict[str, int]:
    """``--role-max-tokens ROLE=N`` options as a mapping, with errors naming the bad item."""
    from .dytopo.team import agent_names

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


def _read_loop_options(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    return {
        "tau": args.tau,
        "k_in": args.k_in,
        "inbox_order": args.inbox_order,
        "private_routing": args.private_routing,
        "manager_sink": args.manager_sink,
        "skip_last_manager": args.skip_last_manager,
        "role_prefix": args.role_prefix,
        "manager_goal_history": args.manager_goal_history,
        "role_max_tokens": _role_max_tokens(args.role_max_tokens),
    }


def add_qmix_loop_options(g: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """The Q-Mix episode loop's options (``run`` and ``train``)."""
    g.add_argument(
        "--select-once",
        action="store_true",
        help="choose actions once from the first observation (the original evaluation code)",
    )
    g.add_argument(
        "--initial-adj",
        choices=("identity", "zeros"),
        default="identity",
        help="the graph round 0 reads (default identity; the original: zeros)",
    )
    g.add_argument(
        "--legacy-repo-exec",
        action="store_true",
        help="reproduce the original scheduler bug (no message is delivered)",
    )
    g.add_argument(
        "--adversary", type=int, default=None, help="index of an adversarial agent (default: none)"
    )


def read_qmix_loop_options(args: argparse.Namespace) -> dict[str, Any]:
    """:class:`~toporoute.methods.qmix.QMixSettings` fields from :func:`add_qmix_loop_options`' options."""
    return {
        "reselect_each_round": not args.select_once,
        "initial_adj": args.initial_adj,
        "legacy_repo_exec": args.legacy_repo_exec,
        "adversarial_agent_index": args.adversary,
    }


@dataclass(frozen=True)
class QMixNetworkChoice:
    """The network ``toporoute train qmix`` builds: its config and its training dropout.

    Attributes
    ----------
    config : QMixConfig
        Shapes and semantics (``obs_dim`` / ``state_dim`` are set by the trainer from the features).
    dropout : float
        GNN dropout while training (:class:`~toporoute.methods.qmix.train.TrainConfig` ``dropout``).
    """

    config: QMixConfig
    dropout: float


def add_qmix_network_options(g: argparse._ArgumentGroup | argparse.ArgumentParser) -> None:
    """The Q-Mix network's options (``train``): ``--legacy-network`` and one flag per setting it changes."""
    g.add_argument("--agents", type=int, default=3, help="team size (default 3: 2 writers + analyzer)")
    g.add_argument(
        "--legacy-network",
        action="store_true",
        help="the original repository's network: --adj-mode out_rows --no-self-loops --no-b1-hidden "
        "--dropout 0.1 (each flag given as well overrides it)",
    )
    g.add_argument(
        "--adj-mode",
        choices=ADJ_MODES,
        default=None,
        help="whose messages a node averages: in-neighbours (default), out_rows (the rows of A: the original), "
        "sym (both)",
    )
    g.add_argument(
        "--self-loops",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="a node also averages its own message (default on; the original: off)",
    )
    g.add_argument(
        "--b1-hidden",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the mixer's first bias hypernetwork (hyper_b1) has a hidden layer, as the paper says "
        "(default off, as the original code)",
    )
    g.add_argument("--dropout", type=float, default=None, help="GNN dropout while training (default 0.1)")


def read_qmix_network_options(args: argparse.Namespace) -> QMixNetworkChoice:
    """The network of :func:`add_qmix_network_options`' options: :meth:`QMixConfig.original` under
    ``--legacy-network``, else the defaults (in-neighbours with self-loops); each flag given overrides its
    field."""
    base = (
        QMixConfig.original(n_agents=args.agents) if args.legacy_network else QMixConfig(n_agents=args.agents)
    )
    changes = {
        k: v
        for k, v in (
            ("adj_mode", args.adj_mode),
            ("self_loops", args.self_loops),
            ("b1_hidden", args.b1_hidden),
        )
        if v is not None
    }
    return QMixNetworkChoice(
        replace(base, **changes), _QMIX_DROPOUT if args.dropout is None else args.dropout
    )


def _add_qmix_options(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--checkpoint", type=Path, default=None, help="the policy (required; toporoute train qmix writes it)"
    )
    add_qmix_loop_options(g)


def _read_qmix_options(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    if args.checkpoint is None:
        raise InvalidArgumentError(
            "method qmix needs --checkpoint (a policy from 'toporoute train qmix')", "checkpoint"
        )
    if not args.checkpoint.is_file():
        raise InvalidArgumentError(
            f"--checkpoint {args.checkpoint}: no such file (a policy from 'toporoute train qmix', e.g. "
            "TRAIN_DIR/policy.safetensors)",
            "checkpoint",
        )
    return {"checkpoint": args.checkpoint, **read_qmix_loop_options(args)}


def _add_conductor_options(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--level",
        choices=("easy", "medium", "hard"),
        default=None,
        help="difficulty for the density cap 4/7/10 (default: the task's label, else easy)",
    )
    g.add_argument(
        "--feedback-tests",
        choices=("public", "hidden"),
        default="public",
        help="tests behind the tester's feedback: the examples the prompt shows (default) or the real tests "
        "(an oracle); the reward always uses the real tests",
    )
    g.add_argument(
        "--no-repair-unverified",
        action="store_true",
        help="end the episode when the program loads but the prompt shows no example to test it on "
        "([NO VISIBLE TESTS]; still not passed) instead of going on to the repair turn",
    )
    g.add_argument("--no-guided", action="store_true", help="no plan grammar for the orchestrator")
    g.add_argument(
        "--grammar",
        choices=("validator", "strict"),
        default="validator",
        help="plan grammar: the validator's syntax and limits, logic left to it (default), or the narrower "
        "strict one (at most 8 steps of 4 agents, a forced tester-only last step)",
    )
    g.add_argument(
        "--density-mode", choices=("paper", "normalized"), default="paper", help="r_g form (default paper)"
    )
    g.add_argument(
        "--return-mode",
        choices=("sum", "mean", "last"),
        default="sum",
        help="trajectory return (default sum)",
    )
    g.add_argument("--strict-tester", action="store_true", help="reject testers outside the last step")
    g.add_argument("--orchestrator-max-tokens", type=int, default=768, help="tokens of a plan (default 768)")


def _read_conductor_options(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    return {
        "level": args.level,
        "feedback_tests": args.feedback_tests,
        "repair_unverified": not args.no_repair_unverified,
        "guided": not args.no_guided,
        "grammar": args.grammar,
        "density_mode": args.density_mode,
        "return_mode": args.return_mode,
        "strict_tester": args.strict_tester,
        "orchestrator_max_tokens": args.orchestrator_max_tokens,
        "test_timeout_s": args.eval_timeout,
    }


def _add_hiva_options(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--iterations",
        type=int,
        default=None,
        help="T, STEV iterations per task (default 10; wins over --rounds, which sets T when this is not given)",
    )
    g.add_argument("--top-k", type=int, default=2, help="successors the bandit picks per agent (default 2)")
    g.add_argument(
        "--mode",
        choices=("per_instance", "stream"),
        default="per_instance",
        help="a fresh graph per task (default), or one graph carried over the tasks in order",
    )
    g.add_argument(
        "--oracle-feedback",
        action="store_true",
        help="feed back the hidden tests (code) or the gold answer (math): an oracle, recorded and labelled "
        "(default: the prompt's visible examples; the self-critique for math)",
    )
    g.add_argument("--early-stop", action="store_true", help="stop a task once its visible examples pass")
    _add_shared(g, "--max-agents", "hiva: node capacity of the graph (default 32)", type=int)
    g.add_argument(
        "--bandit-mode",
        choices=("thompson", "mean"),
        default="thompson",
        help="θ drawn from the Beta beliefs or their mean (default thompson)",
    )
    g.add_argument(
        "--similarity",
        choices=("embedding", "lexical"),
        default="embedding",
        help="task/agent similarity of the routing distance and the Beta update: the cosine of their "
        "embeddings (default; the descriptor encoder) or of their word sets",
    )
    g.add_argument(
        "--tool-timeout", type=float, default=30.0, help="seconds per sandboxed tool call (default 30)"
    )
    g.add_argument(
        "--no-guide-regex", action="store_true", help="no regular-expression guides for the short outputs"
    )
    g.add_argument(
        "--no-tool-synthesis",
        action="store_true",
        help="new agents get the built-in tool, not an LLM-written one",
    )


def _read_hiva_options(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {
        "top_k": args.top_k,
        "mode": args.mode,
        "oracle_feedback": args.oracle_feedback,
        "early_stop": args.early_stop,
        "bandit_mode": args.bandit_mode,
        "similarity": args.similarity,
        "tool_timeout_s": args.tool_timeout,
        "guided": not args.no_guide_regex,
        "synthesize_tools": not args.no_tool_synthesis,
        "test_timeout_s": args.eval_timeout,
    }
    if args.iterations is not None:
        out["iterations"] = args.iterations
    if args.max_agents is not None:
        out["max_agents"] = args.max_agents
    return out


def _add_tacomas_options(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--k",
        type=int,
        default=2,
        help="K, a slow (topology) step after every K-th round (default 2)",
    )
    _add_shared(
        g,
        "--tau",
        "tacomas: τ, stop once the answer score s_t reaches it (default 1.0, full marks)",
        type=float,
    )
    g.add_argument(
        "--coach-every",
        type=int,
        default=1,
        help="coach after every N-th round (default 1; 0: only in the rounds that end with a slow step)",
    )
    g.add_argument("--budget-edges", type=int, default=4, help="B_E, edge edits per slow step (default 4)")
    g.add_argument(
        "--budget-pairs", type=int, default=2, help="B_V, birth/death pairs per slow step (default 2)"
    )
    _add_shared(g, "--max-agents", "tacomas: N_max, the most agents of the team (default 20)", type=int)
    g.add_argument(
        "--scorer",
        choices=("verifier", "tests", "oracle"),
        default="verifier",
        help="answer score s_t: a reference-free LLM verifier (default), the prompt's visible examples in the "
        "sandbox (code; else the verifier), or the hidden tests / gold answer (an oracle, labelled)",
    )
    g.add_argument(
        "--final",
        choices=("last", "best"),
        default="last",
        help="answer: the sink's of the last round (default) or of the round with the best answer score",
    )


def _read_tacomas_options(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {
        "k": args.k,
        "coach_every": args.coach_every,
        "budget_edges": args.budget_edges,
        "budget_pairs": args.budget_pairs,
        "scorer": args.scorer,
        "final": args.final,
        "test_timeout_s": args.eval_timeout,
    }
    if args.tau is not None:
        out["tau"] = args.tau
    if args.max_agents is not None:
        out["max_agents"] = args.max_agents
    return out


def _add_self_consistency_options(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--samples", type=int, default=None, help="N chain-of-thought samples per task (default 5)"
    )


def _read_self_consistency_options(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    given = {"samples": args.samples}
    return {"test_timeout_s": args.eval_timeout, **{k: v for k, v in given.items() if v is not None}}


def _add_self_refine_options(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--refine-iterations",
        type=int,
        default=None,
        help="most feedback-then-refine iterations after the first answer (default 3; else --rounds)",
    )
    g.add_argument(
        "--no-guided-verdict",
        action="store_true",
        help="do not constrain the feedback's last line to the VERDICT grammar (it is parsed either way)",
    )


def _read_self_refine_options(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    out: dict[str, Any] = {"guided_verdict": not args.no_guided_verdict}
    if args.refine_iterations is not None:
        out["iterations"] = args.refine_iterations
    return out


def _add_debate_options(g: argparse._ArgumentGroup) -> None:
    g.add_argument("--debate-agents", type=int, default=None, help="agents of the debate (default 3)")
    g.add_argument(
        "--debate-rounds",
        type=int,
        default=None,
        help="rounds, the independent first answers included (default 3; else --rounds)",
    )


def _read_debate_options(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    # not "rounds": that is make_method's own argument (--rounds); the builder maps it
    given = {"agents": args.debate_agents, "debate_rounds": args.debate_rounds}
    return {"test_timeout_s": args.eval_timeout, **{k: v for k, v in given.items() if v is not None}}


LOOP_OPTIONS = OptionGroup(
    "dytopo and its worker-loop baselines (random, chain, star, full, parallel)",
    _add_loop_options,
    _read_loop_options,
)
QMIX_OPTIONS = OptionGroup("qmix (Agent Q-Mix)", _add_qmix_options, _read_qmix_options)
CONDUCTOR_OPTIONS = OptionGroup("conductor (AgentConductor)", _add_conductor_options, _read_conductor_options)
HIVA_OPTIONS = OptionGroup("hiva (HiVA)", _add_hiva_options, _read_hiva_options)
TACOMAS_OPTIONS = OptionGroup("tacomas (TacoMAS)", _add_tacomas_options, _read_tacomas_options)

SELF_CONSISTENCY_OPTIONS = OptionGroup(
    "self-consistency", _add_self_consistency_options, _read_self_consistency_options
)
SELF_REFINE_OPTIONS = OptionGroup(
    "self-refine (Madaan et al.)", _add_self_refine_options, _read_self_refine_options
)
DEBATE_OPTIONS = OptionGroup("debate (Du et al.)", _add_debate_options, _read_debate_options)

# ------------------------------------------------------------------------------------------------ builders


def _settings(cls: type, settings: Mapping[str, Any], method: str) -> Any:
    """``cls(**settings)`` with an error naming the unknown settings (and the method)."""
    known = {f.name for f in fields(cls) if f.init}
    unknown = sorted(set(settings) - known)
    if unknown:
        raise InvalidArgumentError(
            f"method {method!r} has no setting(s) {unknown}; its settings: {sorted(known)}", unknown[0]
        )
    return cls(**settings)


def _pop(settings: dict[str, Any], key: str) -> Any:
    return settings.pop(key, None)


def _build_dytopo(settings: dict[str, Any], rounds: int | None, encoder: Encoder | None) -> Method:
    from .dytopo import DyTopo, LoopConfig

    if rounds is not None:
        settings["max_rounds"] = rounds
    return DyTopo(_settings(LoopConfig, settings, "dytopo"), encoder=encoder)


def _build_baseline(name: str) -> Builder:
    def build(settings: dict[str, Any], rounds: int | None, encoder: Encoder | None) -> Method:
        from .baselines import BASELINE_ROUNDS, baseline
        from .dytopo import LoopConfig

        edge_counts = _pop(settings, "edge_counts")
        if name in ("random", "chain", "star", "full"):  # single and parallel have one round
            settings["max_rounds"] = BASELINE_ROUNDS if rounds is None else rounds
        config = _settings(LoopConfig, settings, name)
        return baseline(name, config, edge_counts=edge_counts, encoder=encoder)

    return build


def _build_qmix(settings: dict[str, Any], rounds: int | None, encoder: Encoder | None) -> Method:
    from .qmix import QMix, QMixPolicy, QMixSettings

    checkpoint = _pop(settings, "checkpoint")
    if checkpoint is None:
        raise InvalidArgumentError(
            "method qmix needs a checkpoint (toporoute train qmix writes one)", "checkpoint"
        )
    settings["rounds"] = rounds
    return QMix(QMixPolicy.load(checkpoint, encoder=encoder), _settings(QMixSettings, settings, "qmix"))


def _build_conductor(settings: dict[str, Any], rounds: int | None, encoder: Encoder | None) -> Method:
    from .conductor import Conductor, ConductorSettings

    if rounds is not None:
        settings["max_turns"] = rounds
    return Conductor(_settings(ConductorSettings, settings, "conductor"), encoder=encoder)


def _build_hiva(settings: dict[str, Any], rounds: int | None, encoder: Encoder | None) -> Method:
    from .hiva import HiVA, HiVASettings

    if rounds is not None and "iterations" not in settings:  # --iterations wins over --rounds
        settings["iterations"] = rounds
    return HiVA(_settings(HiVASettings, settings, "hiva"), encoder=encoder)


def _build_tacomas(settings: dict[str, Any], rounds: int | None, encoder: Encoder | None) -> Method:
    from .tacomas import TacoMAS, TacoMASSettings

    if rounds is not None:
        settings["rounds"] = rounds
    return TacoMAS(_settings(TacoMASSettings, settings, "tacomas"))


def _build_prompting(name: str) -> Builder:
    """The builder of a prompting baseline; ``--rounds`` sets self-refine's iterations and debate's rounds
    unless their own setting is given (``iterations``; ``debate_rounds``, which becomes
    :class:`~toporoute.methods.prompting.DebateSettings` ``rounds``), and is not used by ``cot`` and
    ``self-consistency`` (one round)."""

    def build(settings: dict[str, Any], rounds: int | None, encoder: Encoder | None) -> Method:
        from . import prompting as p

        if name == "cot":
            return p.ChainOfThought(_settings(p.CotSettings, settings, name))
        if name == "self-consistency":
            return p.SelfConsistency(_settings(p.SelfConsistencySettings, settings, name))
        if name == "self-refine":
            if rounds is not None:
                settings.setdefault("iterations", rounds)
            return p.SelfRefine(_settings(p.SelfRefineSettings, settings, name))
        given = settings.pop("debate_rounds", None)
        if given is not None or rounds is not None:
            settings["rounds"] = given if given is not None else rounds
        return p.Debate(_settings(p.DebateSettings, settings, name))

    return build


def _read_random_options(args: argparse.Namespace, run_dir: Path) -> dict[str, Any]:
    from .baselines import dytopo_edge_counts
    from .dytopo import LoopConfig

    counts = dytopo_edge_counts(run_dir / "dytopo")
    if not counts:
        log.warning(
            "random: no DyTopo run in %s; drawing %d edges per round (run dytopo first to match its edge counts)",
            run_dir / "dytopo",
            LoopConfig.random_edges,
        )
    return {**_read_loop_options(args, run_dir), "edge_counts": counts}


_RANDOM_OPTIONS = OptionGroup(LOOP_OPTIONS.title, LOOP_OPTIONS.add, _read_random_options)

REGISTRY: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in (
        MethodSpec(
            "dytopo",
            "DyTopo: rounds of workers routed by their need/offer descriptors, a manager halts (T_max 10)",
            _build_dytopo,
            LOOP_OPTIONS,
            uses_encoder=True,
        ),
        MethodSpec(
            "qmix",
            "Agent Q-Mix: per-agent communication actions from a trained QMIX policy (--checkpoint)",
            _build_qmix,
            QMIX_OPTIONS,
            kinds=("code", "math", "choice"),
        ),
        MethodSpec(
            "conductor",
            "AgentConductor: an orchestrator writes YAML layered DAGs, a tester gives feedback (K 2 turns)",
            _build_conductor,
            CONDUCTOR_OPTIONS,
            kinds=("code",),
        ),
        MethodSpec(
            "hiva",
            "HiVA: a Thompson bandit routes an evolving agent DAG; textual gradients rewrite prompts, tools and "
            "topology (T 10 iterations)",
            _build_hiva,
            HIVA_OPTIONS,
            uses_encoder=True,
        ),
        MethodSpec(
            "tacomas",
            "TacoMAS: a judged and coached role team; every K rounds a meta-LLM's validated births, deaths and "
            "edge edits (R 10 rounds)",
            _build_tacomas,
            TACOMAS_OPTIONS,
            kinds=("code", "math", "choice"),
        ),
        MethodSpec("single", "baseline: one plain LLM call per task", _build_baseline("single")),
        MethodSpec(
            "cot",
            "baseline: one chain-of-thought call per task (reasoning, then the answer)",
            _build_prompting("cot"),
            kinds=_PROMPTING_KINDS,
        ),
        MethodSpec(
            "self-consistency",
            "baseline: N=5 CoT samples in one batch; majority vote, or for code the pick by visible examples",
            _build_prompting("self-consistency"),
            SELF_CONSISTENCY_OPTIONS,
            kinds=_PROMPTING_KINDS,
        ),
        MethodSpec(
            "self-refine",
            "baseline: answer, then up to 3 self-feedback and refine iterations (stops when judged correct)",
            _build_prompting("self-refine"),
            SELF_REFINE_OPTIONS,
            kinds=_PROMPTING_KINDS,
        ),
        MethodSpec(
            "debate",
            "baseline: 3 agents x 3 rounds, each updating on the others' answers; vote or visible-test pick",
            _build_prompting("debate"),
            DEBATE_OPTIONS,
            kinds=_PROMPTING_KINDS,
        ),
        MethodSpec(
            "parallel",
            "baseline: DyTopo's workers answer once, independently",
            _build_baseline("parallel"),
            LOOP_OPTIONS,
        ),
        MethodSpec(
            "random",
            "baseline: DyTopo's loop on random graphs with DyTopo's per-round edge counts (5 rounds)",
            _build_baseline("random"),
            _RANDOM_OPTIONS,
            after=("dytopo",),
        ),
        MethodSpec(
            "chain", "baseline: DyTopo's loop on a chain (5 rounds)", _build_baseline("chain"), LOOP_OPTIONS
        ),
        MethodSpec(
            "star", "baseline: DyTopo's loop on a star (5 rounds)", _build_baseline("star"), LOOP_OPTIONS
        ),
        MethodSpec(
            "full",
            "baseline: DyTopo's loop on the complete graph (5 rounds)",
            _build_baseline("full"),
            LOOP_OPTIONS,
        ),
    )
}
METHODS = tuple(REGISTRY)


def check_shared_options(args: argparse.Namespace, methods: Sequence[str]) -> None:
    """Refuses a flag two methods of one run read with different meanings: ``--tau`` is DyTopo's edge threshold
    (and its baselines') and TacoMAS's stop threshold, so a run of both kinds must leave it at their defaults.
    (``--max-agents`` means a team's capacity for HiVA and TacoMAS alike and goes to both.)"""
    if getattr(args, "tau", None) is None or "tacomas" not in methods:
        return
    loop = [m for m in methods if REGISTRY[m].options in (LOOP_OPTIONS, _RANDOM_OPTIONS)]
    if loop:
        raise ToporouteError(
            f"--tau is the edge threshold of {', '.join(loop)} and the stop threshold of tacomas; "
            "run them separately to set it"
        )


def make_method(
    name: str, *, rounds: int | None = None, encoder: Encoder | None = None, **settings: Any
) -> Method:
    """The method ``name`` with ``settings``.

    Parameters
    ----------
    name : str
        One of :data:`METHODS`.
    rounds : int, optional
        The number of rounds: DyTopo's T_max (default 10), the multi-round baselines' fixed count (default 5),
        Q-Mix's T (default code 2, math 3, choice 2), AgentConductor's K turns (default 2), HiVA's T iterations
        (default 10; a setting ``iterations`` wins), TacoMAS's R rounds (default 10), self-refine's iterations (default 3) and debate's rounds
        (default 3) unless their own setting is given; ``cot`` and ``self-consistency`` have one round.
    encoder : Encoder, optional
        The descriptor encoder (DyTopo and its baselines, Q-Mix's encoder task feature, the conductor's
        searcher); default ``Encoder.default()``, loaded on first use.
    **settings
        Fields of the method's settings: :class:`~toporoute.methods.dytopo.LoopConfig` (DyTopo and its
        baselines; ``random`` also takes ``edge_counts``), :class:`~toporoute.methods.qmix.QMixSettings` plus
        ``checkpoint`` (required), :class:`~toporoute.methods.conductor.ConductorSettings`,
        :class:`~toporoute.methods.hiva.HiVASettings`, :class:`~toporoute.methods.tacomas.TacoMASSettings`, and the prompting baselines'
        :class:`~toporoute.methods.prompting.CotSettings`, ``SelfConsistencySettings``,
        ``SelfRefineSettings``, ``DebateSettings``. Sampling settings
        left out take the method's defaults.
    """
    spec = REGISTRY.get(name)
    if spec is None:
        raise InvalidArgumentError(f"method must be one of {METHODS}; got {name!r}", "method")
    return spec.build(dict(settings), rounds, encoder)
