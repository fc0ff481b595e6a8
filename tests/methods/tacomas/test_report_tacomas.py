"""The report's TacoMAS section from synthetic records written through the trace writer: the per-round drawings
(scores, the sink, new nodes, lagged edges, removals), the round table, each slow step (meta output, operations
with their verdicts, the diff, distance and time control), the calls per role kind, the oracle badge, the escaping
of model text, and the page in headless Chromium."""

from __future__ import annotations

import json
import re
from html import escape as html_escape
from pathlib import Path
from typing import Any

import pytest
from _browser import classes, elements, run_chromium

from toporoute.methods.registry import report_sections
from toporoute.methods.tacomas import report as _tacomas
from toporoute.trace.badges import oracle_badge
from toporoute.trace.reader import load_run
from toporoute.trace.report import write_report
from toporoute.trace.schema import CallUsage, EpisodeRecord, Graph, Message, RoundRecord, Timing, Usage
from toporoute.trace.writer import TraceWriter

_MARK = "document.documentElement.setAttribute('data-pwned','1')"
XSS = f"<script>{_MARK}</script>"
XSS_IMG = f'<img id=pwned-img src=x onerror="{_MARK}">'

TEMPLATE = [  # id, role, sink
    ("planner", "planner", False),
    ("searcher", "searcher", False),
    ("calculator", "calculator", False),
    ("verifier", "verifier", False),
    ("reflector", "reflector", True),
]
# round -> (edges as (src, dst, lagged), waves)
ROUND0_EDGES = [
    ("planner", "searcher", False),
    ("planner", "verifier", False),
    ("searcher", "verifier", True),
    ("verifier", "searcher", True),
    ("searcher", "calculator", False),
    ("calculator", "reflector", False),
    ("verifier", "reflector", False),
]
ROUND0_WAVES = [["planner"], ["searcher", "verifier"], ["calculator"], ["reflector"]]
# after round 1's slow step: calculator replaced by researcher#2 (inheriting its edges), planner -> verifier
# removed, planner -> reflector added
_REPLACED = {"calculator": "researcher#2"}
ROUND2_EDGES = [
    (_REPLACED.get(s, s), _REPLACED.get(d, d), lag)
    for s, d, lag in ROUND0_EDGES
    if (s, d) != ("planner", "verifier")
] + [("planner", "reflector", False)]
ROUND2_WAVES = [[_REPLACED.get(i, i) for i in wave] for wave in ROUND0_WAVES]
SCORES = [
    {"planner": 0.5, "searcher": 0.7, "calculator": 0.1, "verifier": 0.3, "reflector": 0.6},
    {"planner": 0.5, "searcher": 0.8, "calculator": 0.15, "verifier": None, "reflector": 0.7},
    {"planner": 0.6, "searcher": 0.9, "researcher#2": 0.7, "verifier": 0.4, "reflector": 0.9},
]


def _team(rnd: int) -> list[dict[str, Any]]:
    team = [
        {"id": i, "slot": k, "gen": 0, "role": role, "goal": f"do the {role} part", "sink": sink, "parent": None,
         "born": 0}
        for k, (i, role, sink) in enumerate(TEMPLATE)
    ]  # fmt: skip
    if rnd == 2:
        team[2] = {
            "id": "researcher#2", "slot": 5, "gen": 1, "role": "researcher", "goal": "find the spec's edge cases",
            "sink": False, "parent": "calculator", "born": 1,
        }  # fmt: skip
    return team


def _slow() -> dict[str, Any]:
    return {
        "why": "cadence",
        "meta_raw": '{"birth_death_pairs": [...], "global_rationale": "' + XSS + '"}',
        "meta_error": None,
        "rationale": "The calculator adds nothing; a researcher should find the edge cases. " + XSS_IMG,
        "time_control": "slow_again",
        "ops": [
            {
                "op": "replace",
                "text": "calculator -> researcher",
                "accepted": True,
                "reason": "ok",
                "new": "researcher#2",
                "role": "researcher",
            },
            {"op": "death", "text": "reflector", "accepted": False, "reason": "sink", "new": None},
            {"op": "edge_add", "text": "planner -> reflector", "accepted": True, "reason": "ok", "new": None},
            {
                "op": "edge_remove",
                "text": "planner -> verifier",
                "accepted": True,
                "reason": "ok",
                "new": None,
            },
            {
                "op": "edge_add",
                "text": f"ghost -> planner {XSS}",
                "accepted": False,
                "reason": "unknown_node",
                "new": None,
            },
        ],
        "diff": {
            "nodes_added": ["researcher#2"],
            "nodes_removed": ["calculator"],
            "edges_added": [["planner", "reflector"]],
            "edges_removed": [["planner", "verifier"]],
            "inherited": [["searcher", "researcher#2"], ["researcher#2", "reflector"]],
            "repaired": [],
        },
        "distance": 7,
        "feedback": {
            "searcher": {"prompt_delta": "cite the docstring", "memory_seed": "examples: f(1) == 2"}
        },
    }


