"""``toporoute report RUN_DIR``: one self-contained HTML page (and PNG charts) for a run directory.

The page is static HTML for the header, the tables and the charts (PNG data URIs), plus a JSON blob of every
round record that the inline script draws into one SVG graph per round. Nothing is fetched: no network, no CDN.

All text that came from a model (messages, descriptors, goals, answers, tracebacks) is untrusted. The page is
rendered from ``templates/report.html`` by Jinja2 with autoescape on: every value is HTML-escaped unless it is
:class:`~markupsafe.Markup`, and only these are: the page's own CSS and script, the JSON blob (which escapes
``<``, ``>`` and ``&`` so nothing in it can end its ``<script>`` element) and the methods' own sections
(:data:`Section`: static HTML whose modules escape the model text in them; HiVA's and TacoMAS's live in their
method packages and reach the report through ``sections``). Model text is the template's data, never its source,
so ``{{ ... }}`` in a reply stays text. The script inserts text with ``textContent`` only. A
Content-Security-Policy that allows only the page's own script (by hash) backs this up.
"""

from __future__ import annotations

import base64
import datetime
import functools
import hashlib
import json
import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

try:
    import jinja2
    from markupsafe import Markup
except ImportError as exc:
    raise ImportError("the HTML report needs Jinja2: pip install 'toporoute[report]'") from exc

from .._atomic import write_bytes_atomic
from .._checks import is_number
from ..errors import InvalidArgumentError
from ._figures import FigureImage, render_figures
from .badges import oracle_badge
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

__all__ = ["ReportPaths", "Section", "build_html", "write_report"]

# Longest model string kept in the page; the trace files hold the full text. A run too big for the page budget
# gets shorter excerpts (the next limit that fits), and the page says which limit it used.
EXCERPT_CHARS = 2000
_EXCERPT_FALLBACKS = (1000, 500, 250, 120)
BLOB_BUDGET_BYTES = 32_000_000
_TRACEBACK_CHARS = 4000
_START_KEYS = ("started", "start_time", "started_at", "start", "date", "time", "created")


Section = Callable[[Sequence[RoundRecord], "EpisodeRecord | None"], str]
"""A method's own part of an episode's view: static HTML (every model-written string escaped) from the
episode's round records and its record; "" when there is nothing to show. A method registers it on its
:class:`~toporoute.methods.options.MethodSpec` (``report``); HiVA draws its graph growth, TacoMAS its team."""


@dataclass(frozen=True)
class ReportPaths:
    """What :func:`write_report` wrote."""

    html: Path
    figures: list[Path]


def write_report(
    run_dir: str | os.PathLike[str],
    out: str | os.PathLike[str] | None = None,
    *,
    sections: Mapping[str, Section] | None = None,
) -> ReportPaths:
    """Writes the HTML report of a run directory and its charts as PNG files.

    Parameters
    ----------
    run_dir : path
        A run directory (``RUN_DIR/<method>/run.json``) or one method folder.
    out : path, optional
        The HTML file to write; an existing folder means ``out/report.html``. Default ``run_dir/report.html``.
        The PNG files go to ``figures/`` next to it.
    sections : mapping of method name to :data:`Section`, optional
        The methods' own parts of their episodes' views (``toporoute report`` passes every registered method's:
        :func:`toporoute.methods.registry.report_sections`).

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
    page = build_html(run, summaries=summaries, figures=figures, figure_note=figure_note, sections=sections)
    write_bytes_atomic(target, page.encode("utf-8"))
    return ReportPaths(html=target, figures=written)


def build_html(
    run: RunData,
    *,
    summaries: list[dict[str, Any]] | None = None,
    figures: Sequence[tuple[str, bytes]] = (),
    figure_note: str | None = None,
    sections: Mapping[str, Section] | None = None,
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
    sections : mapping of method name to :data:`Section`, optional
        See :func:`write_report`.

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
    tasks = _values(run, "tasks")
    page = _environment().get_template("report.html")
    return page.render(
        title="toporoute report" + (f": {tasks}" if tasks else ""),
        script_hash=script_hash,
        css=Markup(_template("report.css")),
        header=_header(run),
        problems=run.problems,
        comparison=[_comparison_row(i, m, s) for i, (m, s) in enumerate(zip(run.methods, summaries))],
        figures=[
            (caption, "data:image/png;base64," + base64.b64encode(png).decode("ascii"))
            for caption, png in figures
        ],
        figure_note=figure_note or "No charts.",
        methods=[
            _method_view(i, m, r, (sections or {}).get(m.name))
            for i, (m, r) in enumerate(zip(run.methods, rows))
        ],
        data=Markup(data),  # escaped for its <script> element by _json_for_script
        excerpt_chars=f"{limit:,}",
        js=Markup(js),  # verbatim: the CSP hash is of these exact characters
    )


@functools.cache
def _environment() -> jinja2.Environment:
    # templates are read through importlib.resources, so the package may sit in a zip
    return jinja2.Environment(
        loader=jinja2.FunctionLoader(_template),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


# ---------------------------------------------------------------------------------------------------- sections
#
# What the template shows, as plain text: the template escapes all of it. Only the HiVA / TacoMAS sections and
# the oracle badges arrive as HTML (Markup); those modules escape the model text in them.


@dataclass(frozen=True)
class _ComparisonRow:
    """One method's line of the comparison table, formatted."""

    index: int
    name: str
    episodes: int
    detail: str  # "3 ok, 1 error"
    accuracy: str  # "66.7%", or "—" without finished episodes
    passed: str  # "2/3" (passed / finished), or ""
    tokens: str
    tokens_title: str
    calls: str
    rounds: str
    wall: str
    wall_summed: bool  # no summary.json: the episodes' wall times summed (the footnote)
    llm: str
    routing: str
    share: str


