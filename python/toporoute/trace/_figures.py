"""The report's charts as PNG images, drawn with matplotlib's Agg renderer.

Figures are built as :class:`matplotlib.figure.Figure` objects, never through ``pyplot``: no global figure
registry, no display backend, safe from any thread. matplotlib is imported on call, so the report module itself
loads without it.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

from .reader import RunData, episode_rows, round_stats

__all__ = ["FIGURES", "FigureImage", "render_figures"]

# file stem -> caption, in page order
FIGURES = {
    "accuracy": "Accuracy per method (passed / finished episodes)",
    "tokens": "Tokens per task (prompt + completion)",
    "edges_per_round": "Routed edges and density per round (mean over episodes)",
    "wall_time": "Latency: per-task time and time per round",
}

_COLORS = ["#4C72B0", "#DD8452", "#55A868", "#C44E52", "#8172B3", "#937860", "#DA8BC3", "#8C8C8C"]
_DPI = 100


@dataclass(frozen=True)
class FigureImage:
    """One chart: ``name`` is the file stem (``accuracy`` -> ``figures/accuracy.png``)."""

    name: str
    caption: str
    png: bytes


def render_figures(run: RunData, summaries: list[dict[str, Any]]) -> list[FigureImage]:
    """Draws every chart of :data:`FIGURES` for ``run``.

    Parameters
    ----------
    run : RunData
    summaries : list of dict
        :func:`~toporoute.trace.reader.summarize` of each of ``run.methods``, same order.

    Returns
    -------
    list of FigureImage
        In :data:`FIGURES` order.

    Raises
    ------
    ImportError
        matplotlib is not installed.
    """
    from matplotlib.figure import Figure

    names = [m.name for m in run.methods]
    colors = [_COLORS[i % len(_COLORS)] for i in range(len(names))]
    drawers = {
        "accuracy": lambda: _accuracy(Figure, names, colors, summaries),
        "tokens": lambda: _tokens(Figure, names, colors, summaries),
        "edges_per_round": lambda: _edges(Figure, run, colors),
        "wall_time": lambda: _latency(Figure, run, colors),
    }
    return [FigureImage(name, caption, _png(drawers[name]())) for name, caption in FIGURES.items()]


def _png(fig: Any) -> bytes:
    buf = io.BytesIO()
    # no Software/version metadata, so identical runs give identical files
    fig.savefig(buf, format="png", dpi=_DPI, metadata={"Software": None})
    return buf.getvalue()


def _style(ax: Any) -> None:
    ax.spines[["top", "right"]].set_visible(False)
    ax.grid(axis="y", color="#e4e4e4", linewidth=0.8)
    ax.set_axisbelow(True)


def _accuracy(Figure: Any, names: list[str], colors: list[str], summaries: list[dict[str, Any]]) -> Any:
    fig = Figure(figsize=(6.4, 3.6), layout="constrained")
    ax = fig.add_subplot()
    values = [100.0 * s["accuracy"] for s in summaries]
    bars = ax.bar(names, values, color=colors, width=0.6)
    for bar, s in zip(bars, summaries):
        text = f"{s['accuracy']:.1%}\n{s['passed']}/{s['ok']}" if s["ok"] else "no finished\nepisodes"
        ax.annotate(
            text,
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            xytext=(0, 2),
            textcoords="offset points",
            fontsize=8,
        )
    ax.set_ylim(0, 119)
    ax.set_ylabel("accuracy (%)")
    ax.set_title("Accuracy", fontsize=11)
    _style(ax)
    return fig


def _tokens(Figure: Any, names: list[str], colors: list[str], summaries: list[dict[str, Any]]) -> Any:
    fig = Figure(figsize=(6.4, 3.6), layout="constrained")
    ax = fig.add_subplot()
    prompt = [s["prompt_tokens_per_task"] for s in summaries]
    completion = [s["completion_tokens_per_task"] for s in summaries]
    ax.bar(names, prompt, color=colors, width=0.6, alpha=0.55, label="prompt")
    bars = ax.bar(names, completion, bottom=prompt, color=colors, width=0.6, label="completion")
    for bar, p, c in zip(bars, prompt, completion):
        ax.annotate(
            f"{p + c:,.0f}",
            (bar.get_x() + bar.get_width() / 2, p + c),
            ha="center",
            va="bottom",
            xytext=(0, 2),
            textcoords="offset points",
            fontsize=8,
        )
    top = max([p + c for p, c in zip(prompt, completion)] or [0.0])
    ax.set_ylim(0, top * 1.15 if top > 0 else 1.0)
    ax.set_ylabel("tokens per task")
    ax.set_title("Tokens per task (light: prompt, dark: completion)", fontsize=11)
    _style(ax)
    return fig


def _edges(Figure: Any, run: RunData, colors: list[str]) -> Any:
    fig = Figure(figsize=(9.0, 3.6), layout="constrained")
    ax_e, ax_d = fig.subplots(1, 2)
    drawn = 0
    for m, color in zip(run.methods, colors):
        stats = round_stats(m)
        if not stats or all(len(rec.graph.agents) < 2 for t in m.traces.values() for rec in t):
            continue  # single-agent methods have no graph to speak of
        xs = [s.round + 1 for s in stats]  # rounds are counted from 1 on the page
        ax_e.plot(xs, [s.edges for s in stats], marker="o", color=color, label=m.name)
        ax_d.plot(xs, [s.density for s in stats], marker="o", color=color, label=m.name)
        drawn += 1
    for ax, ylabel in ((ax_e, "edges (mean)"), (ax_d, "density (mean)")):
        ax.set_xlabel("round")
        ax.set_ylabel(ylabel)
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.set_ylim(bottom=0)
        _style(ax)
    if drawn:
        ax_e.legend(fontsize=8, frameon=False)
    else:
        ax_e.text(
            0.5, 0.5, "no multi-agent rounds traced", ha="center", va="center", transform=ax_e.transAxes
        )
    ax_e.set_title("Edges per round", fontsize=11)
    ax_d.set_title("Density per round", fontsize=11)
    return fig


def _latency(Figure: Any, run: RunData, colors: list[str]) -> Any:
    from matplotlib.legend_handler import HandlerTuple
    from matplotlib.patches import Patch

    fig = Figure(figsize=(9.0, 3.6), layout="constrained")
    ax_t, ax_r = fig.subplots(1, 2)
    names = [m.name for m in run.methods]
    parts: dict[str, list[float]] = {"wall": [], "LLM": [], "routing": []}
    for m in run.methods:
        ok = [r for r in episode_rows(m) if r.status == "ok"]
        for key, attr in (("wall", "wall_s"), ("LLM", "llm_s"), ("routing", "routing_s")):
            values = [getattr(r, attr) for r in ok if getattr(r, attr) is not None]
            parts[key].append(sum(values) / len(values) if values else 0.0)
    height = 0.26
    shades = {"wall": 1.0, "LLM": 0.6, "routing": 0.3}
    for k, (key, values) in enumerate(parts.items()):
        ys = [i + (k - 1) * height for i in range(len(names))]
        ax_t.barh(ys, values, height=height, color=colors, alpha=shades[key], label=key)
    # one colour per method and one shade per part: each legend entry is its shade in every method's colour
    handles = [tuple(Patch(color=c, alpha=shades[key]) for c in colors) for key in parts]
    ax_t.legend(
        handles,
        list(parts),
        handler_map={tuple: HandlerTuple(ndivide=None, pad=0)},
        fontsize=8,
        frameon=False,
        loc="best",
    )
    ax_t.set_yticks(range(len(names)), names)
    ax_t.invert_yaxis()
    ax_t.set_xlabel("seconds per task (mean over finished episodes)")
    ax_t.set_title("Per task: wall, LLM and routing time", fontsize=11)
    ax_t.grid(axis="x", color="#e4e4e4", linewidth=0.8)
    ax_t.set_axisbelow(True)
    ax_t.spines[["top", "right"]].set_visible(False)

    drawn = 0
    for m, color in zip(run.methods, colors):
        stats = round_stats(m)
        if stats:
            ax_r.plot(
                [s.round + 1 for s in stats],
                [s.round_s for s in stats],
                marker="o",
                color=color,
                label=m.name,
            )
            drawn += 1
    ax_r.set_xlabel("round")
    ax_r.xaxis.get_major_locator().set_params(integer=True)
    ax_r.set_ylabel("seconds (mean)")
    ax_r.xaxis.get_major_locator().set_params(integer=True)
    ax_r.set_ylim(bottom=0)
    ax_r.set_title("Round time", fontsize=11)
    if drawn:
        ax_r.legend(fontsize=8, frameon=False)
    else:
        ax_r.text(0.5, 0.5, "no rounds traced", ha="center", va="center", transform=ax_r.transAxes)
    _style(ax_r)
    return fig
