"""The settings of QMIX training (``toporoute train qmix``), apart from the trainer so that the command line
reads them without importing PyTorch: :class:`TrainConfig`, whose fields declare the ``train`` flags."""

from __future__ import annotations

from dataclasses import dataclass

from ..._argtypes import float_at_least, int_at_least
from ..._checks import at_least, within
from ...errors import InvalidArgumentError
from ..options import OptionGroup, check_fields, option

__all__ = ["TRAIN_OPTIONS", "TrainConfig"]


@dataclass(frozen=True)
class TrainConfig:
    """QMIX training settings (spec §6; defaults are the paper's, with the spec's fixes).

    Parameters
    ----------
    episodes : int
        Episodes to train (the paper: 50 per domain). Episode k uses task ``k mod len(tasks)``.
    batch_size : int
        Episodes per gradient step (8); training starts once the buffer holds this many.
    lr, gamma, grad_clip : Adam learning rate (5e-4), discount (0.99), gradient-norm clip (10).
    buffer_size : int
        Replay capacity in episodes (FIFO, 5000).
    target_update : {"soft", "hard"}
        Soft: ``theta^- <- tau theta + (1 - tau) theta^-`` after every step; hard: copy every
        ``target_interval`` steps (the original's 200 never fires at this data scale).
    target_tau, target_interval : see ``target_update``.
    eps_start, eps_end : linear epsilon schedule over ``episodes`` (1.0 -> 0.05), per agent.
    w_acc, w_tok, token_norm : the reward's weights and token normaliser (1.25, 0.10, 10000).
    legacy_reward_broadcast : bool
        The original code's targets (R at every round, last round untrained).
    dropout : float
        GNN dropout while training (0.1, as the original; acting is always in eval mode).
    concurrency : int
        Episodes acted at once with the same policy (their LLM calls are batched); 1 is the paper's loop.
    seed : int
        Network init, replay sampling and exploration.
    """

    episodes: int = option(
        50, type=int_at_least(1), help="episodes (default 50; episode k uses task k mod N)"
    )
    batch_size: int = option(8, type=int_at_least(1), help="episodes per gradient step (default 8)")
    lr: float = option(5e-4, type=float_at_least(0.0, strict=True), help="Adam learning rate (default 5e-4)")
    gamma: float = option(0.99, help="TD discount factor in [0, 1] (default 0.99)")
    grad_clip: float = 10.0
    buffer_size: int = 5000
    target_update: str = option("soft", choices=("soft", "hard"), help="target network update (default soft)")
    target_tau: float = option(0.01, help="soft update rate (default 0.01)")
    target_interval: int = option(
        10, type=int_at_least(1), help="hard update: gradient steps between copies (default 10)"
    )
    eps_start: float = 1.0
    eps_end: float = 0.05
    w_acc: float = option(1.25, help="reward weight of accuracy (default 1.25)")
    w_tok: float = option(0.10, help="reward weight of tokens/10k (default 0.10)")
    token_norm: float = 10_000.0
    legacy_reward_broadcast: bool = option(
        False,
        help="the original targets: R at every round, last round untrained (default: R at the last round)",
    )
    dropout: float = 0.1
    concurrency: int = option(1, type=int_at_least(1), help="episodes acted at once per policy (default 1)")
    seed: int = 0

    def __post_init__(self) -> None:
        check_fields(self)
        for name in ("episodes", "batch_size", "buffer_size", "target_interval", "concurrency"):
            at_least(name, getattr(self, name), 1)
        for name in ("target_tau", "eps_start", "eps_end", "gamma", "dropout"):
            within(name, getattr(self, name), 0, 1)
        if self.lr <= 0 or self.grad_clip <= 0 or self.token_norm <= 0:
            raise InvalidArgumentError("lr, grad_clip and token_norm must be > 0", "lr")

    def reward(self, accuracy: float, tokens: int) -> float:
        return self.w_acc * accuracy - self.w_tok * min(tokens / self.token_norm, 1.0)


TRAIN_OPTIONS = OptionGroup("QMIX training", TrainConfig)
"""``toporoute train qmix``'s training flags (declared on :class:`TrainConfig`'s fields)."""
