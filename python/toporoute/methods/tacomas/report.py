"""The TacoMAS parts of the report: each task's team across its rounds (one small drawing per round, a table of
the round statistics, the judged scores, the agents' tool calls, the coaching and the self-reflections), each
slow step (the meta output, every proposed
operation with its verdict, the applied diff drawn and listed, the topology distance and the time control), and
the LLM calls, tokens and latency per role kind.

It reads the ``tacomas`` block of the round records and of the episode record (the layout is documented in
:mod:`toporoute.trace`). Everything in those blocks is read defensively (a damaged or older
trace shows what it can) and every string is escaped: scores' reasons, coaching, the meta output and the
operations' text are model-written. Static HTML and inline SVG; no script.
"""

from __future__ import annotations

import html
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..._checks import is_finite_number, is_int
from ...trace.badges import oracle_badge
from ...trace.schema import EpisodeRecord, RoundRecord

__all__ = ["CALL_KINDS", "evolution_section", "is_tacomas"]

CALL_KINDS = ("agent", "judge", "coach", "meta", "verifier", "reflect")
"""The role kinds whose calls a TacoMAS round counts (``tacomas.calls``), in table order."""

_DX, _DY, _R = 104, 50, 12  # wave spacing, row spacing, node radius of the small drawings
_TEXT = 2000  # longest model text shown (the trace holds all of it)
_SHORT = 24  # longest label in a drawing

# edge style -> (stroke, dash, width, what it means)
_EDGE_STYLES = {
    "same": ("#3d4f6b", "", 1.4, "same-round message"),
    "lagged": ("#7b4fa0", "5 3", 1.4, "lagged: the previous round's message (inside a cycle)"),
    "removed": ("#c0392b", "2 3", 1.6, "removed by this round's slow step"),
    "added": ("#1e7b45", "", 2.2, "added by an accepted edge_add"),
    "inherited": ("#2f5d9c", "6 2 1 2", 1.6, "wiring of a new node (inherited or parent/sink)"),
    "repaired": ("#8a6d1d", "1 3", 1.8, "added by the repair"),
}


# ------------------------------------------------------------------------------------------ tolerant reading


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _seq(value: Any) -> Sequence[Any]:
    return value if isinstance(value, (list, tuple)) else ()


def _num(value: Any) -> float | None:
    if is_finite_number(value):
        return float(value)
    return None


def _int(value: Any) -> int | None:
    return value if is_int(value) else None


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ("" if value is None else str(value))


def _cut(text: str, limit: int = _TEXT) -> str:
    return (
        text
        if len(text) <= limit
        else text[:limit] + f" … [{_counted(len(text) - limit, 'more character')} in the trace]"
    )