@dataclass(frozen=True)
class _EpisodeView:
    """One episode's row of a method's table and its detail, formatted."""

    view: str  # the id of its detail row, ev-<method>-<episode>
    episode: str
    task: str
    result: str  # error, partial, passed or failed
    score_status: str  # the scorer's own status where it says more than passed/failed (timeout, ...)
    rounds: str
    halted: str
    tokens: str
    calls: str
    wall: str
    open: bool
    error: str
    facts: str
    answer: str
    sections: Markup  # the HiVA and TacoMAS sections


@dataclass(frozen=True)
class _MethodView:
    index: int
    name: str
    badges: Markup
    params: str
    episodes: list[_EpisodeView]


def _header(run: RunData) -> list[tuple[str, str]]:
    return [
        ("Task set", _values(run, "tasks")),
        ("Model", _values(run, "model")),
        ("Engine", _values(run, "engine")),
        ("Started", _values(run, "started")),
        ("Seed", _values(run, "seed")),
        ("Versions", _values(run, "versions")),
        ("Methods", ", ".join(m.name for m in run.methods)),
        ("Run directory", str(run.root)),
    ]


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
        if is_number(value):
            return datetime.datetime.fromtimestamp(value, datetime.timezone.utc).strftime(
                "%Y-%m-%d %H:%M:%S UTC"
            )
        return label(value)
    value = config.get(key)
    params = config.get("params")
    if key == "seed" and isinstance(params, dict) and params.get("seed") is not None:
        value = params[
            "seed"
        ]  # the harness records it with the method's settings; a top-level one is read too
    if key == "tasks" and isinstance(config.get("task_ids"), list):
        return f"{label(value)} ({_counted(len(config['task_ids']), 'task')})"
    if key == "versions" and isinstance(value, dict):
        return " · ".join(f"{k} {label(v)}" for k, v in value.items())
    return label(value)


def _comparison_row(i: int, m: MethodRun, s: dict[str, Any]) -> _ComparisonRow:
    detail = [f"{s['ok']} ok"] + ([_counted(s["errors"], "error")] if s["errors"] else [])
    return _ComparisonRow(
        index=i,
        name=m.name,
        episodes=s["episodes"],
        detail=", ".join(detail),
        accuracy=_percent(s["accuracy"]) if s["ok"] else "—",
        passed=f"{s['passed']}/{s['ok']}" if s["ok"] else "",
        tokens=f"{s['tokens_per_task']:,.0f}",
        tokens_title=(
            f"prompt {s['prompt_tokens_per_task']:,.0f} + completion {s['completion_tokens_per_task']:,.0f}"
        ),
        calls=f"{s['calls_per_task']:.1f}",
        rounds=f"{s['rounds_per_task']:.2f}",
        wall=_dur(s["wall_s"]),
        wall_summed=not wall_from_summary(m),
        llm=_dur(s["llm_s"]),
        routing=_dur(s["routing_s"]),
        share=f"{100 * s['routing_share']:.2f}%",
    )


