"""``toporoute bench --format markdown|csv`` and ``--from``: the Markdown document (one table per op, the
comparison's table and lists, cells with a ``|`` escaped), the CSV (full-precision seconds and raw round times
that read back equal to the JSON's, the comparison's columns, a line per case of the old run only), stdout kept a
clean document, and a saved run shown or compared without timing anything.
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pytest

from toporoute import backends
from toporoute.benchmark import BenchRun, Row, Timing, compare_runs, to_csv, to_markdown
from toporoute.benchmark.export import CSV_COLUMNS, CSV_COMPARISON_COLUMNS
from toporoute.cli import main

FAST = ["--repeats", "2", "--round-time", "0.001", "--max-time", "0.05"]
AVAILABLE = [b for b, (ok, _) in backends.available().items() if ok]  # `toporoute bench`'s default sides


def _timing(median: float) -> Timing:
    rounds = (median * 0.9, median, median * 1.3)
    return Timing(median, rounds[0], median * 0.95, median * 1.15, 3, 10, False, 4, rounds)


def _run(scale: float = 1.0) -> BenchRun:
    machine = {"cpu": {"model": "Test CPU", "usable_cpus": 2, "flags": {"avx2": True}}}
    rows = (
        Row("route", 1, "reference", "backend", "ok", "", _timing(50e-6 * scale), 1.0),
        Row("route", 1, "cpu", "backend", "ok", "a | b", _timing(3.5e-6 * scale), 50 / 3.5),
        Row("toposort", 64, "reference", "backend", "ok", "", _timing(900e-6 * scale), 1.0, 0.92),
        Row("toposort", 64, "networkx", "alternative", "skipped", "networkx not installed"),
    )
    return BenchRun(machine, {}, rows, ("backend cuda not available: no GPU",), "2026-01-01T00:00:00+00:00")


def _csv(text: str) -> list[dict[str, str]]:
    return list(csv.DictReader(io.StringIO(text)))


def test_markdown_has_one_table_per_op_and_the_comparison() -> None:
    run = _run()
    text = to_markdown(run)
    lines = text.splitlines()
    assert lines[0].startswith("machine: Test CPU (2 usable CPUs; avx2)") and "(run 2026-01-01" in lines[0]
    assert "- note: backend cuda not available: no GPU" in lines
    for op in ("route", "toposort"):
        head = lines.index(f"### {op}")
        assert lines[head + 4] == "| size | side | median | min | IQR | rounds | vs ref | vs alt | note |"
        assert lines[head + 5] == "|---:|:---|---:|---:|---:|---:|---:|---:|:---|"
    assert "| 1 | cpu | 3.50 us | 3.15 us | 20.0% | 3x10 | 14.3x | - | a \\| b |" in lines
    assert "| 64 | networkx | - | - | - | - | - | - | skipped: networkx not installed |" in lines
    assert "### compared with" not in text

    old = BenchRun({}, {}, run.rows[:1] + (Row("gone", 8, "cpu", "backend", "ok", "", _timing(1.0)),))
    text = to_markdown(_run(2.0), compare_runs(old, _run(2.0)), "old.json")
    lines = text.splitlines()
    at = lines.index("### compared with old.json")
    assert lines[at + 2] == "- warning: CPU model differs: old None, new 'Test CPU'"
    table = lines.index("| op | size | side | old | new | new/old | noise | verdict |")
    assert lines[table - 1] == "" and lines[table - 2].startswith("- warning: ")
    assert "| route | 1 | reference | 50.0 us | 100 us | 2.00 | ±60% | **REGRESSION** |" in lines
    assert "- only in the old run: gone 8 cpu" in lines
    assert "- only in this run: route 1 cpu, toposort 64 reference" in lines
    assert lines[-1] == "1 regression(s) beyond noise of 1 case(s) compared"


def test_csv_keeps_full_precision_and_the_raw_rounds() -> None:
    run = _run()
    rows = _csv(to_csv(run))
    assert tuple(rows[0]) == CSV_COLUMNS
    assert [(r["op"], r["size"], r["side"], r["status"]) for r in rows] == [
        (r.op, str(r.size), r.side, r.status) for r in run.rows
    ]
    for got, want in zip(rows, run.rows):
        t = want.timing
        if t is None:
            assert got["median_s"] == got["round_times_s"] == got["warmup"] == "" and got["note"] == want.note
            continue
        assert float(got["median_s"]) == t.median and float(got["q3_s"]) == t.q3
        assert tuple(float(x) for x in got["round_times_s"].split()) == t.round_times
        assert (int(got["rounds"]), int(got["number"]), int(got["warmup"])) == (3, 10, 4)
    assert rows[1]["note"] == "a | b" and float(rows[1]["vs_reference"]) == 50 / 3.5
    assert rows[0]["vs_alternative"] == "" and float(rows[2]["vs_alternative"]) == 0.92


def test_csv_with_a_comparison() -> None:
    old = BenchRun({}, {}, _run().rows[:2] + (Row("gone", 8, "cpu", "backend", "ok", "", _timing(1.0)),))
    new = _run(0.5)
    rows = _csv(to_csv(new, compare_runs(old, new)))
    assert tuple(rows[0]) == CSV_COLUMNS + CSV_COMPARISON_COLUMNS
    assert [(r["op"], r["side"], r["verdict"]) for r in rows] == [
        ("route", "reference", "improvement"),
        ("route", "cpu", "improvement"),
        ("toposort", "reference", "only in this run"),
        ("toposort", "networkx", ""),
        ("gone", "cpu", "only in the old run"),
    ]
    assert float(rows[0]["old_median_s"]) == 50e-6 and float(rows[0]["new_over_old"]) == 0.5
    assert rows[-1]["median_s"] == rows[-1]["old_median_s"] == ""


def test_command_prints_csv_and_markdown_on_stdout_alone(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = tmp_path / "run.json"
    assert main(["bench", "route", "--sizes", "1", *FAST, "--format", "csv", "--json", str(path)]) == 0
    out, err = capsys.readouterr()
    rows = _csv(out)
    assert tuple(rows[0]) == CSV_COLUMNS and [r["side"] for r in rows] == [*AVAILABLE, "torch", "numpy"]
    assert {r["agents"] for r in rows} == {"8"}
    assert f"results: {path}" in err and "results:" not in out
    saved = json.loads(path.read_text())["results"]
    timed = [r["side"] for r in saved if r["timing"] is not None]  # torch: when installed
    for got, want in zip(rows, saved):
        if want["timing"] is None:
            continue
        assert [float(x) for x in got["round_times_s"].split()] == want["timing"]["round_times"]
        assert float(got["median_s"]) == want["timing"]["median"]

    # a saved run, shown and compared with itself: nothing is timed (no progress on stderr)
    code = main(["bench", "--from", str(path), "--compare", str(path), "--format", "markdown"])
    out, err = capsys.readouterr()
    assert code == 0 and err == ""
    assert out.startswith("machine: ") and "### route" in out
    assert "| size | side | median | min | IQR | rounds | vs ref | vs alt | note |" in out
    assert f"### compared with {path}" in out
    assert out.rstrip().endswith(f"0 regression(s) beyond noise of {len(timed)} case(s) compared")
    assert main(["bench", "--from", str(path), "--format", "csv", "--compare", str(path)]) == 0
    rows = _csv(capsys.readouterr().out)
    assert [r["verdict"] for r in rows if r["side"] in timed] == ["same"] * len(timed)


@pytest.mark.parametrize(
    ("args", "names"),
    [
        (["route"], ["--from shows a saved run", "OP"]),
        (["--quick", "--json", "x.json"], ["--quick, --json"]),
        (["--format", "html"], ["invalid choice: 'html'", "text", "markdown", "csv"]),
    ],
)
def test_from_usage_errors(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, args: list[str], names: list[str]
) -> None:
    path = tmp_path / "run.json"
    _run().write(path)
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--from", str(path), *args])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    for name in names:
        assert name in err


def test_from_an_unreadable_file_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["bench", "--from", str(tmp_path / "missing.json")])
    assert exc.value.code == 2 and "from: cannot read" in capsys.readouterr().err
