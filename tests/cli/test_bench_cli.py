"""``toporoute bench`` and ``toporoute info``: the table's format (one row per op, size and side), the JSON result
file (raw round times included; versions 1 and 2 still read) and ``--compare`` (a synthetic regression flagged,
exit status with ``--fail-on-regression``, the lists of cases in one run only wrapped), ``--plot``, ``--threads``,
usage errors (unknown ops, sizes, backends: exit status 2 naming the bad value and the choices), missing
alternatives reported per row, the noise rule, and the warm-up (a slow first call, or several, never timed, on
every side). Tiny sizes and one short round: no timing is asserted but against sleeps tens of times longer.
"""

from __future__ import annotations

import json
import re
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from toporoute import backends
from toporoute.benchmark import (
    OPS,
    SCHEMA,
    SCHEMA_VERSION,
    BenchOptions,
    BenchRun,
    Comparison,
    Row,
    Timing,
    compare_runs,
    format_comparison,
    measure,
    read_run,
    run_bench,
)
from toporoute.benchmark import cases as bench_cases
from toporoute.benchmark.machine import core_threads
from toporoute.cli import main

FAST = ["--repeats", "1", "--round-time", "0.001", "--max-time", "0.05"]
AVAILABLE = [b for b, (ok, _) in backends.available().items() if ok]  # `toporoute bench`'s default sides


def _bench(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["bench", *args])
    out, err = capsys.readouterr()
    return code, out, err


def _table(out: str, op: str) -> list[list[str]]:
    """The rows (split on runs of 2+ spaces) of ``op``'s table, header first."""
    lines = out.splitlines()
    start = next(i for i, ln in enumerate(lines) if ln.startswith(f"{op} ("))
    rows = []
    for ln in lines[start + 1 :]:
        if not ln.strip():
            break
        rows.append(re.split(r"\s{2,}", ln.strip()))
    return rows