def _calls(rnd: int) -> dict[str, dict[str, Any]]:
    calls = {
        "agent": {"calls": 5, "prompt_tokens": 500, "completion_tokens": 100, "latency_s": 2.5},
        "judge": {"calls": 5, "prompt_tokens": 400, "completion_tokens": 50, "latency_s": 1.0},
        "coach": {"calls": 5, "prompt_tokens": 300, "completion_tokens": 60, "latency_s": 1.0},
        "verifier": {"calls": 1, "prompt_tokens": 80, "completion_tokens": 10, "latency_s": 0.25},
    }
    if rnd == 1:
        calls["meta"] = {"calls": 1, "prompt_tokens": 900, "completion_tokens": 200, "latency_s": 3.0}
    return calls


def _block(rnd: int, scorer: str) -> dict[str, Any]:
    team = _team(rnd)
    edges = ROUND2_EDGES if rnd == 2 else ROUND0_EDGES
    waves = ROUND2_WAVES if rnd == 2 else ROUND0_WAVES
    scores = {
        i: {"score": s, "reason": f"{i} helped {XSS}" if s is not None else "", "error": None}
        if s is not None
        else {"score": None, "reason": "", "error": "judge output was not JSON"}
        for i, s in SCORES[rnd].items()
    }
    present = [s for s in SCORES[rnd].values() if s is not None]
    return {
        "team": team,
        "edges": [{"src": s, "dst": d, "lagged": lag} for s, d, lag in edges],
        "waves": waves,
        "scores": scores,
        "coaching": {}
        if rnd == 2
        else {
            m["id"]: {"errors": f"missed the edge case {XSS}", "plan": "test n = 0 first", "error": None}
            for m in team
        },
        "pi": {i: round(0.1 + 0.05 * k, 3) for k, i in enumerate(SCORES[rnd])},
        "mean": sum(present) / len(present),
        "var": 0.04,
        "death_candidates": ["calculator"] if rnd < 2 else [],
        "answer": f"def f(x):\n    return x + 1  # {XSS}",
        "answer_score": [0.25, 0.5, 0.75][rnd],
        "scorer": scorer,
        "scorer_detail": f"verifier said PARTIAL {XSS_IMG}",
        "slow": _slow() if rnd == 1 else None,
        "calls": _calls(rnd),
        "errors": [
            {"agent": "verifier", "step": "judge", "error": f"no JSON object {XSS} (no score this round)"}
        ]
        if rnd == 1
        else [],
    }


def _record(rnd: int, scorer: str) -> RoundRecord:
    block = _block(rnd, scorer)
    team = block["team"]
    names = [m["id"] for m in team]
    index = {n: i for i, n in enumerate(names)}
    edges = [(index[e["src"]], index[e["dst"]]) for e in block["edges"]]
    levels = [next(w for w, wave in enumerate(block["waves"]) if n in wave) for n in names]
    graph = Graph.build(
        names,
        [m["role"] for m in team],
        edges,
        order=[index[n] for wave in block["waves"] for n in wave],
        levels=levels,
        is_dag=False,
        kinds=["lagged" if e["lagged"] else "same_round" for e in block["edges"]],
    )
    usage = {n: CallUsage(100, 20, 0.5) for n in names}
    usage.update({f"judge:{n}": CallUsage(80, 10, 0.2) for n in names})
    usage["verifier"] = CallUsage(80, 10, 0.25)
    if rnd == 1:
        usage["meta"] = CallUsage(900, 200, 3.0)
    return RoundRecord(
        method="tacomas",
        episode="HumanEval-0",
        task="HumanEval/0",
        round=rnd,
        graph=graph,
        messages={n: Message.of(f"{n} says {XSS}") for n in names},
        usage=Usage(usage),
        timing=Timing(round_s=3.0, llm_s=2.5, routing_s=0.01),
        extra={"tacomas": block},
    )


