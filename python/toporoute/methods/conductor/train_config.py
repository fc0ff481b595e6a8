"""The settings of orchestrator training (``toporoute train conductor``), apart from the trainer so that the
command line reads them without importing PyTorch or TRL: :class:`GRPOConfig`, whose fields declare the flags."""

from __future__ import annotations

from dataclasses import dataclass

from ..._argtypes import float_at_least, int_at_least
from ..._checks import at_least, within
from ...errors import InvalidArgumentError
from ..options import OptionGroup, check_fields, option

__all__ = ["GENERATORS", "REWARD_COMPONENTS", "TRAIN_OPTIONS", "GRPOConfig", "parse_reward_components"]

REWARD_COMPONENTS = ("validity", "density", "execution")
"""The reward's parts, logged each on its own: ``validity`` (the error class's penalty, 0 for a valid plan),
``density`` (r_g of a valid plan) and ``execution`` (the hidden tests' verdict of a valid plan run by the real
loop on its training task)."""

GENERATORS = ("trl", "vllm")


def parse_reward_components(text: str) -> tuple[str, ...]:
    """``validity,density[,execution]`` as a tuple in :data:`REWARD_COMPONENTS`' order; an unknown or missing
    part raises :class:`InvalidArgumentError` naming ``reward``."""
    parts = [p.strip() for p in str(text).split(",") if p.strip()]
    bad = [p for p in parts if p not in REWARD_COMPONENTS]
    if bad or not parts:
        raise InvalidArgumentError(
            f"reward must be a comma-separated list of {', '.join(REWARD_COMPONENTS)}; got {text!r}", "reward"
        )
    if "validity" not in parts:
        raise InvalidArgumentError(
            f"reward must include validity (every plan gets its check's term); got {text!r}", "reward"
        )
    return tuple(c for c in REWARD_COMPONENTS if c in parts)


