"""``toporoute report RUN_DIR``: one self-contained HTML page (and PNG charts) for a run directory.

The page is static HTML for the header, the tables and the charts (PNG data URIs), plus a JSON blob of every
round record that the inline script draws into one SVG graph per round. Nothing is fetched: no network, no CDN.

All text that came from a model (messages, descriptors, goals, answers, tracebacks) is untrusted. The Python side
HTML-escapes it; the JSON blob escapes ``<``, ``>`` and ``&`` so nothing in it can end its ``<script>`` element;
the script inserts text with ``textContent`` only. A Content-Security-Policy that allows only the page's own
script (by hash) backs this up.
"""

from __future__ import annotations

import base64
import datetime
import hashlib
import html
import json
import math
import os
import string
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from .._atomic import write_bytes_atomic
from ..errors import InvalidArgumentError
from . import _hiva, _tacomas
from ._badges import oracle_badge
from ._figures import FigureImage, render_figures
from .reader import (
    EpisodeRow,
    MethodRun,
    RunData,
    episode_rows,
    label,
    load_run,
    summarize,
    wall_from_summary,
)
from .schema import EpisodeFile, EpisodeRecord, RoundRecord

__all__ = ["ReportPaths", "build_html", "write_report"]

# Longest model string kept in the page; the trace files hold the full text. A run too big for the page budget
# gets shorter excerpts (the next limit that fits), and the page says which limit it used.
EXCERPT_CHARS = 2000
_EXCERPT_FALLBACKS = (1000, 500, 250, 120)
BLOB_BUDGET_BYTES = 32_000_000
_TRACEBACK_CHARS = 4000
_START_KEYS = ("started", "start_time", "started_at", "start", "date", "time", "created")


@dataclass(frozen=True)
class ReportPaths:
    """What :func:`write_report` wrote."""

    html: Path
    figures: list[Path]


def write_report(run_dir: str | os.PathLike[str], out: str | os.PathLike[str] | None = None) -> ReportPaths:
    """Writes the HTML report of a run directory and its charts as PNG files.

    Parameters
    ----------
    run_dir : path
        A run directory (``RUN_DIR/<method>/run.json``) or one method folder.
    out : path, optional
        The HTML file to write; an existing folder means ``out/report.html``. Default ``run_dir/report.html``.
        The PNG files go to ``figures/`` next to it.

    Returns
    -------
    ReportPaths
        The page and the PNG files (none when matplotlib is not installed; the page says so).

    Raises
    ------
    InvalidArgumentError
        ``run_dir`` is missing or holds no ``run.json``; ``out`` names something that is not a file.
    """
    run = load_run(run_dir)
    target = run.root / "report.html" if out is None else Path(out)
    if target.is_dir():
        target = target / "report.html"
    elif target.exists() and not target.is_file():
        raise InvalidArgumentError(f"out {str(target)!r} exists and is not a file", "out")
    summaries = [summarize(m) for m in run.methods]
    images: list[FigureImage] = []
    figure_note = None
    try:
        import matplotlib  # noqa: F401 - only whether it is there; _figures imports what it draws with
    except ImportError:
        figure_note = "Charts need matplotlib: pip install 'toporoute[report]' (then run the report again)."
    else:
        images = render_figures(run, summaries)

    written = []
    for image in images:
        path = target.parent / "figures" / f"{image.name}.png"
        write_bytes_atomic(path, image.png)
        written.append(path)
    figures = [(image.caption, image.png) for image in images]
    page = build_html(run, summaries=summaries, figures=figures, figure_note=figure_note)
    write_bytes_atomic(target, page.encode("utf-8"))
    return ReportPaths(html=target, figures=written)


