"""Training curves of a Q-Mix run as PNG files (reward, epsilon, loss), drawn with matplotlib's Agg renderer
(no pyplot: no global figure state)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from .._training_curves import finish_axes, trailing_mean, write_png

__all__ = ["write_training_figures"]


def write_training_figures(out_dir: str | Path, log: Sequence[dict[str, Any]]) -> list[Path]:
    """Writes ``figures/reward.png``, ``figures/epsilon.png`` and ``figures/loss.png``; returns their paths."""
    from matplotlib.figure import Figure

    out = Path(out_dir) / "figures"
    episodes = np.array([e["episode"] + 1 for e in log], dtype=float)
    reward = np.array([e["reward"] for e in log], dtype=float)
    eps = np.array([e["epsilon"] for e in log], dtype=float)
    loss_pts = [(e["episode"] + 1, e["loss"]) for e in log if e.get("loss") is not None]

    fig = Figure(figsize=(6.4, 3.6))
    ax = fig.add_subplot()
    ax.plot(episodes, reward, "o", ms=3, alpha=0.5, color="#4C72B0", label="episode reward")
    if len(reward):
        ax.plot(episodes, trailing_mean(reward, 10), color="#C44E52", label="mean of the last 10")
    finish_axes(
        ax,
        "episode",
        "reward  (w_acc acc - w_tok min(tokens/10k, 1))",
        title="Q-Mix training reward",
        legend_size=8,
    )
    paths = [write_png(fig, out / "reward.png")]

    fig = Figure(figsize=(6.4, 3.0))
    ax = fig.add_subplot()
    ax.plot(episodes, eps, color="#55A868")
    ax.set_ylim(0, 1.05)
    finish_axes(ax, "episode", "epsilon", title="Exploration (per-agent epsilon)")
    paths.append(write_png(fig, out / "epsilon.png"))

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
    finish_axes(ax, "episode", "TD loss", title="QMIX TD loss")
    paths.append(write_png(fig, out / "loss.png"))
    return paths