def test_table_has_one_row_per_op_size_and_side(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _bench(capsys, "route", "toposort", "--sizes", "1,3", *FAST)
    assert code == 0
    assert out.startswith("machine: ")
    # progress on stderr, not in the table
    assert re.search(r"^\[1/4 \d+ s\] route B=1 reference$", err, re.MULTILINE)
    for op, alternatives in (("route", ["torch", "numpy"]), ("toposort", ["networkx"])):
        rows = _table(out, op)
        assert rows[0] == ["size", "side", "median", "min", "IQR", "rounds", "vs ref", "vs alt", "note"]
        sides = AVAILABLE + alternatives
        assert [(r[0], r[1]) for r in rows[1:]] == [(s, side) for s in ("1", "3") for side in sides]
        for r in rows[1:]:
            if r[1] == "reference":
                assert r[6] == "1.00x"
            if r[1] not in alternatives or bench_cases.importlib.util.find_spec(r[1]):
                assert r[2].endswith(("ns", "us", "ms", " s")), r
    assert "vs" in _table(out, "toposort")[0][7]


def test_missing_alternatives_and_models_are_reported_per_row(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(bench_cases, "_missing", lambda *modules: list(modules))
    code, out, _ = _bench(capsys, "toposort", "encoder", "--sizes", "2", *FAST)
    assert code == 0
    topo = _table(out, "toposort")
    assert topo[-1][:2] == ["2", "networkx"] and "skipped: networkx not installed" in topo[-1][-1]
    enc = _table(out, "encoder")
    assert [r[1] for r in enc[1:]] == (["cpu"] if "cpu" in AVAILABLE else []) + ["sentence-transformers"]
    assert all("skipped: not installed: onnxruntime" in r[-1] for r in enc[1:])


def test_json_and_compare_round_trip(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    code, _, _ = _bench(capsys, "route", "--sizes", "1", *FAST, "--json", str(path))
    assert code == 0
    data = json.loads(path.read_text())
    assert data["schema"] == SCHEMA and data["schema_version"] == SCHEMA_VERSION
    machine = data["machine"]
    assert machine["cpu"]["model"] and set(machine["cpu"]["flags"]) >= {
        "avx2",
        "avx512f",
        "avx512_bf16",
        "amx_tile",
    }
    assert machine["build_info"]["backends"]["reference"]["available"]
    assert {"python", "numpy", "torch", "onnxruntime", "toporoute"} <= set(machine["versions"])
    assert "core_openmp" in machine["threads"]
    assert 0.0 <= machine["during_run"]["other_cpu_share"] <= 1.0
    assert [(r["op"], r["size"], r["agents"], r["side"]) for r in data["results"]] == [
        ("route", 1, 8, s) for s in [*AVAILABLE, "torch", "numpy"]
    ]
    sides = [r["side"] for r in data["results"] if r["timing"] is not None]  # torch: when installed
    for r in data["results"][: len(AVAILABLE)]:  # the raw round times, from which the statistics come
        t = r["timing"]
        assert len(t["round_times"]) == t["rounds"] >= 1 and all(x > 0 for x in t["round_times"])
        assert t["median"] == statistics.median(t["round_times"]) and t["min"] == min(t["round_times"])
        assert t["warmup"] >= 2  # the check call and at least one more
    assert BenchRun.from_dict(data).to_dict() == data  # lossless
    # a version 1 file (no warm-up count, no round times) is still read, for --compare
    v1 = {**data, "schema_version": 1}
    v1["results"] = [
        {**r, "timing": {k: v for k, v in r["timing"].items() if k not in ("warmup", "round_times")}}
        for r in data["results"]
    ]
    (tmp_path / "v1.json").write_text(json.dumps(v1))
    assert all(r.timing and r.timing.round_times == () for r in read_run(tmp_path / "v1.json").rows)

    # an older run 1000x faster on every case: all regress; with --fail-on-regression the exit status is 1
    def scaled(factor: float, model: str | None = None) -> Path:
        old = json.loads(path.read_text())
        for r in old["results"]:
            if r["timing"] is None:
                continue
            r["timing"] = {
                k: v * factor if k in ("median", "min", "q1", "q3", "iqr") else v
                for k, v in r["timing"].items()
            }
        if model:
            old["machine"]["cpu"]["model"] = model
        out = tmp_path / f"old-{factor}.json"
        out.write_text(json.dumps(old))
        return out

    faster = scaled(1e-3, model="Some Other CPU")
    code, out, _ = _bench(capsys, "route", "--sizes", "1", *FAST, "--compare", str(faster))
    assert code == 0  # regressions are reported; the status changes only when asked
    assert "warning: CPU model differs: old 'Some Other CPU'" in out
    assert out.count("REGRESSION") == len(sides)
    assert f"{len(sides)} regression(s) beyond noise of {len(sides)} case(s) compared" in out
    code, _, _ = _bench(
        capsys, "route", "--sizes", "1", *FAST, "--compare", str(faster), "--fail-on-regression"
    )
    assert code == 1
    slower = scaled(1e3)
    code, out, _ = _bench(
        capsys, "route", "--sizes", "1", *FAST, "--compare", str(slower), "--fail-on-regression"
    )
    assert code == 0 and "REGRESSION" not in out and out.count("improvement") == len(sides)
    assert "CPU model differs" not in out


def _case(median: float, rel_iqr: float, side: str = "cpu") -> Row:
    half = median * rel_iqr / 2
    return Row(
        "route", 1, side, "backend", "ok", "", Timing(median, median, median - half, median + half, 5, 10)
    )


@pytest.mark.parametrize(
    ("old", "new", "verdict"),
    [
        (_case(1.0, 0.0), _case(1.15, 0.0), "regression"),  # beyond the 10% floor
        (_case(1.0, 0.0), _case(1.05, 0.0), "same"),
        (_case(1.0, 0.1), _case(1.25, 0.0), "same"),  # within 3x the old run's relative IQR (30%)
        (_case(1.0, 0.0), _case(1.25, 0.1), "same"),  # or the new run's
        (_case(1.0, 0.1), _case(1.35, 0.0), "regression"),
        (_case(1.0, 0.0), _case(0.5, 0.0), "improvement"),
    ],
)
def test_noise_rule(old: Row, new: Row, verdict: str) -> None:
    cmp = compare_runs(BenchRun({}, {}, (old, _case(1.0, 0.0, "gone"))), BenchRun({}, {}, (new,)))
    assert [c.verdict for c in cmp.changes] == [verdict]
    assert cmp.only_old == (("route", 1, None, "gone"),) and cmp.only_new == ()


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["nope"], ["'nope'", "route", "toposort", "router"]),
        (["route", "--sizes", "0"], ["'0'", "[1, 65536]"]),
        (["route", "--sizes", "1,abc"], ["'abc'", "positive integers"]),
        (["route", "--sizes", "nope=4"], ["'nope'", "choose from"]),
        (["route", "--sizes", "toposort=4"], ["toposort", "does not time"]),
        (["route", "--backend", "gpu"], ["'gpu'", "all, reference, cpu, cuda"]),
        (["route", "--repeats", "0"], ["--repeats", "must be an integer >= 1; got '0'"]),
        # --agents (tests/cli/test_bench_agents.py has the rest of the team-size axis)
        (["route", "--agents", "0"], ["--agents '0'", "'0' is not a team size", "positive integers"]),
        (["route", "--agents", "8,abc"], ["'abc' is not a team size"]),
        (["route", "toposort", "--agents", "8,512"], ["route takes team sizes in [1, 256]", "got 512"]),
        (["graph_stats", "qmix_mix", "--agents", "8"], ["route, toposort", "ops: graph_stats, qmix_mix"]),
        (["route", "--sizes", "65536", "--agents", "256"], ["B=65536 and N=256", "at most 524288"]),
    ],
)
def test_usage_errors(capsys: pytest.CaptureFixture[str], args: list[str], names: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage: toporoute bench" in err
    for name in names:
        assert name in err


@pytest.mark.skipif(backends.available()["cuda"][0], reason="CUDA is available here")
def test_unavailable_backend_named_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "route", "--backend", "cuda"])
    assert exc.value.code == 2
    assert f"--backend cuda: not available here: {backends.available()['cuda'][1]}" in capsys.readouterr().err