def build_html(
    run: RunData,
    *,
    summaries: list[dict[str, Any]] | None = None,
    figures: Sequence[tuple[str, bytes]] = (),
    figure_note: str | None = None,
) -> str:
    """The report page as a string.

    Parameters
    ----------
    run : RunData
    summaries : list of dict, optional
        :func:`~toporoute.trace.reader.summarize` per method (computed when not given).
    figures : list of (caption, PNG bytes)
        Charts, embedded as data URIs.
    figure_note : str, optional
        Shown instead of the charts when there are none.

    Returns
    -------
    str
    """
    if summaries is None:
        summaries = [summarize(m) for m in run.methods]
    rows = [episode_rows(m) for m in run.methods]
    js = _template("report.js")
    # the page's only script is allowed by its hash; an injected one would not run even if escaping failed
    if "</script" in js.lower():
        raise RuntimeError("report.js must not contain '</script'")
    script_hash = base64.b64encode(hashlib.sha256(js.encode("utf-8")).digest()).decode("ascii")
    data, limit = _fitted_blob(run, rows)
    title = "toporoute report" + (f": {_values(run, 'tasks')}" if _values(run, "tasks") else "")
    page = string.Template(_template("report.html")).substitute(
        title=_e(title),
        script_hash=script_hash,
        css=_template("report.css"),
        header=_header(run),
        problems=_problems(run),
        comparison=_comparison(run, summaries),
        charts=_charts(figures, figure_note),
        methods="\n".join(_method_section(i, m, r) for i, (m, r) in enumerate(zip(run.methods, rows))),
        data=data,
        excerpt_chars=f"{limit:,}",
        js=js,
    )
    return page


# ---------------------------------------------------------------------------------------------------- sections


def _header(run: RunData) -> str:
    items = [
        ("Task set", _values(run, "tasks")),
        ("Model", _values(run, "model")),
        ("Engine", _values(run, "engine")),
        ("Started", _values(run, "started")),
        ("Seed", _values(run, "seed")),
        ("Versions", _values(run, "versions")),
        ("Methods", ", ".join(m.name for m in run.methods)),
        ("Run directory", str(run.root)),
    ]
    cells = "".join(f"<div><dt>{_e(k)}</dt><dd>{_e(v) or '—'}</dd></div>" for k, v in items)
    return f'<dl class="meta">{cells}</dl>'


def _values(run: RunData, key: str) -> str:
    """One run.json field across methods: the value when all agree, else each value with its methods."""
    by_value: dict[str, list[str]] = {}
    for m in run.methods:
        by_value.setdefault(_config_text(m.config, key), []).append(m.name)
    by_value.pop("", None)
    if len(by_value) <= 1:
        return next(iter(by_value), "")
    return "; ".join(f"{v} ({', '.join(names)})" for v, names in by_value.items())


def _config_text(config: dict[str, Any], key: str) -> str:
    if key == "started":
        value = next((config[k] for k in _START_KEYS if config.get(k) is not None), None)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return datetime.datetime.fromtimestamp(value, datetime.timezone.utc).strftime(
                "%Y-%m-%d %H:%M:%S UTC"
            )
        return label(value)
    value = config.get(key)
    if key == "tasks" and isinstance(config.get("task_ids"), list):
        return f"{label(value)} ({len(config['task_ids'])} tasks)"
    if key == "versions" and isinstance(value, dict):
        return " · ".join(f"{k} {label(v)}" for k, v in value.items())
    return label(value)


def _problems(run: RunData) -> str:
    problems = run.problems
    if not problems:
        return ""
    items = "".join(f"<li>{_e(p)}</li>" for p in problems)
    return (
        '<section class="problems"><h2>Problems reading the run</h2>'
        f"<p>These files were skipped or read in part; everything else is reported.</p><ul>{items}</ul></section>"
    )


def _comparison(run: RunData, summaries: list[dict[str, Any]]) -> str:
    head = (
        "<tr><th>Method</th><th>Episodes</th><th>Accuracy</th><th>Tokens / task</th><th>LLM calls / task</th>"
        "<th>Rounds / task</th><th>Wall time</th><th>LLM time</th><th>Routing time</th><th>Routing share</th></tr>"
    )
    body = []
    footnote = False
    for i, (m, s) in enumerate(zip(run.methods, summaries)):
        episodes = f"{s['episodes']}"
        detail = [f"{s['ok']} ok"] + (
            [f"{s['errors']} error{'s' * (s['errors'] != 1)}"] if s["errors"] else []
        )
        accuracy = f"{100 * s['accuracy']:.1f}% <small>({s['passed']}/{s['ok']})</small>" if s["ok"] else "—"
        wall = _dur(s["wall_s"])
        if not wall_from_summary(m):
            wall += "<sup>*</sup>"
            footnote = True
        tokens_title = (
            f"prompt {s['prompt_tokens_per_task']:,.0f} + completion {s['completion_tokens_per_task']:,.0f}"
        )
        body.append(
            f'<tr><td><a href="#method-{i}">{_e(m.name)}</a></td>'
            f"<td>{episodes} <small>({', '.join(detail)})</small></td>"
            f"<td>{accuracy}</td>"
            f'<td title="{_e(tokens_title)}">{s["tokens_per_task"]:,.0f}</td>'
            f"<td>{s['calls_per_task']:.1f}</td>"
            f"<td>{s['rounds_per_task']:.2f}</td>"
            f"<td>{wall}</td><td>{_dur(s['llm_s'])}</td><td>{_dur(s['routing_s'])}</td>"
            f"<td>{100 * s['routing_share']:.2f}%</td></tr>"
        )
    note = (
        '<p class="note"><sup>*</sup> No summary.json (the run has not finished): wall time is the sum of the '
        "episodes' wall times, an upper bound when episodes ran concurrently.</p>"
        if footnote
        else ""
    )
    return (
        '<table class="comparison"><thead>'
        + head
        + "</thead><tbody>"
        + "".join(body)
        + "</tbody></table>"
        + '<p class="note">Per-task means are over finished (ok) episodes; LLM and routing time are summed over '
        "episodes; routing share is the share of the episodes' own time spent routing (routing time / summed "
        "episode wall time).</p>" + note
    )