def make_tacomas_run(root: Path, scorer: str = "verifier") -> Path:
    """A TacoMAS run directory: one HumanEval episode of 3 rounds with one slow step (after round 1)."""
    folder = root / "tacomas"
    (folder / "episodes").mkdir(parents=True)
    params = {"rounds": 3, "k": 2, "tau": 1.0, "coach_every": 1, "budget_edges": 4, "scorer": scorer}
    config = {"method": "tacomas", "params": params, "tasks": "humaneval", "engine": "scripted", "model": "x",
              "seed": 0}  # fmt: skip
    (folder / "run.json").write_text(json.dumps(config), encoding="utf-8")
    with TraceWriter(folder / "traces" / "HumanEval-0.jsonl") as writer:
        for rnd in range(3):
            writer.write(_record(rnd, scorer))
    record = EpisodeRecord(
        "tacomas", "HumanEval/0", "code", 3, False, "def f(x):\n    return x + 1", {"passed": True,
        "status": "passed", "detail": "3/3"}, 8.0, 0.03, 0.1,
        extra={"tacomas": {"scorer": scorer, "oracle": scorer == "oracle", "slow_steps": 1, "stopped": "rounds",
                           "final": "sink_last", "rounds": 3}},
    )  # fmt: skip
    episode = {
        "episode": "HumanEval-0",
        "status": "ok",
        "error": None,
        "wall_s": 9.0,
        "record": record.to_json(),
    }
    (folder / "episodes" / "HumanEval-0.json").write_text(json.dumps(episode), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tacomas_run(tmp_path_factory.mktemp("taco") / "RUN")


@pytest.fixture(scope="module")
def page(run_dir: Path) -> str:
    return write_report(run_dir, sections=report_sections()).html.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def section(run_dir: Path) -> str:
    m = load_run(run_dir).methods[0]
    return _tacomas.evolution_section(m.traces["HumanEval-0"], m.episodes[0].record)


def _tags(html: str) -> list[tuple[str, dict[str, str | None]]]:
    return elements(html)


# -------------------------------------------------------------------------------------------------- reading


def test_reader_keeps_the_tacomas_blocks(run_dir: Path) -> None:
    m = load_run(run_dir).methods[0]
    assert not load_run(run_dir).problems
    rounds = m.traces["HumanEval-0"]
    assert [r.round for r in rounds] == [0, 1, 2]
    assert rounds[1].extra["tacomas"] == _block(1, "verifier")  # written and read back unchanged
    assert [e.kind for e in rounds[0].graph.edges].count("lagged") == 2
    assert m.episodes[0].record is not None and m.episodes[0].record.extra["tacomas"]["slow_steps"] == 1
    assert _tacomas.is_tacomas(rounds) and not _tacomas.is_tacomas([])


def test_a_trace_without_tacomas_blocks_has_no_section() -> None:
    rec = RoundRecord("dytopo", "e", "t", 0, Graph(["a"], ["r"]))
    assert _tacomas.evolution_section([rec]) == ""


# ------------------------------------------------------------------------------------------------- drawings


def test_one_drawing_per_round_and_one_per_slow_step(section: str) -> None:
    figures = [a for t, a in _tags(section) if t == "figure"]
    assert [("taco-diff" in classes(a)) for a in figures] == [False, False, False, True]
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", section)
    assert captions == ["round 0", "round 1", "round 2", "slow step after round 1: the diff"]


def _drawings(section: str) -> list[list[tuple[str, dict[str, str | None]]]]:
    """The start tags of each drawing, in page order."""
    return [_tags(svg) for svg in re.findall(r"<svg .*?</svg>", section, re.DOTALL)]


def test_nodes_carry_their_score_the_sink_and_newness(section: str) -> None:
    r0, _r1, r2, diff = _drawings(section)
    nodes = {a["data-id"]: classes(a) for t, a in r0 if t == "g"}
    assert set(nodes) == {"planner", "searcher", "calculator", "verifier", "reflector"}
    assert [i for i, c in nodes.items() if "sink" in c] == ["reflector"]
    assert not any("new" in c for c in nodes.values())
    # round 2: the replacement is new, the dead calculator is gone
    nodes2 = {a["data-id"]: classes(a) for t, a in r2 if t == "g"}
    assert "calculator" not in nodes2 and "new" in nodes2["researcher#2"]
    assert [i for i, c in nodes2.items() if "new" in c] == ["researcher#2"]
    # colour by the judged score: 0.7 is greener than 0.1; the unjudged verifier of round 1 is grey
    svg1 = re.findall(r"<svg .*?</svg>", section, re.DOTALL)[1]
    fills = dict(re.findall(r'data-id="([^"]+)">.*?<circle[^>]*? r="12" fill="([^"]+)"', svg1, re.DOTALL))
    assert fills["searcher"] == "hsl(96, 62%, 78%)" and fills["calculator"] == "hsl(18, 62%, 78%)"
    assert fills["verifier"] == "#e4e7eb"
    assert ">0.8</text>" in svg1 and ">0.1</text>" in svg1  # scores inside the nodes
    # the diff drawing holds the old team and the newborn
    assert {a["data-id"] for t, a in diff if t == "g"} == {n for n, _, _ in TEMPLATE} | {"researcher#2"}


def test_edges_lagged_same_round_and_removed(section: str) -> None:
    r0, r1, r2, diff = _drawings(section)

    def styles(tags: list) -> dict[tuple[str | None, str | None], str]:
        return {
            (a["data-src"], a["data-dst"]): (classes(a) - {"taco-edge"}).pop()
            for t, a in tags
            if t == "path" and "taco-edge" in classes(a)
        }

    e0 = styles(r0)
    assert e0 == {(s, d): "lagged" if lag else "same" for s, d, lag in ROUND0_EDGES}
    # round 1 shows what its slow step removes: the removed edge and every edge of the dead calculator
    e1 = styles(r1)
    removed = {k for k, v in e1.items() if v == "removed"}
    assert removed == {("planner", "verifier"), ("searcher", "calculator"), ("calculator", "reflector")}
    assert [a["data-id"] for t, a in r1 if t == "g" and "gone" in classes(a)] == ["calculator"]
    assert styles(r2) == {(s, d): "lagged" if lag else "same" for s, d, lag in ROUND2_EDGES}
    # the diff: added, wiring of the newborn, removed, and the unchanged edges
    ed = styles(diff)
    assert ed[("planner", "reflector")] == "added"
    assert ed[("searcher", "researcher#2")] == ed[("researcher#2", "reflector")] == "inherited"
    assert ed[("planner", "verifier")] == "removed" and ed[("searcher", "verifier")] == "lagged"


# --------------------------------------------------------------------------------------------------- tables


def _rows(html: str, css: str) -> list[list[str]]:
    table = re.search(rf'<table class="{css}">.*?<tbody>(.*?)</tbody>', html, re.DOTALL)
    assert table is not None, css
    return [
        [re.sub(r"<[^>]+>", "", c).strip() for c in re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)]
        for row in re.findall(r"<tr[^>]*>(.*?)</tr>", table.group(1), re.DOTALL)
    ]


