"""The run-directory reader and the HTML report: numbers from hand-computed fixtures, error messages, the files
written, and the page rendered by a real headless Chromium (graphs drawn, model text inert, a screenshot that is
not blank)."""

from __future__ import annotations

import base64
import hashlib
import html
import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from _browser import Elements as _Elements
from _browser import classes as _classes
from _browser import run_chromium as _run_chromium
from _checks import check
from _paths import TESTS
from _procs import run_python
from _runs import PAYLOADS, XSS_SCRIPT, make_run

from toporoute.cli import _print_table
from toporoute.errors import InvalidArgumentError
from toporoute.trace import _figures
from toporoute.trace import report as report_mod
from toporoute.trace.reader import episode_rows, load_run, natural_key, round_stats, summarize
from toporoute.trace.report import EXCERPT_CHARS, ReportPaths, build_html, write_report

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
FIGURES = ["accuracy", "tokens", "edges_per_round", "wall_time"]

# What the fixture's traces hold (counted by hand from tests/_runs.py): dytopo 3+2+2+1+1 rounds of 4 workers,
# chain 2+2 rounds of 4, single 1+1 rounds of 1; edges dytopo 5+4+3+1+1, chain 4 x 3, single none.
ROUND_GRAPHS = 15
NODES = 9 * 4 + 4 * 4 + 2 * 1
EDGES = 14 + 12
REMOVED_EDGES = 2


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_run(tmp_path_factory.mktemp("run") / "RUN")


@pytest.fixture(scope="module")
def report(run_dir: Path) -> ReportPaths:
    return write_report(run_dir)


# ----------------------------------------------------------------------------------------------------- reader


def test_load_run_orders_methods_episodes_and_rounds(run_dir: Path) -> None:
    run = load_run(run_dir)
    assert run.root == run_dir
    assert [m.name for m in run.methods] == ["dytopo", "chain", "single"]  # dytopo first, then by name
    dytopo = run.methods[0]
    assert dytopo.config["params"] == {"tau": 0.3, "k_in": 2, "max_rounds": 3}
    # natural order of ids; the half-written HumanEval-99.json is skipped
    assert [e.episode for e in dytopo.episodes] == [
        "HumanEval-0",
        "HumanEval-1",
        "HumanEval-2",
        "HumanEval-10",
    ]
    assert {k: [r.round for r in v] for k, v in dytopo.traces.items()} == {
        "HumanEval-0": [0, 1, 2],
        "HumanEval-1": [0, 1],
        "HumanEval-2": [0],  # its torn round 1 is dropped
        "HumanEval-3": [0],  # in flight: a trace and no record
        "HumanEval-10": [0, 1],
    }
    assert dytopo.summary_file is None and run.methods[1].summary_file is not None
    assert len(dytopo.problems) == 2
    assert any("HumanEval-99.json" in p and "skipped" in p for p in dytopo.problems)
    assert any("HumanEval-2.jsonl" in p and "torn" in p for p in dytopo.problems)
    assert run.methods[1].problems == run.methods[2].problems == []
    assert run.problems == [f"dytopo: {p}" for p in dytopo.problems]