def _charts(figures: Sequence[tuple[str, bytes]], note: str | None) -> str:
    if not figures:
        return f'<p class="note">{_e(note or "No charts.")}</p>'
    items = []
    for caption, png in figures:
        uri = "data:image/png;base64," + base64.b64encode(png).decode("ascii")
        items.append(
            f'<figure><img src="{uri}" alt="{_e(caption)}"><figcaption>{_e(caption)}</figcaption></figure>'
        )
    return '<div class="charts">' + "".join(items) + "</div>"


def _method_section(i: int, m: MethodRun, rows: list[EpisodeRow]) -> str:
    params = m.config.get("params")
    params_text = (
        " · ".join(f"{k}={label(v)}" for k, v in params.items())
        if isinstance(params, dict)
        else label(params)
    )
    out = [
        f'<section class="method" id="method-{i}"><h2>{_e(m.name)}'
        + oracle_badge(params)
        + (f' <span class="params">{_e(params_text)}</span>' if params_text else "")
        + "</h2>"
    ]
    if not rows:
        out.append('<p class="note">No episodes recorded yet.</p></section>')
        return "".join(out)
    out.append(
        '<div class="toolbar">'
        f'<button type="button" class="expand-all" data-method="{i}">Expand all</button> '
        f'<button type="button" class="collapse-all" data-method="{i}">Collapse all</button>'
        "<span>Click an episode to show its rounds.</span></div>"
    )
    out.append(
        '<table class="episodes"><thead><tr><th>Episode</th><th>Task</th><th>Result</th><th>Rounds</th>'
        "<th>Halted</th><th>Tokens</th><th>Calls</th><th>Wall s</th></tr></thead><tbody>"
    )
    by_id = {e.episode: e for e in m.episodes}
    open_first = i == 0
    for j, row in enumerate(rows):
        view = f"ev-{i}-{j}"
        has_rounds = bool(m.traces.get(row.episode))
        is_open = open_first and has_rounds
        open_first = open_first and not is_open
        result, result_class = _result(row)
        out.append(
            f'<tr class="episode-row {result_class}" data-view="{view}">'
            f'<td><a class="toggle" href="#{view}" aria-controls="{view}" '
            f'aria-expanded="{str(is_open).lower()}">{_e(row.episode)}</a></td>'
            f"<td>{_e(row.task)}</td><td>{result}</td>"
            f"<td>{_opt(row.rounds)}</td><td>{_yes_no(row.halted)}</td>"
            f"<td>{_opt(row.tokens, '{:,}')}</td><td>{_opt(row.calls)}</td>"
            f"<td>{_opt(row.wall_s, '{:.1f}')}</td></tr>"
        )
        out.append(
            f'<tr class="episode-view" id="{view}"{"" if is_open else " hidden"}><td colspan="8">'
            + _episode_detail(by_id.get(row.episode), row)
            + _hiva.growth_section(m.traces.get(row.episode, []))
            + _tacomas.evolution_section(m.traces.get(row.episode, []), _record(by_id.get(row.episode)))
            + f'<div class="rounds" data-method="{i}" data-episode="{j}"></div></td></tr>'
        )
    out.append("</tbody></table></section>")
    return "".join(out)


def _record(episode: EpisodeFile | None) -> EpisodeRecord | None:
    return episode.record if episode is not None else None


