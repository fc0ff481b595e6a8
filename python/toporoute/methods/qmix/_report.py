"""Training curves of a Q-Mix run as PNG files (reward, epsilon, loss), drawn with matplotlib's Agg renderer
(no pyplot: no global figure state)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..._atomic import write_bytes_atomic

__all__ = ["write_training_figures"]


def _moving_mean(values: np.ndarray, width: int) -> np.ndarray:
    out = np.empty_like(values)
    for i in range(len(values)):
        out[i] = values[max(0, i - width + 1) : i + 1].mean()
    return out


def write_training_figures(out_dir: str | Path, log: Sequence[dict[str, Any]]) -> list[Path]:
    """Writes ``figures/reward.png``, ``figures/epsilon.png`` and ``figures/loss.png``; returns their paths."""
    from matplotlib.figure import Figure

    out = Path(out_dir) / "figures"
    episodes = np.array([e["episode"] + 1 for e in log], dtype=float)
    reward = np.array([e["reward"] for e in log], dtype=float)
    eps = np.array([e["epsilon"] for e in log], dtype=float)
    loss_pts = [(e["episode"] + 1, e["loss"]) for e in log if e.get("loss") is not None]
    paths = []

    def save(fig: Any, name: str) -> None:
        buf = io.BytesIO()
        fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
        path = out / f"{name}.png"
        write_bytes_atomic(path, buf.getvalue())
        paths.append(path)

    fig = Figure(figsize=(6.4, 3.6))
    ax = fig.add_subplot()
    ax.plot(episodes, reward, "o", ms=3, alpha=0.5, color="#4C72B0", label="episode reward")
    if len(reward):
        ax.plot(episodes, _moving_mean(reward, 10), color="#C44E52", label="mean of the last 10")
    ax.set_xlabel("episode")
    ax.set_ylabel("reward  (w_acc acc - w_tok min(tokens/10k, 1))")
    ax.set_title("Q-Mix training reward")
    ax.grid(alpha=0.3)
    ax.legend(loc="best", fontsize=8)
    save(fig, "reward")

    fig = Figure(figsize=(6.4, 3.0))
    ax = fig.add_subplot()
    ax.plot(episodes, eps, color="#55A868")
    ax.set_xlabel("episode")
    ax.set_ylabel("epsilon")
    ax.set_ylim(0, 1.05)
    ax.set_title("Exploration (per-agent epsilon)")
    ax.grid(alpha=0.3)
    save(fig, "epsilon")

    fig = Figure(figsize=(6.4, 3.0))
    ax = fig.add_subplot()
    if loss_pts:
        x, y = zip(*loss_pts)
        ax.plot(x, y, color="#8172B3")
    else:
        ax.text(
            0.5,
            0.5,
            "no gradient step yet (the buffer holds fewer episodes than batch_size)",
            ha="center",
            va="center",
            transform=ax.transAxes,
            fontsize=8,
        )
    ax.set_xlabel("episode")
    ax.set_ylabel("TD loss")
    ax.set_title("QMIX TD loss")
    ax.grid(alpha=0.3)
    save(fig, "loss")
    return paths