def test_summarize_matches_hand_computed_values(run_dir: Path) -> None:
    dytopo, chain, single = load_run(run_dir).methods
    s = summarize(dytopo)
    # 3 ok (1500, 1000, 1100 tokens; 12, 8, 9 calls; 3, 2, 2 rounds) + 1 error; no summary.json: wall is the
    # sum of the four episodes' wall times, 10 + 6 + 4 + 1
    assert s == {
        "method": "dytopo",
        "tasks": "humaneval",
        "model": "HuggingFaceTB/SmolLM2-360M-Instruct",
        "episodes": 4,
        "ok": 3,
        "errors": 1,
        "passed": 2,
        "accuracy": pytest.approx(2 / 3),
        "tokens_per_task": pytest.approx(1200.0),
        "prompt_tokens_per_task": pytest.approx(1000.0),
        "completion_tokens_per_task": pytest.approx(200.0),
        "calls_per_task": pytest.approx(29 / 3),
        "rounds_per_task": pytest.approx(7 / 3),
        "wall_s": pytest.approx(21.0),
        "llm_s": pytest.approx(16.0),
        "routing_s": pytest.approx(1.0),
        "episode_wall_s": pytest.approx(21.0),
        "routing_share": pytest.approx(1 / 21),
    }
    s = summarize(chain)  # wall time from its summary.json
    assert (s["accuracy"], s["tokens_per_task"], s["calls_per_task"], s["rounds_per_task"]) == (
        0.5,
        1000,
        8,
        2,
    )
    assert (s["wall_s"], s["llm_s"], s["routing_s"], s["routing_share"]) == (12.5, pytest.approx(10.5), 0, 0)
    s = summarize(single)
    assert (s["episodes"], s["passed"], s["accuracy"], s["tokens_per_task"], s["calls_per_task"]) == (
        2,
        2,
        1,
        400,
        1,
    )
    assert s["wall_s"] == pytest.approx(5.0) and s["routing_share"] == 0
    # the caller's own wall time wins; the routing share stays a share of the episodes' own time
    s = summarize(dytopo, wall_s=4.0)
    assert (s["wall_s"], s["routing_share"]) == (4.0, pytest.approx(1 / 21))


def test_episode_rows_and_round_stats(run_dir: Path) -> None:
    dytopo = load_run(run_dir).methods[0]
    rows = {r.episode: r for r in episode_rows(dytopo)}
    assert list(rows) == ["HumanEval-0", "HumanEval-1", "HumanEval-2", "HumanEval-3", "HumanEval-10"]
    r = rows["HumanEval-0"]
    assert (r.task, r.status, r.passed, r.rounds, r.halted, r.tokens, r.calls, r.wall_s) == (
        "HumanEval/0", "ok", True, 3, True, 1500, 12, 10.0
    )  # fmt: skip
    r = rows["HumanEval-2"]
    assert (r.status, r.passed, r.rounds, r.tokens, r.calls) == ("error", None, 1, 120, 2)
    assert "engine died" in r.error
    r = rows["HumanEval-3"]
    # no record: rounds and tokens from its trace (4 workers 460 + 86, manager 150 + 30)
    assert (r.status, r.task, r.rounds, r.tokens, r.calls) == ("partial", "HumanEval/3", 1, 726, None)

    stats = round_stats(dytopo)
    assert [s.round for s in stats] == [0, 1, 2]
    assert [s.episodes for s in stats] == [5, 3, 1]
    assert [s.edges for s in stats] == pytest.approx([(3 + 1 + 1 + 1 + 1) / 5, (0 + 3 + 2) / 3, 2.0])
    assert [s.density for s in stats] == pytest.approx([7 / 5 / 12, 5 / 3 / 12, 2 / 12])
    assert [s.tokens for s in stats] == pytest.approx([726.0] * 3)
    assert [s.round_s for s in stats] == pytest.approx([1.0, 2.0, 3.0])
    assert round_stats(load_run(run_dir).methods[2])[0].edges == 0


def test_single_method_folder(run_dir: Path) -> None:
    run = load_run(run_dir / "chain")
    assert run.root == run_dir / "chain"
    assert [m.name for m in run.methods] == ["chain"]
    assert len(run.methods[0].episodes) == 2


def test_natural_key() -> None:
    assert sorted(["a-10", "a-2", "b-1", "a-1"], key=natural_key) == ["a-1", "a-2", "a-10", "b-1"]