def _method_view(i: int, m: MethodRun, rows: list[EpisodeRow], section: Section | None) -> _MethodView:
    params = m.config.get("params")
    params_text = (
        " · ".join(f"{k}={_setting(v)}" for k, v in params.items())
        if isinstance(params, dict)
        else label(params)
    )
    by_id = {e.episode: e for e in m.episodes}
    episodes = []
    open_first = i == 0  # the first method's first episode with rounds starts open
    for j, row in enumerate(rows):
        trace = m.traces.get(row.episode, [])
        is_open = open_first and bool(trace)
        open_first = open_first and not is_open
        record = _record(by_id.get(row.episode))
        episodes.append(
            _EpisodeView(
                view=f"ev-{i}-{j}",
                episode=row.episode,
                task=row.task,
                result=_result(row),
                score_status=_score_status(row),
                rounds=_opt(row.rounds),
                halted=_yes_no(row.halted),
                tokens=_opt(row.tokens, "{:,}"),
                calls=_opt(row.calls),
                wall=_opt(row.wall_s, "{:.1f}"),
                open=is_open,
                error=_error_text(row.error),
                facts=_facts(record, row),
                answer=_cut(record.answer) if record is not None and record.answer else "",
                sections=Markup(section(trace, record) if section is not None else ""),
            )
        )
    return _MethodView(i, m.name, Markup(oracle_badge(params)), params_text, episodes)


def _setting(value: Any) -> str:
    """A setting's value in a method's heading; an empty value says so rather than printing nothing."""
    if value is None:
        return "unset"  # the method's default, or off: what None means is the setting's own
    if isinstance(value, (dict, list, tuple)) and not value:
        return "none"
    if value == "":
        return '""'
    return label(value)


def _record(episode: EpisodeFile | None) -> EpisodeRecord | None:
    return episode.record if episode is not None else None


def _result(row: EpisodeRow) -> str:
    if row.status in ("error", "partial"):
        return row.status
    return "passed" if row.passed else "failed"


def _score_status(row: EpisodeRow) -> str:
    """The scorer's own status, shown only where it says more than passed/failed ("timeout", "syntax_error")."""
    if row.status != "ok" or not row.score_status or row.score_status in ("passed", "failed"):
        return ""
    return row.score_status


def _error_text(error: str | None) -> str:
    if not error:
        return ""
    return error if len(error) <= _TRACEBACK_CHARS else "…" + error[-_TRACEBACK_CHARS:]


def _facts(record: EpisodeRecord | None, row: EpisodeRow) -> str:
    if record is None:
        return ""
    score = record.score
    facts = [
        f"kind {label(record.kind)}" if record.kind else "",
        f"score: {label(score.get('status'))}"
        + (f" ({label(score.get('detail'))})" if score.get("detail") else ""),
        f"LLM {_opt(row.llm_s, '{:.2f}')} s · routing {_opt(row.routing_s, '{:.3f}')} s",
    ]
    return " · ".join(f for f in facts if f)


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
    return text[:limit] + f" … [{_counted(len(text) - limit, 'more character')} in the trace file]"


def _json_for_script(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    # inside <script> only "</script" (and "<!--") matter; escaping every <, > and & is simplest to trust
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


# ------------------------------------------------------------------------------------------------------ helpers


def _template(name: str) -> str:
    return (resources.files(__package__) / "templates" / name).read_text(encoding="utf-8")


def _percent(fraction: float) -> str:
    """A fraction as the report, its charts and ``toporoute run``'s table show it: ``0.5`` -> ``"50.0%"``."""
    return f"{fraction:.1%}"


def _counted(n: int, noun: str) -> str:
    """``n`` and the noun, plural unless one: ``"1 task"``, ``"2 tasks"``, ``"1,200 more characters"``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _opt(value: Any, fmt: str = "{}") -> str:
    return "—" if value is None else fmt.format(value)


def _yes_no(value: bool | None) -> str:
    return "—" if value is None else ("yes" if value else "no")


def _dur(seconds: float) -> str:
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} m {int(seconds % 60):02d} s"
    return f"{int(seconds // 3600)} h {int(seconds % 3600 // 60):02d} m"