def test_round_table(section: str) -> None:
    rows = _rows(section, "taco-table")
    assert [r[0] for r in rows] == ["0", "1", "2"]
    assert [r[1] for r in rows] == ["5", "5", "5"]
    assert [r[2] for r in rows] == ["0.44", "0.54", "0.70"]  # m_t
    assert [r[4] for r in rows] == ["0.25 verifier", "0.50 verifier", "0.75 verifier"]  # s_t and its scorer
    # top pi: the last agents of the dict have the largest weights
    assert rows[0][5] == "reflector 0.30, verifier 0.25, calculator 0.20"
    assert [r[6] for r in rows] == ["calculator", "calculator", "—"]
    assert [r[7] for r in rows] == ["5 agents", "5 agents", "—"]
    assert rows[0][8] == "—" and rows[2][8] == "—"
    assert rows[1][8] == "cadence: 3/5 accepted, d = 7, slow_again"
    assert [r[9] for r in rows] == ["—", "1", "—"]  # recorded errors


def test_slow_step_ops_diff_and_feedback(section: str) -> None:
    ops = _rows(section, "taco-ops")
    assert [(r[1], r[3], r[4], r[5]) for r in ops] == [
        ("replace", "accepted", "ok", "researcher#2"),
        ("death", "rejected", "sink", "—"),
        ("edge_add", "accepted", "ok", "—"),
        ("edge_remove", "accepted", "ok", "—"),
        ("edge_add", "rejected", "unknown_node", "—"),
    ]
    assert "3 of 5 operations accepted · topology distance 7 · time_control <b>slow_again</b>" in section
    assert "<b>nodes removed</b> (1): calculator" in section
    assert "<b>wiring of new nodes</b> (2): searcher→researcher#2, researcher#2→reflector" in section
    assert "<b>repair edges</b> (0): —" in section
    assert _rows(section, "taco-feedback") == [["searcher", "cite the docstring", "examples: f(1) == 2"]]
    assert "Meta output as written" in section