def test_compare_with_a_bad_file_is_an_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema": "other"}')
    with pytest.raises(SystemExit) as exc:
        main(["bench", "route", "--compare", str(bad)])
    assert exc.value.code == 2 and "not a toporoute-bench result file" in capsys.readouterr().err


def test_plot_writes_a_png(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    pytest.importorskip("matplotlib", reason="--plot draws with matplotlib (extra 'report')")
    png = tmp_path / "plot.png"
    code, out, _ = _bench(capsys, "route", "graph_stats", "--sizes", "1,2", *FAST, "--plot", str(png))
    assert code == 0 and f"plot: {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.skipif(not backends.available()["cpu"][0], reason="the compiled core is not built")
def test_threads_sets_and_restores_the_core_threads(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    before = core_threads()
    path = tmp_path / "run.json"
    code, out, _ = _bench(
        capsys, "route", "--sizes", "1", "--backend", "cpu", *FAST, "--threads", "1", "--json", str(path)
    )
    assert code == 0 and "core threads 1," in out
    threads = json.loads(path.read_text())["machine"]["threads"]
    assert threads["requested"] == 1 and threads["core_openmp"] == 1
    assert core_threads() == before


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        ({"ops": ("route", "nope")}, "ops"),
        ({"sizes": {"nope": (1,)}}, "ops"),
        ({"backends": ("gpu",)}, "backends"),
        ({"repeats": 0}, "repeats"),
        ({"threads": 0}, "threads"),
        ({"max_time": 0.0}, "max_time"),
    ],
)
def test_bench_options_are_checked(kwargs: dict, arg: str) -> None:
    from toporoute.benchmark import BenchOptions
    from toporoute.errors import InvalidArgumentError

    with pytest.raises(InvalidArgumentError) as exc:
        BenchOptions(**kwargs)
    assert exc.value.arg == arg


def _slow_start(*sleeps: float) -> Callable[[], None]:
    """A call whose first calls sleep ``sleeps`` seconds in turn (PyTorch's first calls of a network are slow)."""
    count = [0]

    def fn() -> None:
        if count[0] < len(sleeps):
            time.sleep(sleeps[count[0]])
        count[0] += 1

    return fn


@pytest.mark.parametrize("sleeps", [(0.05,), (0.05, 0.05), (0.06, 0.03, 0.015)])
@pytest.mark.parametrize("caller", [False, True])
def test_measure_times_the_warm_call_only(sleeps: tuple[float, ...], caller: bool) -> None:
    # caller: the first (slow) call is the caller's, as the runner makes it to check a backend's result
    fn = _slow_start(*sleeps)
    if caller:
        fn()
    t = measure(fn, repeats=3, round_time=0.001, max_time=1.0, once=sleeps[0] if caller else None)
    assert max(t.round_times) < 0.005 and t.median < 0.005, t
    assert t.warmup >= len(sleeps) + 1 and len(t.round_times) == t.rounds == 3