@dataclass(frozen=True)
class GRPOConfig:
    """Orchestrator training settings (spec §4.5, §5; the paper's values where they fit a small model).

    Parameters
    ----------
    steps : int
        GRPO optimizer steps.
    group_size : int
        G, the completions sampled per prompt (the paper: 8); advantages are normalised within each group.
    prompts_per_step : int
        Training tasks per step (each gives one group).
    max_completion_tokens : int
        Tokens of a sampled plan (longer ones are cut, and usually fail the check).
    lr : float, optional
        AdamW learning rate (default: 1e-5 for a full fine-tune, 1e-4 with LoRA).
    beta : float
        KL coefficient to the starting model (spec: 0.001; 0: no reference model and no KL).
    epsilon : float
        PPO clip range.
    temperature : float
        Sampling temperature of the rollouts (the paper: 1.0).
    reward : str
        Comma-separated reward components (:data:`REWARD_COMPONENTS`): ``validity,density`` runs no agent.
    lora : bool
        Train LoRA adapters (peft) instead of every weight; the saved orchestrator is merged.
    lora_rank, lora_alpha : int
        LoRA's rank and scale (spec: 8, 16).
    sft : bool
        Warm-start with TRL's SFTTrainer on valid plans before GRPO (spec §4.6).
    sft_data : str, optional
        SFT examples: ``rollouts.jsonl`` from ``collect_rollouts`` (the well-scored turns) or a JSONL of chat
        examples (``{"messages": [...]}``); default: plans synthesised from the plan grammar for each training
        task's difficulty.
    sft_per_task : int
        Plans synthesised per training task (without ``sft_data``).
    sft_epochs : int
        Passes over the SFT examples.
    sft_lr : float, optional
        SFT learning rate (default: 5e-5 for a full fine-tune, 2e-4 with LoRA; cosine schedule, 10% warm-up).
    save_every : int
        Steps between resumable checkpoints (the last step is always saved).
    generation : {"trl", "vllm"}
        Who samples the rollouts: TRL's own ``generate`` (any machine) or vLLM colocated in the process (TRL's
        ``use_vllm``; needs a vLLM TRL supports on the machine's device).
    seed : int
    """

    steps: int = option(50, type=int_at_least(1), help="GRPO steps (default 50)")
    group_size: int = option(
        8, type=int_at_least(2), help="completions per prompt, G (default 8, as the paper)"
    )
    prompts_per_step: int = option(1, type=int_at_least(1), help="training tasks per step (default 1)")
    max_completion_tokens: int = option(
        384, type=int_at_least(8), help="tokens of a sampled plan (default 384)"
    )
    lr: float | None = option(
        None,
        type=float_at_least(0.0, strict=True),
        help="learning rate (default 1e-5; with --lora 1e-4)",
    )
    beta: float = option(0.001, type=float_at_least(0.0), help="KL coefficient (default 0.001; 0: no KL)")
    epsilon: float = option(0.2, type=float_at_least(0.0, strict=True), help="PPO clip range (default 0.2)")
    temperature: float = option(
        1.0,
        name="--rollout-temperature",
        type=float_at_least(0.0, strict=True),
        help="temperature of the sampled plans (default 1.0, as the paper; --temperature is the agents')",
    )
    reward: str = option(
        ",".join(REWARD_COMPONENTS),
        help="reward components: validity,density,execution (default; execution runs the agents on the "
        "training task) or validity,density (no agent runs)",
    )
    lora: bool = option(False, help="train LoRA adapters (peft) instead of every weight")
    lora_rank: int = option(8, type=int_at_least(1), help="LoRA rank (default 8)")
    lora_alpha: int = option(16, type=int_at_least(1), help="LoRA alpha (default 16)")
    sft: bool = option(False, help="warm-start with TRL's SFTTrainer on valid plans first")
    sft_data: str | None = option(
        None,
        type=str,
        metavar="JSONL",
        help="SFT examples: a rollouts.jsonl or chat-format JSONL (default: plans synthesised from the grammar)",
    )
    sft_per_task: int = option(
        4, type=int_at_least(1), help="plans synthesised per training task for SFT (default 4)"
    )
    sft_epochs: int = option(2, type=int_at_least(1), help="passes over the SFT examples (default 2)")
    sft_lr: float | None = option(
        None,
        type=float_at_least(0.0, strict=True),
        help="SFT learning rate (default 5e-5; with --lora 2e-4)",
    )
    save_every: int = option(10, type=int_at_least(1), help="steps between checkpoints (default 10)")
    generation: str = option(
        "trl",
        choices=GENERATORS,
        help="rollout sampler: trl (TRL's generate; default) or vllm (colocated, where TRL supports it)",
    )
    seed: int = 0

    def __post_init__(self) -> None:
        check_fields(self)
        for name in (
            "steps",
            "prompts_per_step",
            "lora_rank",
            "lora_alpha",
            "sft_per_task",
            "sft_epochs",
            "save_every",
        ):
            at_least(name, getattr(self, name), 1)
        at_least("group_size", self.group_size, 2)
        at_least("max_completion_tokens", self.max_completion_tokens, 8)
        within("epsilon", self.epsilon, 0.0, 1.0)
        if self.beta < 0:
            raise InvalidArgumentError(f"beta must be >= 0; got {self.beta}", "beta")
        for name in ("lr", "sft_lr"):
            value = getattr(self, name)
            if value is not None and not value > 0:
                raise InvalidArgumentError(f"{name} must be > 0; got {value}", name)
        if not self.temperature > 0:
            raise InvalidArgumentError(f"temperature must be > 0; got {self.temperature}", "temperature")
        object.__setattr__(self, "reward", ",".join(parse_reward_components(self.reward)))

    @property
    def components(self) -> tuple[str, ...]:
        return tuple(self.reward.split(","))

    @property
    def learning_rate(self) -> float:
        return self.lr if self.lr is not None else (1e-4 if self.lora else 1e-5)

    @property
    def sft_learning_rate(self) -> float:
        return self.sft_lr if self.sft_lr is not None else (2e-4 if self.lora else 5e-5)


TRAIN_OPTIONS = OptionGroup("GRPO training", GRPOConfig)
"""``toporoute train conductor``'s training flags (declared on :class:`GRPOConfig`'s fields)."""
