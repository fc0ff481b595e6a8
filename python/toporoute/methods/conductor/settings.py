"""The settings of the AgentConductor loop (:class:`ConductorSettings`), with the command-line flags its fields
declare, and the task labels that give a difficulty level."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..._checks import at_least, one_of
from ...errors import InvalidArgumentError
from ...tasks import Task
from ...types.conductor_topology import CheckOptions
from ..episode import SandboxSettings
from ..options import option
from . import _prompts
from ._retrieval import CORPORA
from .reward import CAPS, DENSITY_MODES, RETURN_MODES, RewardConfig

__all__ = ["LEVELS_BY_LABEL", "ConductorSettings"]

LEVELS_BY_LABEL = {
    "easy": "easy",
    "introductory": "easy",
    "medium": "medium",
    "interview": "medium",
    "hard": "hard",
    "competition": "hard",
}

# the plan checker's and the reward's own defaults, which the settings' fields of the same names take
_CHECK_DEFAULTS = CheckOptions()
_REWARD_DEFAULTS = RewardConfig()


@dataclass(frozen=True)
class ConductorSettings(SandboxSettings):
    """Settings of the AgentConductor loop.

    Parameters
    ----------
    max_turns : int
        K, the most plans per problem (the paper: 2).
    level : {"easy", "medium", "hard"}, optional
        Difficulty for the density cap (4 / 7 / 10 nodes per turn). None: the task's ``meta["difficulty"]``
        (else ``meta["level"]``: easy/medium/hard or APPS's introductory/interview/competition; HumanEval's
        tasks carry the offline label of :func:`~toporoute.tasks.humaneval.difficulty_label`), else
        ``default_level``. Never the orchestrator's own guess (spec §9.6).
    default_level : str
        Level of tasks without a label.
    temperature, top_p, max_tokens, seed : sampling of the role agents (see
        :class:`~toporoute.methods.episode.SamplingSettings`); ``seed`` roots every request seed.
    orchestrator_temperature, orchestrator_max_tokens : sampling of the orchestrator (None: ``temperature``).
    guided : bool
        Constrain the orchestrator's output to the plan grammar where the engine supports it.
    grammar : {"validator", "strict"}
        The plan grammar (:func:`~toporoute.methods.conductor.plan_regex`): ``validator`` admits the
        validator's syntax and limits and leaves the logic rules (and so their penalties) to it; ``strict`` is
        the narrower earlier grammar (at most 8 steps of 4 agents, a forced tester-only last step).
    feedback_tests : {"public", "hidden"}
        Tests the tester runs for the orchestrator's feedback and early stop: the examples the prompt shows
        (``public``; :func:`~toporoute.tasks.codetest.public_examples`) or the task's real tests (``hidden``,
        which makes the feedback an oracle; spec §9.11). The reward always uses the hidden tests.
    repair_unverified : bool
        What a turn whose program loads but could not be checked (``[NO VISIBLE TESTS]``: the prompt shows no
        example) leads to. True: the next turn, as after a failure, the orchestrator told that the program is
        unverified. False: the episode ends there. Either way it never counts as passed.
    pool, lenient, strict_tester, concise : see :class:`~toporoute.types.conductor_topology.CheckOptions`
        (and its defaults).
    retrieval_k : int
        Documents the searcher retrieves.
    retrieval_corpus : {"stdlib", "humaneval"}
        What the searcher retrieves from (:func:`~toporoute.methods.conductor._retrieval.corpus_named`): the
        Python standard library's documentation (the default: it holds no benchmark's solution), or HumanEval's
        problems with their canonical solutions (the paper retrieves solved problems; on HumanEval itself only
        leave-one-out and a near-duplicate filter keep a task's own solution out, so the report labels it).
    view_chars : int
        Characters of tester logs kept in the view and the history (about 2k tokens at most).
    test_timeout_s, test_memory_mb : limits of the tester's sandbox runs (see
        :class:`~toporoute.methods.episode.SandboxSettings`).
    density_mode, w_e, w_g, return_mode, gamma : see :class:`~toporoute.methods.conductor.reward.RewardConfig`
        (and its defaults).
    orchestrator : str, optional
        The orchestrator's model when it is not the run's: a folder ``toporoute train conductor`` wrote
        (``TRAIN_DIR/orchestrator``), any model folder, or ``[ENGINE:]MODEL[@BASE_URL]`` (e.g.
        ``openai:/ckpt@http://127.0.0.1:8001/v1`` for ``vllm serve /ckpt``). Its calls go to an engine of
        their own; the role agents stay on the run's. A trained folder's training tasks are never run.
    drop_trained_tasks : bool
        Leave out the tasks the orchestrator was trained on (default: refuse to run on them).
    """

    max_turns: int = 2
    level: str | None = option(
        None,
        choices=tuple(CAPS),
        help="difficulty for the density cap 4/7/10 (default: the task's label, else easy)",
    )
    default_level: str = "easy"
    temperature: float = 0.2
    max_tokens: int = 1024
    orchestrator_temperature: float | None = None
    orchestrator_max_tokens: int = option(768, help="tokens of a plan (default 768)")
    guided: bool = option(True, name="--no-guided", off=True, help="no plan grammar for the orchestrator")
    grammar: str = option(
        "validator",
        choices=_prompts.GRAMMARS,
        help="plan grammar: the validator's syntax and limits, logic left to it (default), or the narrower "
        "strict one (at most 8 steps of 4 agents, a forced tester-only last step)",
    )
    feedback_tests: str = option(
        "public",
        choices=("public", "hidden"),
        help="tests behind the tester's feedback: the examples the prompt shows (default) or the real tests "
        "(an oracle); the reward always uses the real tests",
    )
    repair_unverified: bool = option(
        True,
        name="--no-repair-unverified",
        off=True,
        help="end the episode when the program loads but the prompt shows no example to test it on "
        "([NO VISIBLE TESTS]; still not passed) instead of going on to the repair turn",
    )
    pool: tuple[str, ...] = _CHECK_DEFAULTS.pool
    lenient: bool = _CHECK_DEFAULTS.lenient
    strict_tester: bool = option(_CHECK_DEFAULTS.strict_tester, help="reject testers outside the last step")
    concise: bool = _CHECK_DEFAULTS.concise
    retrieval_k: int = 3
    retrieval_corpus: str = option(
        "stdlib",
        choices=CORPORA,
        help="the searcher's corpus: the Python standard library's documentation (default; no benchmark "
        "solution) or humaneval (HumanEval's canonical solutions, leave-one-out; labelled in the report)",
    )
    view_chars: int = 6000
    density_mode: str = option(
        _REWARD_DEFAULTS.density_mode, choices=DENSITY_MODES, help="r_g form (default paper)"
    )
    w_e: float = _REWARD_DEFAULTS.w_e
    w_g: float = _REWARD_DEFAULTS.w_g
    return_mode: str = option(
        _REWARD_DEFAULTS.return_mode, choices=RETURN_MODES, help="trajectory return (default sum)"
    )
    gamma: float = _REWARD_DEFAULTS.gamma
    orchestrator: str | None = option(
        None,
        type=str,
        metavar="PATH",
        help="the orchestrator's model, on an engine of its own: a folder 'toporoute train conductor' wrote "
        "(TRAIN_DIR/orchestrator; its training tasks are refused), any model folder, or "
        "[ENGINE:]MODEL[@BASE_URL] (default: the run's model)",
    )
    # --drop-trained-tasks (shared with qmix) is added by the plugin
    drop_trained_tasks: bool = False
    check_options: CheckOptions = field(init=False, repr=False, compare=False)
    reward: RewardConfig = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        super().__post_init__()
        object.__setattr__(self, "pool", tuple(self.pool))
        at_least("max_turns", self.max_turns, 1)
        one_of("default_level", self.default_level, tuple(CAPS))  # level: its flag's choices
        for name in ("orchestrator_max_tokens", "retrieval_k", "view_chars"):
            at_least(name, getattr(self, name), 1)
        if self.orchestrator is not None and not str(self.orchestrator).strip():
            raise InvalidArgumentError(
                "orchestrator must name a model folder or an engine spec; got ''", "orchestrator"
            )
        object.__setattr__(
            self,
            "check_options",
            CheckOptions(
                pool=self.pool, lenient=self.lenient, strict_tester=self.strict_tester, concise=self.concise
            ),
        )
        object.__setattr__(
            self,
            "reward",
            RewardConfig(self.density_mode, self.w_e, self.w_g, self.return_mode, self.gamma),
        )

    def level_of(self, task: Task) -> tuple[str, str]:
        """``(level, where it came from)``: ``setting``, ``task`` or ``default``."""
        if self.level is not None:
            return self.level, "setting"
        for key in ("difficulty", "level"):
            label = str(task.meta.get(key, "")).strip().lower()
            if label in LEVELS_BY_LABEL:
                return LEVELS_BY_LABEL[label], "task"
        return self.default_level, "default"

    def params(self) -> dict[str, Any]:
        d = super().params()
        d.pop("check_options", None)
        d.pop("reward", None)
        d["pool"] = list(self.pool)
        # recorded when set: a run folder from before these settings existed stays resumable
        for name, default in (("orchestrator", None), ("drop_trained_tasks", False)):
            if d.get(name) == default:
                d.pop(name, None)
        return d
