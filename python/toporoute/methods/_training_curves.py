"""What the trainers' learning-curve figures share (``toporoute train qmix``: reward, epsilon, loss; ``toporoute
train conductor``: the reward and its components, validity, KL): the trailing mean drawn over the points, the
axes' labels and grid, and the PNG file. The callers import matplotlib's ``Figure`` themselves (its Agg renderer,
no pyplot: no global figure state), so this module needs no matplotlib."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np

from .._atomic import write_bytes_atomic

__all__ = ["finish_axes", "trailing_mean", "write_png"]


def trailing_mean(y: np.ndarray, width: int) -> np.ndarray:
    """``out[i]``: the mean of the last ``width`` values up to ``y[i]`` (fewer at the start), float64, shape of y."""
    return np.array([y[max(0, i - width + 1) : i + 1].mean() for i in range(len(y))])


def finish_axes(
    ax: Any, xlabel: str, ylabel: str, *, title: str | None = None, legend_size: float | None = None
) -> None:
    """The axes' labels, the optional title, a light grid and, with ``legend_size``, the legend at its best
    place in that font size."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title is not None:
        ax.set_title(title)
    ax.grid(alpha=0.3)
    if legend_size is not None:
        ax.legend(loc="best", fontsize=legend_size)


def write_png(fig: Any, path: Path) -> Path:
    """Writes ``fig`` to ``path`` as a PNG (100 dpi, tight bounding box), atomically; returns the path."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    write_bytes_atomic(path, buf.getvalue())
    return path