def _counted(n: int, noun: str) -> str:
    """``n`` and the noun, plural unless one: ``"1 agent"``, ``"5 agents"``."""
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _fmt(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def _pairs(value: Any) -> list[tuple[str, str]]:
    out = []
    for item in _seq(value):
        if isinstance(item, (list, tuple)) and len(item) == 2:
            out.append((_text(item[0]), _text(item[1])))
        elif isinstance(item, Mapping) and "src" in item and "dst" in item:
            out.append((_text(item["src"]), _text(item["dst"])))
    return out


def _block(rec: RoundRecord) -> Mapping[str, Any] | None:
    block = rec.extra.get("tacomas")
    return block if isinstance(block, Mapping) else None


def is_tacomas(rounds: Sequence[RoundRecord]) -> bool:
    """Whether any of the rounds holds a TacoMAS block."""
    return any(_block(r) is not None for r in rounds)


@dataclass(frozen=True)
class _Member:
    id: str
    role: str
    sink: bool
    born: int | None
    parent: str | None


def _team(block: Mapping[str, Any]) -> list[_Member]:
    out = []
    seen: set[str] = set()
    for item in _seq(block.get("team")):
        m = _map(item)
        ident = _text(m.get("id"))
        if not ident or ident in seen:
            continue
        seen.add(ident)
        parent = m.get("parent")
        out.append(
            _Member(ident, _text(m.get("role")), m.get("sink") is True, _int(m.get("born")), _opt_id(parent))
        )
    return out


def _opt_id(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _score(block: Mapping[str, Any], ident: str) -> tuple[float | None, str, str]:
    """(score, reason, error) of one agent's judged contribution."""
    s = _map(_map(block.get("scores")).get(ident))
    return _num(s.get("score")), _text(s.get("reason")), _text(s.get("error"))


# -------------------------------------------------------------------------------------------------- drawings


@dataclass(frozen=True)
class _Node:
    id: str
    role: str
    score: float | None
    sink: bool = False
    new: bool = False
    removed: bool = False
    note: str = ""


@dataclass(frozen=True)
class _Arc:
    src: str
    dst: str
    style: str


def _fill(score: float | None) -> str:
    """Red (0) through yellow to green (1); grey when not judged."""
    if score is None:
        return "#e4e7eb"
    s = min(1.0, max(0.0, score))
    return f"hsl({120 * s:.0f}, 62%, 78%)"


def _short(text: str) -> str:
    return text if len(text) <= _SHORT else text[: _SHORT - 1] + "…"


def _columns(nodes: Sequence[_Node], waves: Sequence[Sequence[str]], arcs: Sequence[_Arc]) -> dict[str, int]:
    """Each node's column: its wave; a node in no wave goes one column right of its latest in-neighbour."""
    col: dict[str, int] = {}
    for w, wave in enumerate(waves):
        for ident in wave:
            col.setdefault(ident, w)
    ids = {n.id for n in nodes}
    col = {k: v for k, v in col.items() if k in ids}
    rest = [n.id for n in nodes if n.id not in col]
    for _ in range(len(rest) + 1):  # new nodes fed by other new nodes settle in a few passes
        for ident in rest:
            feeders = [col[a.src] for a in arcs if a.dst == ident and a.src in col and a.src != ident]
            col[ident] = max(feeders) + 1 if feeders else 0
    return col


def _drawing(
    title: str,
    nodes: Sequence[_Node],
    arcs: Sequence[_Arc],
    waves: Sequence[Sequence[str]],
    *,
    css: str,
) -> str:
    col = _columns(nodes, waves, arcs)
    by_col: dict[int, list[_Node]] = {}
    for n in nodes:
        by_col.setdefault(col[n.id], []).append(n)
    rows = max((len(c) for c in by_col.values()), default=1)
    width = (max(by_col, default=0) + 1) * _DX + 30
    height = rows * _DY + 44
    pos: dict[str, tuple[float, float]] = {}
    for c, members in by_col.items():
        for k, n in enumerate(members):
            pos[n.id] = (28 + c * _DX, 30 + k * _DY + (rows - len(members)) * _DY / 2)
    parts = [
        (
            f'<figure class="{css}"><svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
            f'role="img" aria-label="{_e(title)}">'
        )
    ]
    for a in arcs:
        if a.src not in pos or a.dst not in pos or a.src == a.dst:
            continue
        parts.append(_arc(a, pos[a.src], pos[a.dst]))
    for n in nodes:
        parts.append(_node(n, *pos[n.id]))
    parts.append(f"</svg><figcaption>{_e(title)}</figcaption></figure>")
    return "".join(parts)


def _arc(a: _Arc, p1: tuple[float, float], p2: tuple[float, float]) -> str:
    stroke, dash, width, meaning = _EDGE_STYLES.get(a.style, _EDGE_STYLES["same"])
    (x1, y1), (x2, y2) = p1, p2
    dx, dy = x2 - x1, y2 - y1
    length = math.hypot(dx, dy) or 1.0
    # edges that run left to right stay straight; lagged ones (inside a wave) and backward ones bend to the left
    # of their direction, so the two arcs of a pair do not overlap
    bend = min(40.0, 0.2 * length + 10) if a.style == "lagged" or dx <= 1 else 0.0
    cx, cy = (x1 + x2) / 2 - dy / length * bend, (y1 + y2) / 2 + dx / length * bend

    def toward(x: float, y: float, r: float) -> tuple[float, float]:
        ux, uy = cx - x, cy - y
        d = math.hypot(ux, uy) or 1.0
        return x + ux / d * r, y + uy / d * r

    sx, sy = toward(x1, y1, _R)
    ex, ey = toward(x2, y2, _R + 3)
    marker = "tr-arrow-removed" if a.style == "removed" else "tr-arrow"
    dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<path class="taco-edge {a.style}" data-src="{_e(a.src)}" data-dst="{_e(a.dst)}" '
        f'd="M{sx:.1f},{sy:.1f} Q{cx:.1f},{cy:.1f} {ex:.1f},{ey:.1f}" fill="none" stroke="{stroke}" '
        f'stroke-width="{width}"{dash_attr} marker-end="url(#{marker})"><title>'
        + _e(f"{a.src} → {a.dst}: {meaning}")
        + "</title></path>"
    )


def _node(n: _Node, x: float, y: float) -> str:
    classes = " ".join(
        ["taco-node"] + [k for k, on in (("sink", n.sink), ("new", n.new), ("gone", n.removed)) if on]
    )
    stroke, width = ("#d97706", 2.6) if n.new else ("#3d4f6b", 1.2)
    if n.removed:
        stroke = "#c0392b"
    tip = f"{n.id} ({n.role})" if n.role else n.id
    tip += f" · score {_fmt(n.score)}" + (" · sink" if n.sink else "") + (" · new" if n.new else "")
    tip += " · removed by the slow step" if n.removed else ""
    tip += f"\n{n.note}" if n.note else ""
    out = [f'<g class="{classes}" data-id="{_e(n.id)}"><title>{_e(_cut(tip, 600))}</title>']
    if n.sink:
        out.append(
            f'<circle cx="{x:.0f}" cy="{y:.0f}" r="{_R + 4}" fill="none" stroke="#1f2933" stroke-width="1.5"></circle>'
        )
    out.append(
        f'<circle cx="{x:.0f}" cy="{y:.0f}" r="{_R}" fill="{_fill(n.score)}" stroke="{stroke}" '
        f'stroke-width="{width}"></circle>'
    )
    out.append(
        f'<text x="{x:.0f}" y="{y + 3:.0f}" font-size="8.5" text-anchor="middle">'
        f"{_e(_fmt(n.score, 1) if n.score is not None else '·')}</text>"
    )
    if n.removed:
        r = _R - 2
        out.append(
            f'<path d="M{x - r:.0f},{y - r:.0f} L{x + r:.0f},{y + r:.0f} M{x - r:.0f},{y + r:.0f} '
            f'L{x + r:.0f},{y - r:.0f}" stroke="#c0392b" stroke-width="2"></path>'
        )
    label = _short(n.id)
    base = n.id.split("#")[0]
    out.append(
        f'<text x="{x:.0f}" y="{y + _R + 11:.0f}" font-size="9.5" text-anchor="middle">{_e(label)}</text>'
    )
    if n.role and n.role != base:
        out.append(
            f'<text x="{x:.0f}" y="{y + _R + 21:.0f}" font-size="8" fill="#66727f" text-anchor="middle">'
            f"{_e(_short(n.role))}</text>"
        )
    if n.sink:
        out.append(
            f'<text x="{x:.0f}" y="{y - _R - 7:.0f}" font-size="8" font-weight="700" text-anchor="middle">sink</text>'
        )
    out.append("</g>")
    return "".join(out)


def _round_drawing(rec: RoundRecord, block: Mapping[str, Any], previous: set[str] | None) -> str:
    team = _team(block)
    slow = _map(block.get("slow"))
    diff = _map(slow.get("diff"))
    gone = {_text(x) for x in _seq(diff.get("nodes_removed"))}
    gone_edges = set(_pairs(diff.get("edges_removed")))
    nodes = []
    for m in team:
        score, reason, error = _score(block, m.id)
        # new: not in the previous drawn round (``born`` is the round of the slow step that made it)
        new = previous is not None and m.id not in previous
        note = f"error: {error}" if error else reason
        nodes.append(_Node(m.id, m.role, score, m.sink, new, m.id in gone, _cut(note, 300)))
    arcs = []
    for item in _seq(block.get("edges")):
        e = _map(item)
        src, dst = _text(e.get("src")), _text(e.get("dst"))
        if (src, dst) in gone_edges or src in gone or dst in gone:
            style = "removed"
        else:
            style = "lagged" if e.get("lagged") is True else "same"
        arcs.append(_Arc(src, dst, style))
    waves = [[_text(x) for x in _seq(w)] for w in _seq(block.get("waves"))]
    return _drawing(f"round {rec.round}", nodes, arcs, waves, css="taco-step")


def _diff_drawing(rnd: int, block: Mapping[str, Any], slow: Mapping[str, Any]) -> str:
    """The team before the slow step with its diff applied on top: what goes in red, what comes in colour."""
    team = _team(block)
    diff = _map(slow.get("diff"))
    gone = {_text(x) for x in _seq(diff.get("nodes_removed"))}
    born = [_text(x) for x in _seq(diff.get("nodes_added"))]
    made: dict[str, tuple[str, str]] = {}  # newborn -> (its role, the operation that made it)
    for item in _seq(slow.get("ops")):
        op = _map(item)
        new = _opt_id(op.get("new"))
        if new is not None:
            made[new] = (_text(op.get("role")), _text(op.get("op")))
    nodes = [_Node(m.id, m.role, _score(block, m.id)[0], m.sink, removed=m.id in gone) for m in team]
    for ident in born:
        if ident not in {m.id for m in team}:
            role, how = made.get(ident, ("", ""))
            nodes.append(_Node(ident, role, None, new=True, note=f"born by {how or 'the slow step'}"))
    removed = set(_pairs(diff.get("edges_removed")))
    arcs: list[_Arc] = []
    drawn: set[tuple[str, str]] = set()
    for style, pairs in (
        ("added", _pairs(diff.get("edges_added"))),
        ("inherited", _pairs(diff.get("inherited"))),
        ("repaired", _pairs(diff.get("repaired"))),
        ("removed", sorted(removed)),
    ):
        for pair in pairs:
            if pair not in drawn:
                drawn.add(pair)
                arcs.append(_Arc(*pair, style))
    for item in _seq(block.get("edges")):
        e = _map(item)
        pair = (_text(e.get("src")), _text(e.get("dst")))
        if pair in drawn:
            continue
        drawn.add(pair)
        gone_edge = pair[0] in gone or pair[1] in gone
        arcs.append(
            _Arc(*pair, "removed" if gone_edge else ("lagged" if e.get("lagged") is True else "same"))
        )
    waves = [[_text(x) for x in _seq(w)] for w in _seq(block.get("waves"))]
    return _drawing(f"slow step after round {rnd}: the diff", nodes, arcs, waves, css="taco-step taco-diff")


# ------------------------------------------------------------------------------------------------- the tables


def _top_pi(block: Mapping[str, Any], k: int = 3) -> str:
    pi = [(ident, _num(v)) for ident, v in _map(block.get("pi")).items()]
    ranked = sorted(((v, ident) for ident, v in pi if v is not None), key=lambda t: (-t[0], t[1]))[:k]
    return ", ".join(f"{_e(ident)} {v:.2f}" for v, ident in ranked) or "—"


def _round_row(rec: RoundRecord, block: Mapping[str, Any]) -> str:
    team = _team(block)
    coaching = _map(block.get("coaching"))
    coach_errors = sum(1 for c in coaching.values() if _text(_map(c).get("error")))
    coach = (
        _counted(len(coaching), "agent") + (f" ({coach_errors} failed)" if coach_errors else "")
        if coaching
        else "—"
    )
    deaths = ", ".join(_text(x) for x in _seq(block.get("death_candidates")))
    scorer = _text(block.get("scorer"))
    slow = block.get("slow")
    if isinstance(slow, Mapping):
        ops = [_map(o) for o in _seq(slow.get("ops"))]
        took = sum(o.get("accepted") is True for o in ops)
        slow_text = (
            f'<a href="#{_e(_slow_anchor(rec))}">{_e(_text(slow.get("why")) or "slow")}</a>: '
            f"{took}/{len(ops)} accepted, d = {_e(_int(slow.get('distance')) if _int(slow.get('distance')) is not None else '—')}, "
            f"{_e(_text(slow.get('time_control')) or '—')}"
        )
    else:
        slow_text = "—"
    score_title = _text(block.get("scorer_detail"))
    return (
        f"<tr><td>{rec.round}</td><td>{len(team)}</td><td>{_fmt(_num(block.get('mean')))}</td>"
        f"<td>{_fmt(_num(block.get('var')), 3)}</td>"
        f'<td title="{_e(_cut(score_title, 400))}">{_fmt(_num(block.get("answer_score")))} '
        f"<small>{_e(scorer)}</small>{oracle_badge({'scorer': scorer})}</td>"
        f"<td>{_top_pi(block)}</td><td>{_e(deaths) or '—'}</td><td>{_e(coach)}</td><td>{slow_text}</td>"
        f"<td>{len(_errors(block)) or '—'}</td></tr>"
    )


def _errors(block: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """The round's recorded errors and fallbacks as (agent, step, error)."""
    out = []
    for item in _seq(block.get("errors")):
        e = _map(item)
        out.append((_text(e.get("agent")), _text(e.get("step")), _text(e.get("error"))))
    return out


def _slow_anchor(rec: RoundRecord) -> str:
    return f"taco-slow-{rec.episode}-{rec.round}"


def _tool_cell(runs: Any) -> str:
    """An agent's tool calls of a round: the tool, whether the agent replied again after it, its result."""
    items = []
    for run in (_map(r) for r in _seq(runs)):
        head = f"{_e(_text(run.get('tool')) or 'tool')} #{_int(run.get('call')) or '?'}"
        head += " (then revised)" if run.get("revised") is True else " (on the message sent)"
        error = _text(run.get("error"))
        body = (
            f'<span class="bad">{_e(_cut(error, 300))}</span>'
            if error
            else _e(_cut(_text(run.get("output")), 300))
        )
        items.append(f"<b>{head}</b> {body}")
    return "<br>".join(items) or "—"


def _agents_table(block: Mapping[str, Any]) -> str:
    coaching = _map(block.get("coaching"))
    pi = _map(block.get("pi"))
    tools = _map(block.get("tools"))
    reflections = _map(block.get("reflections"))
    rows = []
    for m in _team(block):
        score, reason, error = _score(block, m.id)
        coach = _map(coaching.get(m.id))
        coach_error = _text(coach.get("error"))
        judged = f'<span class="bad">{_e(_cut(error, 400))}</span>' if error else _e(_cut(reason, 600))
        coached = (
            f'<span class="bad">{_e(_cut(coach_error, 400))}</span>'
            if coach_error
            else (
                f"<b>errors</b> {_e(_cut(_text(coach.get('errors')), 600))}<br>"
                f"<b>plan</b> {_e(_cut(_text(coach.get('plan')), 600))}"
                if coach
                else "—"
            )
        )
        rows.append(
            f"<tr><td>{_e(m.id)}{' <small>(sink)</small>' if m.sink else ''}</td><td>{_e(m.role)}</td>"
            f"<td>{_fmt(score)}</td><td>{_fmt(_num(pi.get(m.id)))}</td>"
            f'<td class="text">{judged or "—"}</td><td class="text">{_tool_cell(tools.get(m.id))}</td>'
            f'<td class="text">{coached}</td>'
            f'<td class="text">{_e(_cut(_text(reflections.get(m.id)), 600)) or "—"}</td></tr>'
        )
    return (
        '<table class="taco-agents"><thead><tr><th>Agent</th><th>Role</th><th>c<sub>v</sub></th><th>π</th>'
        "<th>Judge's reason</th><th>Tools</th><th>Coaching</th><th>Self-reflection</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )


def _round_details(rec: RoundRecord, block: Mapping[str, Any]) -> str:
    answer = _text(block.get("answer"))
    detail = _text(block.get("scorer_detail"))
    return (
        f'<details class="taco-round"><summary>Round {rec.round}: scores, coaching and the sink\'s answer'
        "</summary>"
        + _agents_table(block)
        + f"<p><b>Answer score</b> {_fmt(_num(block.get('answer_score')))} by {_e(_text(block.get('scorer')))}"
        + (f": {_e(_cut(detail, 600))}" if detail else "")
        + "</p>"
        + (f"<pre>{_e(_cut(answer))}</pre>" if answer else '<p class="note">No answer this round.</p>')
        + _errors_list(block)
        + "</details>"
    )


def _errors_list(block: Mapping[str, Any]) -> str:
    errors = _errors(block)
    if not errors:
        return ""
    items = "".join(
        f"<li><b>{_e(agent) or '—'}</b> ({_e(step) or '—'}): {_e(_cut(error, 600))}</li>"
        for agent, step, error in errors
    )
    return f'<p><b>Errors and fallbacks</b></p><ul class="taco-errors">{items}</ul>'


def _ops_table(slow: Mapping[str, Any]) -> str:
    rows = []
    for i, item in enumerate(_seq(slow.get("ops"))):
        op = _map(item)
        ok = op.get("accepted") is True
        verdict = (
            '<span class="badge good">accepted</span>' if ok else '<span class="badge warn">rejected</span>'
        )
        rows.append(
            f'<tr class="{"accepted" if ok else "rejected"}"><td>{i}</td><td>{_e(_text(op.get("op")))}</td>'
            f'<td class="text">{_e(_cut(_text(op.get("text")), 400))}</td><td>{verdict}</td>'
            f"<td>{_e(_text(op.get('reason')))}</td><td>{_e(_text(op.get('new')) or '—')}</td></tr>"
        )
    if not rows:
        return '<p class="note">The meta output proposed no operation.</p>'
    return (
        '<table class="taco-ops"><thead><tr><th>#</th><th>Operation</th><th>As proposed</th><th>Verdict</th>'
        "<th>Reason</th><th>New node</th></tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _diff_list(diff: Mapping[str, Any]) -> str:
    items = []
    for key, what in (
        ("nodes_added", "nodes added"),
        ("nodes_removed", "nodes removed"),
        ("edges_added", "edges added"),
        ("edges_removed", "edges removed"),
        ("inherited", "wiring of new nodes"),
        ("repaired", "repair edges"),
    ):
        if key.startswith("nodes"):
            values = [_text(x) for x in _seq(diff.get(key))]
        else:
            values = [f"{s}→{d}" for s, d in _pairs(diff.get(key))]
        items.append(f"<li><b>{what}</b> ({len(values)}): {_e(', '.join(values)) or '—'}</li>")
    return '<ul class="taco-diff-list">' + "".join(items) + "</ul>"


def _feedback_table(slow: Mapping[str, Any]) -> str:
    feedback = _map(slow.get("feedback"))
    if not feedback:
        return ""
    rows = "".join(
        f'<tr><td>{_e(ident)}</td><td class="text">{_e(_cut(_text(_map(f).get("prompt_delta")), 600))}</td>'
        f'<td class="text">{_e(_cut(_text(_map(f).get("memory_seed")), 600))}</td></tr>'
        for ident, f in feedback.items()
    )
    return (
        '<table class="taco-feedback"><thead><tr><th>Agent</th><th>Prompt delta</th><th>Memory seed</th></tr>'
        "</thead><tbody>" + rows + "</tbody></table>"
    )


def _slow_section(rec: RoundRecord, block: Mapping[str, Any], slow: Mapping[str, Any]) -> str:
    ops = [_map(o) for o in _seq(slow.get("ops"))]
    took = sum(o.get("accepted") is True for o in ops)
    distance = _int(slow.get("distance"))
    meta_error = _text(slow.get("meta_error"))
    rationale = _text(slow.get("rationale"))
    raw = _text(slow.get("meta_raw"))
    control = _e(_text(slow.get("time_control")) or "—")
    head = (
        f"Slow step after round {rec.round} ({_e(_text(slow.get('why')) or '—')}): {took} of "
        f"{_counted(len(ops), 'operation')} accepted · "
        f"topology distance {distance if distance is not None else '—'} · time_control <b>{control}</b>"
    )
    return (
        f'<details class="taco-slow" id="{_e(_slow_anchor(rec))}" open><summary>{head}</summary>'
        + (f'<p class="bad">Meta output error: {_e(_cut(meta_error, 600))}</p>' if meta_error else "")
        + f"<p><b>Rationale</b> {_e(_cut(rationale, 1000)) or '—'}</p>"
        + '<details class="taco-meta-raw"><summary>Meta output as written</summary>'
        + (f"<pre>{_e(_cut(raw))}</pre>" if raw else '<p class="note">empty</p>')
        + "</details>"
        + _ops_table(slow)
        + '<div class="taco-diff-row">'
        + _diff_drawing(rec.round, block, slow)
        + _diff_list(_map(slow.get("diff")))
        + "</div>"
        + _feedback_table(slow)
        + "</details>"
    )


def _calls(rounds: Sequence[tuple[RoundRecord, Mapping[str, Any]]]) -> str:
    totals: dict[str, list[float]] = {}
    for rec, block in rounds:
        calls = block.get("calls")
        if isinstance(calls, Mapping):
            items = [(str(kind), _map(c)) for kind, c in calls.items()]
        else:  # a record without the counts: from the usage keys ("judge:<id>", "meta", "scorer:verifier", ...); a team member's
            # own id is an agent call even where it reads like a kind (the template's "verifier" agent)
            items = []
            team = {m.id for m in _team(block)}
            for key, u in rec.usage.agents.items():
                head = key.split(":", 1)[0]
                head = "verifier" if head == "scorer" else head  # "scorer:verifier", the answer scorer's call
                kind = head if head in CALL_KINDS[1:] and key not in team else "agent"
                items.append(
                    (
                        kind,
                        {
                            "calls": 1,
                            "prompt_tokens": u.prompt_tokens,
                            "completion_tokens": u.completion_tokens,
                            "latency_s": u.latency_s,
                        },
                    )
                )
        for kind, c in items:
            t = totals.setdefault(kind, [0.0, 0.0, 0.0, 0.0])
            for i, key in enumerate(("calls", "prompt_tokens", "completion_tokens", "latency_s")):
                t[i] += _num(c.get(key)) or 0.0
    if not totals:
        return ""
    order = [k for k in CALL_KINDS if k in totals] + sorted(k for k in totals if k not in CALL_KINDS)
    rows = "".join(
        f"<tr><td>{_e(k)}</td><td>{totals[k][0]:.0f}</td><td>{totals[k][1]:,.0f}</td><td>{totals[k][2]:,.0f}</td>"
        f"<td>{totals[k][3]:.2f}</td></tr>"
        for k in order
    )
    total = [sum(t[i] for t in totals.values()) for i in range(4)]
    return (
        '<table class="taco-calls"><thead><tr><th>Role kind</th><th>Calls</th><th>Prompt tokens</th>'
        "<th>Completion tokens</th><th>Latency s (summed over calls)</th></tr></thead><tbody>"
        + rows
        + f'<tr class="total"><td>all</td><td>{total[0]:.0f}</td><td>{total[1]:,.0f}</td><td>{total[2]:,.0f}</td>'
        f"<td>{total[3]:.2f}</td></tr></tbody></table>"
    )


def _episode_line(record: EpisodeRecord | None) -> str:
    info = _map(record.extra.get("tacomas")) if record is not None else {}
    if not info:
        return ""
    scorer = _text(info.get("scorer"))
    slow = _int(info.get("slow_steps"))
    rounds = _int(info.get("rounds"))
    final = {
        "sink_last": "the sink's answer of the last round",
        "best_scored": "the best-scored round's answer",
    }
    facts = [
        f"scorer {scorer or '—'}",
        _counted(slow, "slow step") if slow is not None else "— slow steps",
        _counted(rounds, "round") if rounds is not None else "— rounds",
        f"stopped by {_text(info.get('stopped')) or '—'}",
        f"final answer: {final.get(_text(info.get('final')), _text(info.get('final')) or '—')}",
    ]
    badge = oracle_badge({"scorer": "oracle"}) if info.get("oracle") is True or scorer == "oracle" else ""
    return f'<p class="facts">{_e(" · ".join(facts))}{badge}</p>'


def evolution_section(rounds: Sequence[RoundRecord], record: EpisodeRecord | None = None) -> str:
    """The team's evolution over a TacoMAS episode ("" when the rounds hold no TacoMAS block).

    Parameters
    ----------
    rounds : sequence of RoundRecord
        The episode's trace, in round order.
    record : EpisodeRecord, optional
        The episode record (its ``tacomas`` block gives the scorer, the stop reason and the final answer's rule).

    Returns
    -------
    str
        Static HTML with inline SVG.
    """
    blocks = [(r, b) for r in rounds if (b := _block(r)) is not None]
    if not blocks:
        return ""
    drawings = []
    rows = []
    details = []
    slows = []
    previous: set[str] | None = None
    for rec, block in blocks:
        drawings.append(_round_drawing(rec, block, previous))
        previous = {m.id for m in _team(block)}
        rows.append(_round_row(rec, block))
        details.append(_round_details(rec, block))
        slow = block.get("slow")
        if isinstance(slow, Mapping):
            slows.append(_slow_section(rec, block, slow))
    legend = (
        '<p class="note">One drawing per round: columns are the execution waves; a node\'s colour is its judged '
        "contribution (red 0 → green 1, grey not judged) with the score inside; the ringed node is the sink; "
        "orange-ringed nodes are new this round; purple dashed edges are lagged (the previous round's message, "
        "inside a cycle), dark ones carry the same round's message; red crosses and red dotted edges are removed "
        "by that round's slow step. In a slow step's diff, green edges were added, blue dash-dot ones wire new "
        "nodes, brown dotted ones come from the repair.</p>"
    )
    return (
        '<div class="taco-block"><h5>TacoMAS: the team over the rounds</h5>'
        + _episode_line(record)
        + '<div class="taco-steps">'
        + "".join(drawings)
        + "</div>"
        + legend
        + '<table class="taco-table"><thead><tr><th>Round</th><th>Agents</th><th>m<sub>t</sub></th>'
        "<th>Var</th><th>s<sub>t</sub> (scorer)</th><th>Top π</th><th>Death candidates</th><th>Coaching</th>"
        "<th>Slow step</th><th>Errors</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
        + "".join(details)
        + "".join(slows)
        + "<h6>LLM calls per role kind</h6>"
        + (_calls(blocks) or '<p class="note">No calls recorded.</p>')
        + "</div>"
    )
