"""A run directory written before the typed trace schema (format v1, ``tests/data/run_v1``) still loads,
summarises and renders."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from _paths import DATA

from toporoute.methods.registry import report_sections
from toporoute.trace.reader import episode_rows, load_run, round_stats, summarize
from toporoute.trace.report import write_report

RUN_V1 = DATA / "run_v1"
METHODS = ["dytopo", "chain", "conductor", "qmix", "single"]


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    return Path(shutil.copytree(RUN_V1, tmp_path / "run"))


def test_old_run_loads_without_problems(run_dir: Path) -> None:
    run = load_run(run_dir)
    assert [m.name for m in run.methods] == METHODS
    assert run.problems == []
    by_name = {m.name: m for m in run.methods}
    rounds = {name: {ep: len(t) for ep, t in m.traces.items()} for name, m in by_name.items()}
    assert rounds == {
        "dytopo": {"demo-add": 2, "demo-m1": 2},
        "chain": {"demo-add": 2, "demo-m1": 2},
        "conductor": {"HumanEval-0": 2},
        "qmix": {"HumanEval-0": 2},
        "single": {"demo-add": 1, "demo-m1": 1},
    }
    for m in run.methods:
        s = summarize(m)
        assert s["episodes"] == s["ok"] == len(m.traces) and s["errors"] == 0
        assert [r.status for r in episode_rows(m)] == ["ok"] * len(m.traces)
        assert all(r.tokens and r.tokens > 0 for r in round_stats(m))
    assert summarize(by_name["dytopo"])["passed"] == 2


def test_old_run_renders(run_dir: Path) -> None:
    paths = write_report(run_dir, sections=report_sections())
    page = paths.html.read_text(encoding="utf-8")
    for name in METHODS:
        assert f">{name}<" in page
    for episode in ("demo-add", "demo-m1", "HumanEval-0"):
        assert episode in page
    assert "[NO YAML FOUND]" in page  # the conductor's invalid first turn