def test_reader_survives_odd_files(tmp_path: Path) -> None:
    folder = tmp_path / "m"
    (folder / "episodes").mkdir(parents=True)
    (folder / "traces").mkdir()
    (folder / "run.json").write_text("[1, 2]")  # not an object: an empty config and a problem
    (folder / "episodes" / "a.json").write_text('{"episode": "a", "status": "ok", "record": null}')
    (folder / "episodes" / "b.json").write_text('{"episode": "b"}')  # no status
    (folder / "episodes" / "c.json").write_bytes(b"\xff\xfe")  # not UTF-8
    lines = [{"round": 1}, "not json", {"no": "round"}, {"round": 0}, {"round": 0}, {"round": 1, "v": 9}]
    text = "\n".join(x if isinstance(x, str) else json.dumps(x) for x in lines) + "\n"
    (folder / "traces" / "a.jsonl").write_text(text)
    m = load_run(folder).methods[0]
    assert m.name == "m" and m.config == {}
    assert [e.episode for e in m.episodes] == ["a"]
    # the last attempt (rounds 0, 1 after a restart) is kept
    assert [r.round for r in m.traces["a"]] == [0, 1]
    text = "\n".join(m.problems)
    for fragment in ("run.json", "b.json", "c.json", "line 2", "line 3", "newer", "more than one attempt"):
        assert fragment in text
    s = summarize(m)  # an ok episode without record or usage counts, with zeros
    assert (s["ok"], s["passed"], s["accuracy"], s["tokens_per_task"], s["wall_s"]) == (1, 0, 0.0, 0.0, 0.0)


@pytest.mark.parametrize("case", ["missing", "file", "empty", "no-run-json"])
def test_bad_run_dir_names_the_path(case: str, tmp_path: Path) -> None:
    path = tmp_path / "RUN"
    if case == "file":
        path.write_text("x")
    elif case in ("empty", "no-run-json"):
        path.mkdir()
        if case == "no-run-json":
            (path / "dytopo" / "episodes").mkdir(parents=True)
    with pytest.raises(InvalidArgumentError) as excinfo:
        load_run(path)
    check(excinfo, InvalidArgumentError, "run_dir", str(path), "run.json")
    with pytest.raises(InvalidArgumentError) as excinfo:
        write_report(path)
    check(excinfo, InvalidArgumentError, "run_dir", str(path))
    assert not (tmp_path / "RUN" / "report.html").exists()


# ---------------------------------------------------------------------------------------------------- report


def _is_png(path: Path) -> bool:
    return path.read_bytes()[:8] == PNG_SIGNATURE


def test_write_report_writes_page_and_pngs(run_dir: Path, report: ReportPaths) -> None:
    import matplotlib.image as mpimg

    assert report.html == run_dir / "report.html"
    assert report.figures == [run_dir / "figures" / f"{name}.png" for name in FIGURES]
    for png in report.figures:
        assert _is_png(png) and png.stat().st_size > 5000, png
        image = mpimg.imread(png)
        assert image.ndim == 3 and image.shape[0] > 200 and image.shape[1] > 400
        assert image.std() > 0.05  # something is drawn
    # atomic writes leave no temporary files behind
    assert not [p for p in run_dir.rglob("*.tmp")]
    page = report.html.read_text(encoding="utf-8")
    # the PNGs are inline too, so the page stands alone
    assert page.count('src="data:image/png;base64,') == len(FIGURES)
    assert not re.search(r"""(?:src|href)=["']?(?:https?:)?//""", page)  # nothing fetched


def test_write_report_writes_through_the_atomic_helper(run_dir: Path, tmp_path: Path, monkeypatch) -> None:
    written: list[Path] = []
    real = report_mod.write_bytes_atomic

    def spy(path: Path, data: bytes) -> None:
        written.append(Path(path))
        real(path, data)

    monkeypatch.setattr(report_mod, "write_bytes_atomic", spy)
    out = tmp_path / "elsewhere"
    out.mkdir()
    paths = write_report(run_dir, out)  # an existing folder: out/report.html, figures next to it
    assert paths.html == out / "report.html"
    assert sorted(written) == sorted([paths.html, *paths.figures])
    assert all(p.parent == out / "figures" for p in paths.figures)
    paths = write_report(run_dir, tmp_path / "custom.html")
    assert paths.html == tmp_path / "custom.html" and paths.html.is_file()