def _result(row: EpisodeRow) -> tuple[str, str]:
    if row.status == "error":
        return '<span class="badge bad">error</span>', "status-error"
    if row.status == "partial":
        return '<span class="badge">in progress</span>', "status-partial"
    # the scorer's own status only when it says more than passed/failed (e.g. "timeout", "syntax_error")
    shown = row.score_status and row.score_status not in ("passed", "failed")
    status = f" <small>{_e(row.score_status)}</small>" if shown else ""
    if row.passed:
        return f'<span class="badge good">passed</span>{status}', "status-ok passed"
    return f'<span class="badge warn">failed</span>{status}', "status-ok failed"


def _episode_detail(episode: EpisodeFile | None, row: EpisodeRow) -> str:
    parts = []
    if row.status == "partial":
        parts.append(
            '<p class="note">No episode record yet: the run is still going or stopped mid-episode.</p>'
        )
    if row.error:
        text = row.error if len(row.error) <= _TRACEBACK_CHARS else "…" + row.error[-_TRACEBACK_CHARS:]
        parts.append(f'<p><b>Error</b></p><pre class="error">{_e(text)}</pre>')
    record = episode.record if episode is not None else None
    if record is not None:
        score = record.score
        facts = [
            f"kind {label(record.kind)}" if record.kind else "",
            f"score: {label(score.get('status'))}"
            + (f" ({label(score.get('detail'))})" if score.get("detail") else ""),
            f"LLM {_opt(row.llm_s, '{:.2f}')} s · routing {_opt(row.routing_s, '{:.3f}')} s",
        ]
        parts.append(f'<p class="facts">{_e(" · ".join(f for f in facts if f))}</p>')
        answer = record.answer
        if answer:
            parts.append(
                f'<details class="answer"><summary>Final answer</summary><pre>{_e(_cut(answer))}</pre></details>'
            )
    return "".join(parts)


# -------------------------------------------------------------------------------------------------- data blob


def _fitted_blob(run: RunData, rows: list[list[EpisodeRow]]) -> tuple[str, int]:
    """The JSON blob for the page and the excerpt limit it used: the longest that fits the budget."""
    for limit in (EXCERPT_CHARS, *_EXCERPT_FALLBACKS):
        text = _json_for_script(_blob(run, rows, limit))
        if len(text.encode("utf-8")) <= BLOB_BUDGET_BYTES:
            break
    return text, limit


def _blob(run: RunData, rows: list[list[EpisodeRow]], limit: int) -> dict[str, Any]:
    methods = []
    for m, method_rows in zip(run.methods, rows):
        episodes = []
        for row in method_rows:
            trace = m.traces.get(row.episode, [])
            episodes.append({"id": row.episode, "rounds": [_slim_round(rec, limit) for rec in trace]})
        methods.append({"name": m.name, "episodes": episodes})
    return {"methods": methods}


def _slim_round(rec: RoundRecord, limit: int) -> dict[str, Any]:
    # the score matrix is N x N per round and the edges carry the scores that matter: keep only whether it exists
    keep = (
        "round", "goal", "agents", "roles", "descriptors", "edges", "order", "levels", "removed", "is_dag",
        "inbox", "messages", "usage", "manager", "stats", "timing", "yaml", "check", "verdict", "reward",
    )  # fmt: skip
    full = rec.to_json()
    slim = {k: full.get(k) for k in keep}
    slim["scored"] = rec.graph.scores is not None
    cleaned: dict[str, Any] = _clean(slim, limit)
    return cleaned


def _clean(value: Any, limit: int) -> Any:
    """JSON-safe and bounded: strings cut to ``limit`` characters, non-finite floats to null."""
    if isinstance(value, str):
        return _cut(value, limit)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v, limit) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v, limit) for v in value]
    return value


def _cut(text: str, limit: int = EXCERPT_CHARS) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f" … [{len(text) - limit:,} more characters in the trace file]"


def _json_for_script(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    # inside <script> only "</script" (and "<!--") matter; escaping every <, > and & is simplest to trust
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# ------------------------------------------------------------------------------------------------------ helpers


def _template(name: str) -> str:
    return (resources.files(__package__) / "templates" / name).read_text(encoding="utf-8")


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _opt(value: Any, fmt: str = "{}") -> str:
    return "—" if value is None else _e(fmt.format(value))


def _yes_no(value: bool | None) -> str:
    return "—" if value is None else ("yes" if value else "no")


def _dur(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} m {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} m"
