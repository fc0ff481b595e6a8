"""Agent Q-Mix observations and global state (spec §3).

Observation of agent i (``obs_dim = task_dim + 16 + 3``): the task feature, an identity one-hot at ``i mod 16``,
``has_output``, the agent's degree in the current round graph over n, and its cumulative tokens / 10,000
(clipped to 1). The task feature is the original code's 32-slot byte hash by default, or a sentence embedding
(``task_feature="encoder"``: the descriptor encoder's 384-d vector; the input projection learns the rest).
Global state: every observation, then graph statistics.

``legacy=True`` reproduces the original code: the token feature is always 0, the degree counts the edge to the
decision node after a round, and the statistics are raw (edge count, edges / n^2, n).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..._checks import at_least, either
from ...errors import InvalidArgumentError

if TYPE_CHECKING:
    from ...embed import Encoder

__all__ = ["IDENTITY_SLOTS", "Features", "global_state", "hash_task_feature", "observations"]

IDENTITY_SLOTS = 16
TOKEN_NORM = 10_000.0


def hash_task_feature(text: str, dim: int = 32, max_bytes: int = 128) -> np.ndarray:
    """The original byte hash: byte k of the first ``max_bytes`` UTF-8 bytes adds ``byte / 255`` to slot
    ``k mod dim``; then L2-normalised (left alone when zero)."""
    raw = np.frombuffer(text.encode("utf-8")[:max_bytes], dtype=np.uint8).astype(np.float64) / 255.0
    out = np.zeros(dim)
    np.add.at(out, np.arange(len(raw)) % dim, raw)
    norm = np.linalg.norm(out)
    return (out / norm if norm > 0 else out).astype(np.float32)


@dataclass(frozen=True)
class Features:
    """How observations are built; stored in the checkpoint so a policy always sees what it was trained on.

    Parameters
    ----------
    task_feature : {"hash", "encoder"}
    hash_dim : int
        Slots of the byte hash (32).
    legacy : bool
        The original code's quirks (see the module docstring).
    """

    task_feature: str = "hash"
    hash_dim: int = 32
    legacy: bool = False

    def __post_init__(self) -> None:
        either("task_feature", self.task_feature, "hash", "encoder")
        at_least("hash_dim", self.hash_dim, 1)

    def task_dim(self, encoder_dim: int = 384) -> int:
        return self.hash_dim if self.task_feature == "hash" else encoder_dim

    def obs_dim(self, encoder_dim: int = 384) -> int:
        return self.task_dim(encoder_dim) + IDENTITY_SLOTS + 3

    def state_dim(self, n_agents: int, encoder_dim: int = 384) -> int:
        return n_agents * self.obs_dim(encoder_dim) + 3

    def task_vector(self, text: str, encoder: Encoder | None = None) -> np.ndarray:
        if self.task_feature == "hash":
            return hash_task_feature(text, self.hash_dim)
        if encoder is None:
            raise InvalidArgumentError("task_feature='encoder' needs an encoder", "encoder")
        return np.asarray(encoder.encode([text])[0], dtype=np.float32)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> Features:
        return cls(**json.loads(text))


def observations(
    features: Features,
    task_vec: np.ndarray,
    adj: np.ndarray,
    has_output: np.ndarray,
    tokens: np.ndarray,
    *,
    after_round: bool,
) -> np.ndarray:
    """``(n, obs_dim)`` float32 observations over the current round graph ``adj (n, n)``.

    ``after_round``: a round has run on this graph (the legacy degree then counts the decision-node edge).
    """
    n = len(adj)
    a = adj.astype(bool) & ~np.eye(n, dtype=bool)
    obs = np.zeros((n, len(task_vec) + IDENTITY_SLOTS + 3), dtype=np.float32)
    obs[:, : len(task_vec)] = task_vec
    base = len(task_vec)
    obs[np.arange(n), base + np.arange(n) % IDENTITY_SLOTS] = 1.0
    obs[:, base + IDENTITY_SLOTS] = has_output.astype(np.float32)
    degree = a.sum(axis=0) + a.sum(axis=1) + (1 if features.legacy and after_round else 0)
    obs[:, base + IDENTITY_SLOTS + 1] = degree / n
    if not features.legacy:
        obs[:, base + IDENTITY_SLOTS + 2] = np.minimum(np.asarray(tokens, np.float64) / TOKEN_NORM, 1.0)
    return obs


def global_state(features: Features, obs: np.ndarray, adj: np.ndarray) -> np.ndarray:
    """``(n * obs_dim + 3,)`` float32: the flattened observations, then edge statistics (self-loops excluded):
    ``edges / (n (n - 1)), edges / n^2, n / 16`` (legacy: ``edges, edges / n^2, n``)."""
    n = len(adj)
    edges = float((adj.astype(bool) & ~np.eye(n, dtype=bool)).sum())
    if features.legacy:
        stats = [edges, edges / n**2, float(n)]
    else:
        stats = [edges / max(n * (n - 1), 1), edges / n**2, n / IDENTITY_SLOTS]
    state: np.ndarray = np.concatenate([obs.reshape(-1), np.asarray(stats, np.float32)]).astype(np.float32)
    return state
