"""``toporoute bench --agents``: the team-size axis of ``route`` and ``toposort`` (parsing, limits, ops without
the axis), rows keyed by their team size (tables, progress, JSON version 3, versions 1 and 2 read at each op's
default N, ``--compare`` matching on it, Markdown and CSV), and ``route``'s two host alternatives (PyTorch and
numpy) against the reference, with ``vs alt`` the fastest alternative's. Tiny sizes and one short round: nothing
about the timings is asserted.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from toporoute import backends
from toporoute.backends import reference, samples
from toporoute.benchmark import (
    OPS,
    BenchOptions,
    BenchRun,
    Row,
    Timing,
    compare_runs,
    format_comparison,
    format_run,
    read_run,
    run_bench,
    to_csv,
    to_markdown,
)
from toporoute.benchmark import cases as bench_cases
from toporoute.benchmark import runner as bench_runner
from toporoute.benchmark.inputs import batched_numpy_route
from toporoute.cli import main
from toporoute.errors import InvalidArgumentError, OutOfRangeError
from toporoute.types import op_table

FAST = ["--repeats", "1", "--round-time", "0.001", "--max-time", "0.05"]
AVAILABLE = [b for b, (ok, _) in backends.available().items() if ok]


def _bench(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["bench", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _timing(median: float) -> Timing:
    return Timing(median, median, median, median, 1, 1, False, 2, (median,))


def _opts(*ops: str, agents: tuple[int, ...] = (), alternatives: bool = False) -> BenchOptions:
    return BenchOptions(
        ops=ops,
        backends=("reference",),
        sizes={op: (2,) for op in ops},
        repeats=1,
        round_time=0.0,
        max_time=0.02,
        alternatives=alternatives,
        agents=agents,
    )


# -- the axis ------------------------------------------------------------------------------------------------


def test_the_ops_with_a_team_size_axis() -> None:
    assert bench_runner.agent_ops(OPS) == ("route", "toposort")
    assert (OPS["route"].agents, OPS["toposort"].agents) == (8, 16)
    for name, spec in OPS.items():
        if spec.agents is not None:  # the default N is written in the meaning, which states any other N
            assert f"N={spec.agents} " in spec.meaning, name
            assert spec.meaning_at(None) == spec.meaning
        assert spec.meaning_at(64) == spec.meaning.replace(f"N={spec.agents} ", "N=64 ")
    assert OPS["toposort"].meaning_at(64) == "B DAGs of N=64 nodes (p=0.3)"


def test_team_limit_is_the_service_limit() -> None:
    pytest.importorskip("fastapi", reason="toporoute.serve needs the serve extra")
    from toporoute.serve import ServeConfig

    assert ServeConfig().max_agents == bench_cases.TEAM_LIMIT
    assert {OPS[op].max_agents for op in bench_runner.agent_ops(OPS)} == {bench_cases.TEAM_LIMIT}


@pytest.mark.parametrize("N", [1, 5, 33])
def test_cases_are_built_at_the_team_size(N: int) -> None:
    ctx = bench_cases.Context()
    q, k = OPS["route"].prepare(2, ctx, N).args
    assert q.shape == k.shape == (2, N, 384)
    (adj,) = OPS["toposort"].prepare(3, ctx, N).args
    assert adj.shape == (3, N, N)
    assert OPS["route"].prepare(2, ctx).args[0].shape == (2, 8, 384)  # without N: the default


def test_every_case_has_the_alternatives_its_op_names() -> None:
    ctx = bench_cases.Context()
    for name, spec in OPS.items():
        if name not in op_table.OPS:  # the encoder and the Router need a model
            continue
        case = spec.prepare(1, ctx)
        assert tuple(a.name for a in case.alternatives) == spec.alternatives, name
    assert OPS["route"].alternatives == ("torch", "numpy")


def test_parse_agents() -> None:
    assert bench_runner.parse_agents(None) == ()
    assert bench_runner.parse_agents("8,64,8,256") == (8, 64, 256)
    for bad in ("0", "8,x", "-4", "8,,64"):
        with pytest.raises(InvalidArgumentError, match="is not a team size"):
            bench_runner.parse_agents(bad)


def test_from_takes_no_agents(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    BenchRun({}, {}, ()).write(path)
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--from", str(path), "--agents", "8"])
    assert exc.value.code == 2 and "it takes no --agents" in capsys.readouterr().err


def test_bench_options_check_agents() -> None:
    with pytest.raises(InvalidArgumentError) as exc:
        BenchOptions(ops=("graph_stats",), agents=(8,))
    assert exc.value.arg == "agents"
    with pytest.raises(OutOfRangeError) as exc:
        BenchOptions(ops=("toposort",), agents=(0,))
    assert exc.value.arg == "agents"
    opts = BenchOptions(ops=("route", "graph_stats"), agents=(4, 9))
    assert opts.agents_of("route") == (4, 9) and opts.agents_of("graph_stats") == (None,)
    assert BenchOptions(ops=("toposort",)).agents_of("toposort") == (16,)


# -- rows keyed by team size ---------------------------------------------------------------------------------


def test_rows_carry_their_team_size() -> None:
    run = run_bench(_opts("route", "toposort", "graph_stats", agents=(3, 9)))
    assert [(r.op, r.agents) for r in run.rows] == [
        ("route", 3),
        ("route", 9),
        ("toposort", 3),
        ("toposort", 9),
        ("graph_stats", None),
    ]
    assert len({r.key for r in run.rows}) == len(run.rows)
    assert run.rows[0].key == ("route", 2, 3, "reference")
    assert [n for n in run.notes if "--agents" in n] == [
        "--agents applies to route, toposort; not to graph_stats"
    ]
    assert run.options["agents"] == {"route": [3, 9], "toposort": [3, 9]}
    text = format_run(run)
    for title in (
        "route (B episodes of N=3 agents, D=384",
        "route (B episodes of N=9 agents, D=384",
        "toposort (B DAGs of N=9 nodes (p=0.3)",
        "graph_stats (B graphs of N=8 agents",
    ):
        assert f"\n{title}" in text, title
    md = to_markdown(run)
    assert "### route, N=3" in md and "### toposort, N=9" in md and "### graph_stats\n" in md
    rows = to_csv(run).splitlines()
    assert rows[0].startswith("op,size,agents,side,") and rows[1].startswith("route,2,3,reference,")
    assert rows[-1].startswith("graph_stats,2,,reference,")


def test_a_run_at_the_default_team_sizes_reads_as_before() -> None:
    run = run_bench(_opts("route", "toposort"))
    assert [r.agents for r in run.rows] == [8, 16]
    assert not any("--agents" in n for n in run.notes)
    md = to_markdown(run)
    assert "### route\n" in md and "### toposort\n" in md and "N=" not in md.split("### route")[0]
    lines = []
    run_bench(_opts("route"), progress=lines.append)
    assert [ln.split("] ")[1] for ln in lines] == ["route B=2 reference"]
    lines.clear()
    run_bench(_opts("route", agents=(8,)), progress=lines.append)
    assert [ln.split("] ")[1] for ln in lines] == ["route B=2 N=8 reference"]


def test_json_v3_round_trip_and_older_files(tmp_path: Path) -> None:
    run = run_bench(_opts("route", "graph_stats", agents=(4,)))
    path = tmp_path / "run.json"
    run.write(path)
    data = json.loads(path.read_text())
    assert data["schema_version"] == 3
    assert [(r["op"], r["agents"]) for r in data["results"]] == [("route", 4), ("graph_stats", None)]
    assert read_run(path) == run
    # versions 1 and 2 (no team size): each op's default N
    for version in (1, 2):
        old = {**data, "schema_version": version}
        old["results"] = [{k: v for k, v in r.items() if k != "agents"} for r in data["results"]]
        (tmp_path / "old.json").write_text(json.dumps(old))
        assert [r.agents for r in read_run(tmp_path / "old.json").rows] == [8, None]
    bad = {**data, "schema_version": 4}
    (tmp_path / "new.json").write_text(json.dumps(bad))
    with pytest.raises(InvalidArgumentError, match="schema_version 4; this toporoute reads 1, 2, 3"):
        read_run(tmp_path / "new.json")


def _run_at(*cases: tuple[int, str, float]) -> BenchRun:
    return BenchRun(
        {},
        {},
        tuple(Row("route", 1, side, "backend", "ok", "", _timing(m), agents=n) for n, side, m in cases),
    )


def test_compare_matches_on_the_team_size() -> None:
    old = _run_at((8, "cpu", 1e-3), (64, "cpu", 1e-3))
    new = _run_at((64, "cpu", 2e-3), (128, "cpu", 1e-3))
    cmp = compare_runs(old, new)
    assert [(c.agents, c.verdict) for c in cmp.changes] == [(64, "regression")]
    assert cmp.only_old == (("route", 1, 8, "cpu"),) and cmp.only_new == (("route", 1, 128, "cpu"),)
    text = format_comparison(cmp, "old.json", width=200)
    lines = text.splitlines()
    header = re.split(r"\s{2,}", lines[1].strip())
    assert header == ["op", "size", "N", "side", "old", "new", "new/old", "noise", "verdict"]
    assert re.split(r"\s{2,}", lines[2].strip())[:4] == ["route", "1", "64", "cpu"]
    assert "only in the old run: route 1 N=8 cpu" in text and "only in this run: route 1 N=128 cpu" in text
    md = to_markdown(new, cmp, "old.json")
    assert "| op | size | N | side | old | new | new/old | noise | verdict |" in md
    assert "|:---|---:|---:|:---|---:|---:|---:|---:|:---|" in md
    assert "- only in the old run: route 1 N=8 cpu" in md
    csv_lines = to_csv(new, cmp).splitlines()
    assert csv_lines[1].startswith("route,1,64,cpu,") and csv_lines[1].endswith(",regression")
    assert csv_lines[-1].startswith("route,1,8,cpu,") and csv_lines[-1].endswith("only in the old run")
    # at the default N alone, the comparison reads as before the axis
    same = compare_runs(_run_at((8, "cpu", 1e-3)), _run_at((8, "cpu", 1e-3)))
    assert format_comparison(same, "old.json").splitlines()[1].split()[:3] == ["op", "size", "side"]


# -- route's host alternatives -------------------------------------------------------------------------------


def _no_ties(q: np.ndarray, k: np.ndarray) -> bool:
    s = np.matmul(k.astype(np.float64), q.astype(np.float64).transpose(0, 2, 1))
    s = np.sort(s, axis=1)
    return bool((np.diff(s, axis=1) > 1e-6).all())


@pytest.mark.parametrize(
    ("N", "tau", "k_in"), [(1, 0.3, 3), (2, 0.0, 3), (8, 0.0, 3), (64, 0.05, 3), (8, 0.0, 0)]
)
def test_route_alternatives_equal_the_reference(N: int, tau: float, k_in: int) -> None:
    q, k = samples.route_inputs(3, N, 32, seed=N)
    assert _no_ties(q, k)
    want = reference.route(q, k, None, tau, k_in)
    got = [batched_numpy_route(q, k, tau, k_in)]
    torch = pytest.importorskip("torch", reason="the PyTorch alternative")
    from toporoute.benchmark.device import torch_route

    with torch.inference_mode():
        got.append(tuple(t.numpy() for t in torch_route(torch.from_numpy(q), torch.from_numpy(k), tau, k_in)))
    for scores, adjacency, inbox, in_degree in got:
        np.testing.assert_array_equal(adjacency, want.adjacency)
        np.testing.assert_array_equal(inbox, want.inbox)
        np.testing.assert_array_equal(in_degree, want.in_degree)
        np.testing.assert_allclose(scores, want.scores, rtol=1e-5, atol=1e-6)
        assert adjacency.any() or N == 1


@pytest.mark.parametrize("N", [8, 64])
def test_route_bench_alternatives_compute_the_reference_routes(N: int) -> None:
    case = OPS["route"].prepare(3, bench_cases.Context(), N)
    want = case.call("reference")()
    for alt in case.alternatives:
        if alt.call is None:  # torch not installed
            assert alt.note
            continue
        got = alt.call()
        adjacency = got[1].numpy() if hasattr(got[1], "numpy") else got[1]
        np.testing.assert_array_equal(adjacency, want.adjacency, err_msg=alt.name)
        assert bench_runner._differs(tuple(np.asarray(x) for x in got), want) == "", alt.name


def test_vs_alt_is_the_fastest_alternative() -> None:
    def row(side: str, kind: str, median: float) -> Row:
        return Row("route", 1, side, kind, "ok", "", _timing(median), agents=8)

    rows = bench_runner._with_ratios(
        [
            row("reference", "backend", 8.0),
            row("cpu", "backend", 1.0),
            row("torch", "alternative", 4.0),
            row("numpy", "alternative", 2.0),
        ]
    )
    assert {r.side: r.vs_alternative for r in rows} == {
        "reference": 0.25,
        "cpu": 2.0,
        "torch": 0.5,
        "numpy": 1.0,
    }


# -- the command ---------------------------------------------------------------------------------------------


def test_command_times_route_at_each_team_size(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    code, out, err = _bench(
        capsys, "route", "graph_stats", "--agents", "8,64", "--sizes", "route=2", "graph_stats=1", "--quick",
        *FAST, "--json", str(path),
    )  # fmt: skip
    assert code == 0
    assert re.search(r"^\[1/3 \d+ s\] route B=2 N=8 reference$", err, re.MULTILINE)
    assert re.search(r"^\[2/3 \d+ s\] route B=2 N=64 numpy$", err, re.MULTILINE)
    assert re.search(r"^\[3/3 \d+ s\] graph_stats B=1 reference$", err, re.MULTILINE)
    assert out.count("note: --agents applies to route; not to graph_stats") == 1
    for n in (8, 64):
        head = f"route (B episodes of N={n} agents, D=384, tau=0.3, k_in=3; alternatives: torch, numpy"
        assert head in out
        block = out.split(head)[1].split("\n\n")[0].splitlines()[2:]
        assert [re.split(r"\s{2,}", ln.strip())[:2] for ln in block] == [
            ["2", side] for side in [*AVAILABLE, "torch", "numpy"]
        ]
    saved = read_run(path)
    assert {(r.op, r.agents) for r in saved.rows} == {("route", 8), ("route", 64), ("graph_stats", None)}
    # compared with itself: matched per team size
    code, out, _ = _bench(capsys, "--from", str(path), "--compare", str(path))
    timed = sum(r.timing is not None for r in saved.rows)
    assert code == 0 and f"0 regression(s) beyond noise of {timed} case(s) compared" in out
    assert re.search(r"^route\s+2\s+64\s+reference\s", out, re.MULTILINE)


def test_plot_has_a_panel_per_team_size(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="--plot draws with matplotlib (extra 'report')")
    png = tmp_path / "plot.png"
    code, _, _ = _bench(capsys, "toposort", "--agents", "4,9", "--sizes", "1,2", *FAST, "--plot", str(png))
    assert code == 0 and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