def test_scores_reasons_and_coaching_per_round(section: str) -> None:
    tables = re.findall(r'<table class="taco-agents">.*?</table>', section, re.DOTALL)
    assert len(tables) == 3
    r1 = _rows(tables[1], "taco-agents")
    verifier = next(r for r in r1 if r[0] == "verifier")
    assert verifier[2] == "—" and verifier[4] == "judge output was not JSON"  # the judge's recorded error
    searcher = next(r for r in r1 if r[0] == "searcher")
    assert searcher[2] == "0.80" and searcher[4].startswith("searcher helped")
    assert searcher[6].startswith("errors missed the edge case") and "plan test n = 0 first" in searcher[6]
    assert searcher[5] == "—" and searcher[7] == "—"  # no tool call, no self-reflection recorded
    assert all(r[6] == "—" for r in _rows(tables[2], "taco-agents"))  # no coaching in round 2
    errors = re.findall(r'<ul class="taco-errors">(.*?)</ul>', section, re.DOTALL)
    assert len(errors) == 1 and errors[0].startswith("<li><b>verifier</b> (judge): no JSON object &lt;script")


def test_calls_per_role_kind(section: str) -> None:
    rows = {r[0]: r[1:] for r in _rows(section, "taco-calls")}
    assert list(rows) == ["agent", "judge", "coach", "meta", "verifier", "all"]
    assert rows["agent"] == ["15", "1,500", "300", "7.50"]
    assert rows["meta"] == ["1", "900", "200", "3.00"]
    assert rows["all"] == ["49", "4,740", "860", "17.25"]


def test_calls_fall_back_to_the_usage_keys() -> None:
    rec = _record(1, "verifier")
    block = dict(rec.extra["tacomas"])
    del block["calls"]
    bare = RoundRecord(
        rec.method, rec.episode, rec.task, 1, rec.graph, usage=rec.usage, extra={"tacomas": block}
    )
    rows = {r[0]: r[1:] for r in _rows(_tacomas.evolution_section([bare]), "taco-calls")}
    assert rows["agent"][0] == "5" and rows["judge"][0] == "5" and rows["meta"][0] == "1"
    # the usage key "verifier" is the team's verifier agent here (the answer scorer's call shares that key)
    assert "verifier" not in rows


def test_tool_calls_and_self_reflections_per_agent() -> None:
    rec = _record(1, "verifier")
    run = {
        "tool": "run_examples",
        "call": 1,
        "revised": True,
        "ok": True,
        "error": None,
        "output": "1/2 pass",
    }
    failed = {**run, "call": 2, "revised": False, "ok": False, "error": f"timeout {XSS}", "output": ""}
    block = dict(
        rec.extra["tacomas"], tools={"searcher": [run, failed]}, reflections={"searcher": "check n = 0"}
    )
    one = RoundRecord(
        rec.method, rec.episode, rec.task, 1, rec.graph, usage=rec.usage, extra={"tacomas": block}
    )
    html = _tacomas.evolution_section([one])
    searcher = next(r for r in _rows(html, "taco-agents") if r[0] == "searcher")
    assert searcher[5] == (
        "run_examples #1 (then revised) 1/2 pass"
        "run_examples #2 (on the message sent) timeout " + html_escape(XSS)
    )
    assert searcher[7] == "check n = 0" and "<script>" not in html
    assert "<th>Tools</th><th>Coaching</th><th>Self-reflection</th>" in html