def test_report_without_matplotlib_still_writes_the_page(run_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    paths = write_report(run_dir, tmp_path / "r.html")
    assert paths.figures == []
    page = paths.html.read_text(encoding="utf-8")
    assert "Charts need matplotlib" in page and 'id="run-data"' in page


def _blob(page: str) -> tuple[str, dict]:
    m = re.search(r'<script type="application/json" id="run-data">(.*?)</script>', page, re.DOTALL)
    assert m is not None
    return m.group(1), json.loads(m.group(1))


def test_page_content_is_escaped_and_bounded(report: ReportPaths) -> None:
    page = report.html.read_text(encoding="utf-8")
    for payload in PAYLOADS:
        assert payload not in page
    assert page.lower().count("<script") == 2  # the data blob and the page's own script
    raw, data = _blob(page)
    assert "<" not in raw and ">" not in raw  # model text cannot end the script element
    # static parts: the error traceback (with a payload) is HTML-escaped
    assert "RuntimeError: engine died &lt;/script&gt;&lt;script&gt;" in page
    methods = data["methods"]
    assert [m["name"] for m in methods] == ["dytopo", "chain", "single"]
    assert [e["id"] for e in methods[0]["episodes"]] == [
        "HumanEval-0", "HumanEval-1", "HumanEval-2", "HumanEval-3", "HumanEval-10"
    ]  # fmt: skip
    r0 = methods[0]["episodes"][0]["rounds"][0]
    assert XSS_SCRIPT in r0["messages"]["Developer"]["public"]  # intact in the data, inert in the page
    assert r0["scored"] is True and "scores" not in r0
    assert methods[1]["episodes"][0]["rounds"][0]["scored"] is False
    private = r0["messages"]["Researcher"]["private"]  # 3,600 characters in the trace
    assert private.startswith("private notes of Researcher") and len(private) < EXCERPT_CHARS + 80
    assert "more characters in the trace file" in private
    # header from run.json
    for text in ("humaneval", "HuggingFaceTB/SmolLM2-360M-Instruct", "vllm", "2025-03-01T12:00:00", "0.32.0"):
        assert text in page
    # comparison table: routing share as a percentage, wall time summed from episodes marked
    assert "4.76%" in page and "21.0 s<sup>*</sup>" in page and "12.5 s" in page


def test_report_layer_imports_no_llm_or_method_layers(run_dir: Path, tmp_path: Path) -> None:
    code = (
        "import json, sys\n"
        "from toporoute.trace.report import write_report\n"
        f"write_report({str(run_dir)!r}, {str(tmp_path / 'r.html')!r})\n"
        "bad = ('toporoute.llm', 'toporoute.methods', 'toporoute.runtime', 'vllm', 'torch', 'matplotlib.pyplot')\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(bad))))"
    )
    proc = run_python(code, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == []


def _edit_json(path: Path, edit) -> None:
    value = json.loads(path.read_text(encoding="utf-8"))
    edit(value)
    path.write_text(json.dumps(value), encoding="utf-8")


def _page(run_dir: Path) -> str:
    return build_html(load_run(run_dir))


def _meta(page: str, key: str) -> str:
    m = re.search(rf"<dt>{key}</dt><dd>(.*?)</dd>", page)
    assert m is not None, key
    return m.group(1)


def test_header_reads_the_seed_from_the_params(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "RUN")
    for method in ("dytopo", "chain", "single"):  # as the harness writes it: the seed is a method setting

        def move(config: dict) -> None:
            config["params"]["seed"] = 1234
            del config["seed"]

        _edit_json(run_dir / method / "run.json", move)
    assert _meta(_page(run_dir), "Seed") == "1234"
    # an older run.json with the seed at its top level still shows it
    assert _meta(_page(make_run(tmp_path / "OLD")), "Seed") == "0"


def test_counts_are_pluralised(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "RUN")
    for method, ids in (
        ("dytopo", ["HumanEval/0"]),
        ("chain", ["HumanEval/0", "HumanEval/1"]),
        ("single", []),
    ):
        _edit_json(run_dir / method / "run.json", lambda c, ids=ids: c.update(task_ids=ids))
    header = _meta(_page(run_dir), "Task set")
    assert header == "humaneval (1 task) (dytopo); humaneval (2 tasks) (chain); humaneval (0 tasks) (single)"
    assert report_mod._cut("x" * 11, 10).endswith(" … [1 more character in the trace file]")
    assert report_mod._cut("x" * 1012, 10).endswith(" … [1,002 more characters in the trace file]")


def test_empty_setting_values_are_named(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "RUN")
    params = {"tau": None, "role_max_tokens": {}, "pool": [], "suffix": "", "k_in": 2}
    _edit_json(run_dir / "dytopo" / "run.json", lambda c: c.update(params=params))
    m = re.search(r'<h2>dytopo <span class="params">(.*?)</span></h2>', _page(run_dir))
    assert m is not None
    assert html.unescape(m.group(1)) == 'tau=unset · role_max_tokens=none · pool=none · suffix="" · k_in=2'


def test_summed_times_say_so_in_their_column(report: ReportPaths) -> None:
    page = report.html.read_text(encoding="utf-8")
    head = re.search(r'<table class="comparison"><thead>(.*?)</thead>', page, re.DOTALL)
    assert head is not None
    columns = re.findall(r"<th>(.*?)</th>", head.group(1))
    assert "LLM time (summed over episodes)" in columns and "Routing time (summed over episodes)" in columns
    assert "Wall time" in columns  # the one time that is not a sum when summary.json has it
    # the fixture's dytopo: 16 s of LLM time in 21 s of episodes, summed
    assert "<td>16.0 s</td><td>1.0 s</td>" in page


def test_latency_legend_uses_the_bars_colours(run_dir: Path) -> None:
    from matplotlib.colors import to_rgb
    from matplotlib.figure import Figure
    from matplotlib.patches import Rectangle

    run = load_run(run_dir)
    colors = _figures._COLORS[: len(run.methods)]
    fig = _figures._latency(Figure, run, colors)
    legend = fig.axes[0].get_legend()
    assert [t.get_text() for t in legend.get_texts()] == ["wall", "LLM", "routing"]
    swatches = [p for p in legend.findobj(Rectangle) if p is not legend.legendPatch and p.get_visible()]
    bars = [p for p in fig.axes[0].patches if isinstance(p, Rectangle)]
    # each entry: the part's shade in every method's colour, as on the bars
    got = {(to_rgb(p.get_facecolor()), round(p.get_alpha() or 1.0, 2)) for p in swatches}
    drawn = {(to_rgb(p.get_facecolor()), round(p.get_alpha() or 1.0, 2)) for p in bars}
    assert got == drawn and len(got) == 3 * len(colors)


def test_accuracy_is_one_percentage_format_in_the_report_and_the_cli(
    run_dir: Path, report: ReportPaths, capsys: pytest.CaptureFixture[str]
) -> None:
    page = report.html.read_text(encoding="utf-8")
    rows = [summarize(m) for m in load_run(run_dir).methods]
    rows.append(dict(rows[0], method="none-finished", ok=0, passed=0, accuracy=0.0))
    _print_table(rows)
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:4] == ["method", "finished", "errors", "accuracy"]
    table = {line.split()[0]: line.split()[3] for line in lines[1:]}
    assert table == {"dytopo": "66.7%", "chain": "50.0%", "single": "100.0%", "none-finished": "—"}
    for text in ("66.7%", "50.0%", "100.0%"):
        assert f"<td>{text} <small>(" in page


def test_model_text_is_escaped_and_never_evaluated_as_a_template(tmp_path: Path) -> None:
    run_dir = make_run(tmp_path / "RUN")
    reply = "x = '{{ 7*7 }}' <script>alert(1)</script> {% if true %}yes{% endif %} {#- c -#} & \"q\""
    _edit_json(
        run_dir / "dytopo" / "episodes" / "HumanEval-0.json", lambda e: e["record"].update(answer=reply)
    )
    _edit_json(run_dir / "dytopo" / "run.json", lambda c: c["params"].update(note=reply))
    episode = run_dir / "dytopo" / "episodes" / "HumanEval-2.json"
    _edit_json(episode, lambda e: e.update(error=f"Traceback\nRuntimeError: {reply}"))
    assert report_mod._environment().autoescape is True  # the page is rendered by Jinja2, escaping by default
    page = _page(run_dir)
    assert "<script>alert(1)</script>" not in page
    answer = re.search(r"<summary>Final answer</summary><pre>(.*?)</pre>", page, re.DOTALL)
    error = re.search(r'<pre class="error">(.*?)</pre>', page, re.DOTALL)
    params = re.search(r'<span class="params">(.*?)</span>', page)
    assert answer is not None and error is not None and params is not None
    # escaped (no markup left), and the template syntax comes back unchanged: nothing was evaluated
    for shown, text in ((answer, reply), (error, f"Traceback\nRuntimeError: {reply}")):
        assert "<" not in shown.group(1) and html.unescape(shown.group(1)) == text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in answer.group(1)
    assert html.unescape(params.group(1)).endswith(f"note={reply}")


def test_content_security_policy_pins_the_pages_script(report: ReportPaths) -> None:
    page = report.html.read_text(encoding="utf-8")
    csp = re.search(r"script-src 'sha256-([A-Za-z0-9+/=]+)'", page)
    scripts = re.findall(r"<script>(.*?)</script>", page, re.DOTALL)
    assert csp is not None and len(scripts) == 1
    assert base64.b64encode(hashlib.sha256(scripts[0].encode("utf-8")).digest()).decode() == csp.group(1)
    assert scripts[0] == report_mod._template("report.js")  # the file itself, not an escaped copy


@pytest.mark.parametrize("require", [False, True])
def test_browser_tests_skip_without_chromium_unless_required(tmp_path: Path, require: bool) -> None:
    for name in ("conftest.py", "_browser.py", "_shared_vllm.py"):  # the conftest and what it imports
        (tmp_path / name).write_text((TESTS / name).read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "test_page.py").write_text(
        "import pytest\nfrom _browser import chromium\n\n\n@pytest.mark.browser\n"
        "def test_page():\n    chromium()\n",
        encoding="utf-8",
    )
    (tmp_path / "bin").mkdir()
    env = dict(os.environ, PATH=str(tmp_path / "bin"))  # no Chromium on this PATH
    cmd = [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "test_page.py"]
    proc = subprocess.run(
        cmd + (["--require-browser"] if require else []),
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=120,
        check=False,
    )
    if require:
        assert proc.returncode == 1 and "1 error" in proc.stdout, proc.stdout + proc.stderr  # failed in setup
        assert "--require-browser given but headless Chromium is not installed" in proc.stdout
    else:
        assert proc.returncode == 0 and "1 skipped" in proc.stdout, proc.stdout + proc.stderr
        assert "headless Chromium is not installed (apt-get install chromium" in proc.stdout


# ---------------------------------------------------------------------------------------- real browser (Chromium)


def _expected_graph(run_dir: Path) -> tuple[int, int, Counter]:
    """Rounds, nodes and (src, dst) edges that the trace files imply, read straight from the JSONL files."""
    rounds = nodes = 0
    edges: Counter = Counter()
    for path in run_dir.glob("*/traces/*.jsonl"):
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue  # the torn line
            rounds += 1
            nodes += len(rec["agents"])
            pairs = {(e["src"], e["dst"]) for e in rec["edges"] + rec["removed"] if e["src"] != e["dst"]}
            edges.update(pairs)
    return rounds, nodes, edges


@pytest.mark.browser
def test_browser_renders_every_round_and_keeps_model_text_inert(
    run_dir: Path, report: ReportPaths, tmp_path: Path
) -> None:
    dom = _run_chromium(report.html, tmp_path / "profile", "--dump-dom").stdout.decode("utf-8")
    parser = _Elements()
    parser.feed(dom)
    tags = parser.tags
    html_attrs = next(a for t, a in tags if t == "html")
    body = next(a for t, a in tags if t == "body")

    rounds, nodes, edges = _expected_graph(run_dir)
    assert (rounds, nodes, sum(edges.values())) == (ROUND_GRAPHS, NODES, EDGES)  # the hand count agrees
    assert body.get("data-rendered") == str(ROUND_GRAPHS), "the page script did not finish drawing"
    assert body.get("data-render-errors") == "0"
    graphs = [a for t, a in tags if t == "svg" and "round-graph" in _classes(a)]
    assert len(graphs) == ROUND_GRAPHS
    circles = [a for t, a in tags if t == "circle" and "node" in _classes(a)]
    assert len(circles) == NODES
    drawn = [a for t, a in tags if t in ("path", "line") and "edge" in _classes(a)]
    assert Counter((a["data-src"], a["data-dst"]) for a in drawn) == edges
    assert sum("removed" in _classes(a) for a in drawn) == REMOVED_EDGES
    labels = [t for t, a in tags if t == "text" and "edge-label" in _classes(a)]
    assert len(labels) == 14  # DyTopo's scored edges; the chain's have no score
    # counts in the drawn text are pluralised: the single method's rounds have 1 agent
    aria = [a.get("aria-label") or "" for a in graphs]
    assert aria.count("Round 1: 1 agent, 0 edges") == 2 and not [x for x in aria if "1 agents" in x]

    # model text arrives as text: escaped in the serialization, no element or script of its own
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert "data-pwned" not in html_attrs
    assert sum(t == "script" for t, _ in tags) == 2
    assert not [a for _, a in tags if (a.get("id") or "").startswith("pwned")]
    # every round view, the error episode's and the single-agent method's included, is in the DOM
    assert len([a for t, a in tags if t == "div" and "round" in _classes(a)]) == ROUND_GRAPHS


@pytest.mark.browser
def test_browser_screenshot_is_not_blank(report: ReportPaths, tmp_path: Path) -> None:
    import matplotlib.image as mpimg
    import numpy as np

    shot = tmp_path / "report.png"
    _run_chromium(report.html, tmp_path / "profile", "--window-size=1400,2000", f"--screenshot={shot}")
    assert _is_png(shot)
    image = mpimg.imread(shot)[..., :3]
    assert image.shape[:2] == (2000, 1400)
    background = np.all(image > 0.98, axis=-1)
    assert background.mean() < 0.9, "the page is (almost) blank"
    rgb = (image * 255).astype(np.uint32)
    colours = np.unique(rgb[..., 0] << 16 | rgb[..., 1] << 8 | rgb[..., 2])
    assert colours.size > 200  # charts, graphs and text, not a flat fill


@pytest.mark.browser
def test_browser_opens_the_episode_named_in_the_url(report: ReportPaths, tmp_path: Path) -> None:
    page = report.html.read_text(encoding="utf-8")
    assert re.search(r'<tr class="episode-view" id="ev-1-1" hidden>', page)  # closed as written
    dom = _run_chromium(report.html, tmp_path / "profile", "--dump-dom", fragment="#ev-1-1").stdout.decode()
    assert re.search(r'<tr class="episode-view" id="ev-1-1">', dom)
    assert re.search(r'aria-controls="ev-1-1" aria-expanded="true"', dom)