def test_every_side_is_warmed_before_it_is_timed(monkeypatch: pytest.MonkeyPatch) -> None:
    # a backend whose first two calls are slow (one of them is the result check) and an alternative whose first
    # three are: the timings are the warm calls', so the ratios are too
    def prepare(B: int, ctx: bench_cases.Context) -> bench_cases.OpCase:
        backend = _slow_start(0.05, 0.05)
        alternative = bench_cases.Alternative("slow starter", _slow_start(0.06, 0.03, 0.015))
        return bench_cases.OpCase(lambda b: backend, (alternative,))

    spec = bench_cases.OpSpec("cold", "B calls", (1,), (1,), prepare, ("slow starter",), ("reference",))
    monkeypatch.setitem(bench_cases.OPS, "cold", spec)
    run = run_bench(BenchOptions(ops=("cold",), backends=("reference",), repeats=3, round_time=0.001))
    assert [(r.side, r.status) for r in run.rows] == [("reference", "ok"), ("slow starter", "ok")]
    for r in run.rows:
        assert r.timing is not None and max(r.timing.round_times) < 0.005, r


def _saved(path: Path, sizes: range, side: str = "cpu") -> Path:
    timing = Timing(1e-3, 1e-3, 1e-3, 1e-3, 1, 1, False, 2, (1e-3,))
    BenchRun({}, {}, tuple(Row("route", n, side, "backend", "ok", "", timing) for n in sizes)).write(path)
    return path


def test_only_in_one_run_lists_are_wrapped(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    keys = tuple(
        ("topology_distance", size, None, side) for size in range(1, 30) for side in ("reference", "cpu")
    )
    lines = format_comparison(Comparison((), keys, keys[:3]), "old.json", width=60).splitlines()
    assert lines[1] == "only in the old run: topology_distance 1 reference,"
    assert all(len(ln) <= 60 for ln in lines), max(lines, key=len)
    old_lines = lines[1 : next(i for i, ln in enumerate(lines) if ln.startswith("only in this run"))]
    assert len(old_lines) > 10 and all(ln.startswith("  topology_distance ") for ln in old_lines[1:])
    listed = " ".join(ln.strip() for ln in old_lines)[len("only in the old run: ") :].split(", ")
    assert listed == [f"{op} {size} {side}" for op, size, _, side in keys]  # every case, none split
    # the command wraps to the terminal's width ($COLUMNS when stdout is not a terminal)
    monkeypatch.setenv("COLUMNS", "50")
    old, new = _saved(tmp_path / "old.json", range(1, 60)), _saved(tmp_path / "new.json", range(1, 2))
    code, out, _ = _bench(capsys, "--from", str(new), "--compare", str(old))
    assert code == 0 and "only in the old run: route 2 cpu, route 3 cpu," in out
    wrapped = [ln for ln in out.splitlines() if ln.startswith(("only in", "  route "))]
    assert len(wrapped) > 5 and all(len(ln) <= 50 for ln in wrapped), wrapped
    assert "route 59 cpu" in out


def test_measure_budget_cuts_slow_calls_short() -> None:
    t = measure(lambda: time.sleep(0.01), repeats=5, round_time=0.0, max_time=0.02)
    assert t.capped and 1 <= t.rounds <= 2 and t.number == 1
    t = measure(lambda: None, repeats=4, round_time=0.0)
    assert (t.rounds, t.number, t.capped) == (4, 1, False) and t.min <= t.median


def test_every_op_documents_its_size() -> None:
    for name, spec in OPS.items():
        assert spec.meaning.startswith("B "), name
        assert spec.defaults and spec.quick and max(spec.defaults) <= spec.max_size


def test_info_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["info"]) == 0
    out = capsys.readouterr().out
    for part in (
        "backends:",
        "  reference: available",
        "ops (toporoute.ops; kernels registered per backend):",
        "optional packages",
        "bench alternatives:",
        "model and data files:",
        "cache: ",
    ):
        assert part in out, part
    assert main(["info", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    assert set(info) == {"build_info", "ops", "extras", "models", "cache"}
    # every op of the table, with the backends that register a kernel for it
    from toporoute.types.op_table import OPS as OP_TABLE

    assert list(info["ops"]) == list(OP_TABLE)
    assert info["ops"]["route"]["kernels"] == ["reference", "cpu", "cuda"]
    # an op with a kernel on some backends only: the listing names exactly those that register one
    partial = next(op for op in OP_TABLE if not all(op in backends.kernels(b) for b in backends.NAMES))
    has = [b for b in backends.NAMES if partial in backends.kernels(b)]
    assert info["ops"][partial]["kernels"] == has
    assert f"  {partial}" in out and f"{', '.join(has)}: {OP_TABLE[partial].summary}" in out
    assert info["extras"]["report"]["matplotlib"]["found"] == (
        bench_cases.importlib.util.find_spec("matplotlib") is not None
    )
    assert set(info["models"]) == {"encoder", "llm", "humaneval"}
    for m in info["models"].values():
        assert (m["path"] is None) == ("note" in m)
