"""Learning curves of an orchestrator training run: PNG figures (matplotlib's Agg renderer, no pyplot state) and
``report.html``, a page with the figures and the per-step table of ``log.jsonl``."""

from __future__ import annotations

import html
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..._atomic import write_bytes_atomic
from .._training_curves import finish_axes, trailing_mean, write_png

__all__ = ["curve_table", "write_training_report"]

_COMPONENTS = ("validity", "density", "execution")
_COLORS = {"reward": "#222222", "validity": "#C44E52", "density": "#4C72B0", "execution": "#55A868"}


def _series(log: Sequence[dict[str, Any]], key: str) -> tuple[np.ndarray, np.ndarray]:
    pts = [(e["step"], e[key]) for e in log if e.get(key) is not None]
    if not pts:
        return np.zeros(0), np.zeros(0)
    x, y = zip(*pts)
    return np.asarray(x, float), np.asarray(y, float)


def curve_table(log: Sequence[dict[str, Any]], every: int = 10) -> list[dict[str, Any]]:
    """Means over consecutive windows of ``every`` steps (steps 1-10, 11-20, ...): reward, its components,
    validity rate and KL."""
    out: list[dict[str, Any]] = []
    if not log:
        return out
    last = max(int(e["step"]) for e in log)
    for lo in range(1, last + 1, every):
        rows = [e for e in log if lo <= int(e["step"]) < lo + every]
        if not rows:
            continue
        row: dict[str, Any] = {"steps": f"{lo}-{min(lo + every - 1, last)}"}
        for key in ("reward", *_COMPONENTS, "validity_rate", "kl", "completion_tokens"):
            vals = [e[key] for e in rows if e.get(key) is not None]
            row[key] = float(np.mean(vals)) if vals else None
        out.append(row)
    return out


def write_training_report(out_dir: str | Path, log: Sequence[dict[str, Any]], *, title: str) -> list[Path]:
    """Writes ``figures/rewards.png`` (the reward and each component per step), ``figures/validity.png``,
    ``figures/kl.png`` and ``report.html``; returns their paths."""
    from matplotlib.figure import Figure

    out = Path(out_dir)
    folder = out / "figures"

    fig = Figure(figsize=(7.0, 3.8))
    ax = fig.add_subplot()
    for key in ("reward", *_COMPONENTS):
        x, y = _series(log, key)
        if len(x):
            ax.plot(x, y, "o", ms=2.5, alpha=0.35, color=_COLORS[key])
            ax.plot(x, trailing_mean(y, 10), color=_COLORS[key], label=f"{key} (mean of the last 10)")
    ax.axhline(0.0, color="#999999", lw=0.8)
    finish_axes(
        ax, "GRPO step", "mean over the step's completions", title="Reward and its components", legend_size=7
    )
    paths = [write_png(fig, folder / "rewards.png")]

    for key, name, label in (("validity_rate", "validity", "valid plans"), ("kl", "kl", "KL to the start")):
        fig = Figure(figsize=(7.0, 3.0))
        ax = fig.add_subplot()
        x, y = _series(log, key)
        if len(x):
            ax.plot(x, y, "o", ms=2.5, alpha=0.35, color="#8172B3")
            ax.plot(x, trailing_mean(y, 10), color="#8172B3", label="mean of the last 10")
            ax.legend(loc="best", fontsize=7)
        else:
            ax.text(0.5, 0.5, f"no {label} logged", ha="center", va="center", transform=ax.transAxes)
        if key == "validity_rate":
            ax.set_ylim(-0.02, 1.02)
        finish_axes(ax, "GRPO step", label)
        paths.append(write_png(fig, folder / f"{name}.png"))

    def cell(v: Any, fmt: str) -> str:
        return "" if v is None else html.escape(fmt.format(v))

    rows = "".join(
        "<tr>"
        + f"<td>{html.escape(r['steps'])}</td>"
        + "".join(f"<td>{cell(r[k], '{:+.3f}')}</td>" for k in ("reward", *_COMPONENTS))
        + f"<td>{cell(r['validity_rate'], '{:.0%}')}</td><td>{cell(r['kl'], '{:.4f}')}</td>"
        + f"<td>{cell(r['completion_tokens'], '{:.0f}')}</td></tr>"
        for r in curve_table(log)
    )
    figures = "".join(
        f'<p><img src="figures/{html.escape(p.name)}" alt="{html.escape(p.stem)}"></p>' for p in paths
    )
    page = (
        "<!doctype html><html><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;text-align:right}"
        "table{border-collapse:collapse}tr:nth-child(even){background:#f4f4f4}</style></head><body>"
        f"<h1>{html.escape(title)}</h1><p>{len(log)} steps logged (log.jsonl).</p>{figures}"
        "<h2>Per 10 steps</h2><table><tr><th>steps</th><th>reward</th><th>validity</th><th>density</th>"
        f"<th>execution</th><th>valid plans</th><th>KL</th><th>plan tokens</th></tr>{rows}</table></body></html>"
    )
    report = out / "report.html"
    write_bytes_atomic(report, page.encode("utf-8"))
    return [*paths, report]