def test_damaged_blocks_still_render() -> None:
    rec = RoundRecord(
        "tacomas", "e", "t", 0, Graph([], []), extra={"tacomas": {"team": "x", "slow": {"ops": 3}}}
    )
    html = _tacomas.evolution_section([rec])
    assert "round 0" in html and "The meta output proposed no operation." in html


def test_counts_are_pluralised() -> None:
    rec = _record(1, "verifier")
    block = dict(rec.extra["tacomas"])
    block["coaching"] = {"planner": block["coaching"]["planner"]}
    block["slow"] = dict(block["slow"], ops=block["slow"]["ops"][:1], rationale="r" * 1001)
    one = RoundRecord(
        rec.method, rec.episode, rec.task, 1, rec.graph, usage=rec.usage, extra={"tacomas": block}
    )
    info = {"scorer": "verifier", "slow_steps": 1, "rounds": 1, "stopped": "rounds", "final": "sink_last"}
    record = EpisodeRecord("tacomas", "t", "code", 1, False, "", {}, 1.0, 0.0, 0.0, extra={"tacomas": info})
    html = _tacomas.evolution_section([one], record)
    assert _rows(html, "taco-table")[0][7] == "1 agent"  # coached
    assert "1 of 1 operation accepted" in html
    assert "1 slow step · 1 round · stopped by rounds" in html
    assert "r" * 1000 + " … [1 more character in the trace]" in html
    assert "<th>Latency s (summed over calls)</th>" in html  # a sum over the calls, as its column says


# ---------------------------------------------------------------------------------------- badge and escaping


def test_oracle_badge_is_shared_and_labels_the_oracle_scorer(tmp_path: Path, page: str) -> None:
    assert oracle_badge({"scorer": "verifier"}) == "" and oracle_badge(None) == ""
    assert "oracle scorer</span>" in oracle_badge({"scorer": "oracle"})
    assert "oracle feedback</span>" in oracle_badge({"oracle_feedback": True})
    assert oracle_badge({"oracle_feedback": 1}) == ""  # only the setting's own value
    assert "oracle scorer</span>" not in page
    oracle_run = make_tacomas_run(tmp_path / "O", scorer="oracle")
    oracle = write_report(oracle_run, sections=report_sections()).html.read_text(encoding="utf-8")
    heading = re.search(r"<h2>tacomas.*?</h2>", oracle, re.DOTALL)
    assert heading is not None and "oracle scorer</span>" in heading.group(0)
    assert oracle.count("oracle scorer</span>") == 1 + 3 + 1  # heading, each round's s_t, the episode line


def test_model_text_is_escaped(page: str, section: str) -> None:
    for html in (page, section):
        assert XSS not in html and XSS_IMG not in html
        assert "&lt;script&gt;" in html
    assert page.lower().count("<script") == 2  # the data blob and the page's own script
    # in the meta output, an operation's text, a reason, the coaching, the rationale and the answer
    escaped = XSS.replace("<", "&lt;").replace(">", "&gt;").replace("'", "&#x27;")
    assert section.count(escaped) >= 1 + 1 + 14 + 10 + 3
    assert "TacoMAS: the team over the rounds" in page


@pytest.mark.browser
def test_browser_renders_the_section_inert(run_dir: Path, page: str, tmp_path: Path) -> None:
    report = run_dir / "report.html"
    dom = run_chromium(report, tmp_path / "profile", "--dump-dom").stdout.decode("utf-8")
    tags = elements(dom)
    html_attrs = next(a for t, a in tags if t == "html")
    body = next(a for t, a in tags if t == "body")
    assert "data-pwned" not in html_attrs and not any(a.get("id") == "pwned-img" for _, a in tags)
    assert body.get("data-rendered") == "3" and body.get("data-render-errors") == "0"
    assert len([a for t, a in tags if t == "figure" and "taco-step" in classes(a)]) == 4
    assert len([a for t, a in tags if t == "g" and "taco-node" in classes(a)]) == 5 * 3 + 6
    assert sum(t == "script" for t, _ in tags) == 2
