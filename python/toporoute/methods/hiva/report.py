"""The HiVA parts of the report: each task's variant (the paper's Table 2 ablations the run made, and the
environment that judged it) and its graph growth over its iterations (a table, a growth chart and one small
drawing of the graph per iteration). The oracle label of a run that fed back hidden tests is
:func:`toporoute.trace.badges.oracle_badge`.

Static HTML and inline SVG built here, every model-written string escaped (the names are the method's own, but
nothing is trusted); no script.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import Any

from ...trace.schema import EpisodeRecord, RoundRecord

__all__ = ["growth_section", "is_hiva"]

_DX, _DY, _R = 78, 34, 9  # level spacing, row spacing, node radius of the small drawings


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def is_hiva(rounds: Sequence[RoundRecord]) -> bool:
    return any(isinstance(r.extra.get("hiva"), dict) for r in rounds)


def _graph(block: Mapping[str, Any], key: str) -> tuple[list[str], list[tuple[str, str]]]:
    g = block.get(key)
    if not isinstance(g, Mapping):
        return [], []
    nodes = [str(n.get("name", "")) for n in g.get("nodes", []) if isinstance(n, Mapping)]
    edges = [
        (str(e.get("src", "")), str(e.get("dst", "")))
        for e in g.get("edges", [])
        if isinstance(e, Mapping) and e.get("src") in nodes and e.get("dst") in nodes
    ]
    return nodes, edges


def _levels(nodes: list[str], edges: list[tuple[str, str]]) -> dict[str, int]:
    """Longest-path level from the nodes without in-edges (cycles, which a trace should not hold, are cut)."""
    level = {n: 0 for n in nodes}
    for _ in range(len(nodes)):
        changed = False
        for s, d in edges:
            if level[d] < level[s] + 1 <= len(nodes):
                level[d] = level[s] + 1
                changed = True
        if not changed:
            break
    return level


def _drawing(
    title: str, nodes: list[str], edges: list[tuple[str, str]], hot: set[tuple[str, str]], new: set[str]
) -> str:
    level = _levels(nodes, edges)
    columns: dict[int, list[str]] = {}
    for n in nodes:
        columns.setdefault(level[n], []).append(n)
    rows = max((len(c) for c in columns.values()), default=1)
    width = (max(columns, default=0) + 1) * _DX + 24
    height = rows * _DY + 30
    pos = {
        n: (20 + lv * _DX, 22 + k * _DY + (rows - len(col)) * _DY / 2)
        for lv, col in columns.items()
        for k, n in enumerate(col)
    }
    head = (
        f'<figure class="hiva-step"><svg width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
        f'role="img" aria-label="{_e(title)}">'
    )
    parts = [head]
    for s, d in edges:
        (x1, y1), (x2, y2) = pos[s], pos[d]
        on = (s, d) in hot
        parts.append(
            f'<line x1="{x1 + _R:.0f}" y1="{y1:.0f}" x2="{x2 - _R - 2:.0f}" y2="{y2:.0f}" '
            f'stroke="{"#2f5d9c" if on else "#b8c2cc"}" stroke-width="{2 if on else 1}" '
            'marker-end="url(#tr-arrow)"><title>'
            + _e(f"{s} → {d}" + (" (executed)" if on else ""))
            + "</title></line>"
        )
    for n in nodes:
        x, y = pos[n]
        fill = "#fdecd9" if n in new else "#eef2f7"
        parts.append(
            f'<circle cx="{x:.0f}" cy="{y:.0f}" r="{_R}" fill="{fill}" stroke="#3d4f6b"><title>{_e(n)}</title>'
            f'</circle><text x="{x:.0f}" y="{y + _R + 10:.0f}" font-size="9" text-anchor="middle">'
            f"{_e(n.replace('agent_', 'a').replace('aggregator', 'agg').replace('source', 'src'))}</text>"
        )
    parts.append(f"</svg><figcaption>{_e(title)}</figcaption></figure>")
    return "".join(parts)


def _chart(counts: list[tuple[int, int]]) -> str:
    """Nodes (solid) and edges (dashed) after each iteration, as a small line chart."""
    if not counts:
        return ""
    w, h, pad = 260, 90, 22
    top = max(max(n, e) for n, e in counts) or 1
    step = (w - 2 * pad) / max(1, len(counts) - 1)

    def line(values: list[int], dash: str) -> str:
        pts = " ".join(
            f"{pad + i * step:.0f},{h - pad - v / top * (h - 2 * pad):.0f}" for i, v in enumerate(values)
        )
        return f'<polyline points="{pts}" fill="none" stroke="#2f5d9c" stroke-width="2"{dash}></polyline>'

    return (
        f'<svg class="hiva-growth" width="{w}" height="{h}" viewBox="0 0 {w} {h}" role="img" '
        'aria-label="nodes and edges per iteration">'
        f'<line x1="{pad}" y1="{h - pad}" x2="{w - pad}" y2="{h - pad}" stroke="#b8c2cc"></line>'
        + line([n for n, _ in counts], "")
        + line([e for _, e in counts], ' stroke-dasharray="4 3"')
        + f'<text x="{pad}" y="12" font-size="10">max {top}; nodes solid, edges dashed</text>'
        f'<text x="{w - pad}" y="{h - 6}" font-size="10" text-anchor="end">start to iteration {len(counts) - 2}</text></svg>'
    )


_ENVIRONMENTS = {
    "public-tests": "the visible examples (programmatic)",
    "self-critique": "self-critique (the paper's w/o Env)",
    "hidden-tests": "the hidden tests (oracle)",
    "gold-answer": "the gold answer (oracle)",
}


def _variant(blocks: Sequence[tuple[int, Mapping[str, Any]]]) -> str:
    """The line naming the run's variant: its ablations (the first iteration's record of them) and the
    environment of its iterations."""
    raw = blocks[0][1].get("ablations")
    ablations = [a for a in raw if isinstance(a, str)] if isinstance(raw, list) else []
    sources: list[str] = []
    for _, b in blocks:
        env = b.get("environment")
        src = str(env.get("source", "")) if isinstance(env, Mapping) else ""
        if src and src not in sources:
            sources.append(src)
    names = ", ".join(_ENVIRONMENTS.get(src, src) for src in sources) or "unknown"
    variant = ", ".join(ablations) if ablations else "full HiVA (no ablation)"
    return f'<p class="hiva-variant"><b>Variant:</b> {_e(variant)}; <b>environment:</b> {_e(names)}</p>'


def _routing(b: Mapping[str, Any]) -> str:
    r = b.get("routing")
    if not isinstance(r, Mapping) or not r:
        return "—"
    text = f"{r.get('over_k', 0)} / {r.get('decisions', 0)}"
    if r.get("dropped"):
        text += f" ({r['dropped']} dropped)"
    return text


def growth_section(rounds: Sequence[RoundRecord], record: EpisodeRecord | None = None) -> str:
    """The variant of a HiVA episode and its graph's growth over the iterations ("" when the rounds hold no
    HiVA block)."""
    blocks = [(r.round, r.extra["hiva"]) for r in rounds if isinstance(r.extra.get("hiva"), Mapping)]
    if not blocks:
        return ""
    rows = []
    drawings = []
    counts: list[tuple[int, int]] = []
    seen: set[str] = set()
    first_nodes, first_edges = _graph(blocks[0][1], "graph")
    seen.update(first_nodes)
    drawings.append(_drawing("start", first_nodes, first_edges, set(), set()))
    counts.append((len(first_nodes), len(first_edges)))
    for rnd, b in blocks:
        nodes, edges = _graph(b, "graph_after")
        executed = {(str(s), str(d)) for s, d in b.get("executed_edges", []) if isinstance(s, str)}
        before_nodes, _ = _graph(b, "graph")
        new = {n for n in nodes if n not in seen}
        seen.update(nodes)
        edits = b.get("edits") if isinstance(b.get("edits"), Mapping) else {}
        applied = [" ".join(str(x) for x in e if x) for e in edits.get("applied", []) if isinstance(e, list)]
        rejected = [
            " ".join(str(x) for x in e if x) for e in edits.get("rejected", []) if isinstance(e, list)
        ]
        repair = b.get("repair") if isinstance(b.get("repair"), Mapping) else {}
        pruned = list(repair.get("pruned_nodes", [])) + [
            "→".join(map(str, e)) for e in repair.get("pruned_edges", []) if isinstance(e, list)
        ]
        env = b.get("environment") if isinstance(b.get("environment"), Mapping) else {}
        errors = b.get("errors") if isinstance(b.get("errors"), list) else []
        counts.append((len(nodes), len(edges)))
        rows.append(
            f"<tr><td>{rnd}</td><td>{len(before_nodes)} → {len(nodes)}</td><td>{len(edges)}</td>"
            f"<td>{len(b.get('executed', []))} / {len(executed)}</td><td>{_e(_routing(b))}</td>"
            f"<td>{_e('; '.join(applied)) or '—'}</td><td>{_e('; '.join(rejected)) or '—'}</td>"
            f"<td>{_e(', '.join(pruned)) or '—'}</td>"
            f"<td>{_e(env.get('source', ''))} {_e(env.get('signal', ''))}</td>"
            f"<td>{'skipped' if str(b.get('backward', 'ran')).startswith('skipped') else 'ran'}</td>"
            f"<td>{len(errors)}</td></tr>"
        )
        drawings.append(_drawing(f"after iteration {rnd}", nodes, edges, executed, new))
    return (
        '<div class="hiva-growth-block"><h5>HiVA: graph growth over the iterations</h5>'
        + _variant(blocks)
        + '<table class="hiva-table"><thead><tr><th>Iteration</th><th>Nodes</th><th>Edges after</th>'
        "<th>Executed nodes / edges</th><th>Bandit chose (routings with more candidates than k / all)</th>"
        "<th>Edits applied</th><th>Edits rejected</th><th>Repair pruned</th>"
        "<th>Environment signal</th><th>Backward and updates</th><th>Errors</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
        + _chart(counts)
        + '<div class="hiva-steps">'
        + "".join(drawings)
        + '</div><p class="note">Each drawing is the graph after that iteration\'s edits and repair; blue edges '
        "were executed in the iteration (the bandit's routes), orange nodes are new. A per-instance task's last "
        "iteration skips its backward pass and updates (they would change nothing).</p></div>"
    )
