"""The trace's round-to-round edge statistic is a Jaccard similarity (``stats.jaccard_similarity_prev``), as the
spec asks; traces written before it hold ``jaccard_prev``, a distance, and load converted."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from _paths import DATA
from test_methods import TASK, one_episode, team_engine

from toporoute import ops
from toporoute.methods import make_method
from toporoute.trace.reader import load_run
from toporoute.trace.schema import RoundRecord, Stats

RUN_V1 = DATA / "run_v1"


def _adj(n: int, edges: list[tuple[int, int]]) -> np.ndarray:
    adj = np.zeros((n, n), dtype=bool)
    for s, d in edges:
        adj[s, d] = True
    return adj


@pytest.mark.parametrize(
    ("before", "after", "similarity"),
    [
        ([(0, 1), (1, 2)], [(0, 1), (2, 0)], 0.3333),  # one shared edge of three
        ([(0, 1), (1, 2)], [(1, 2), (0, 1)], 1.0),  # the same graph
        ([(0, 1)], [(1, 0)], 0.0),  # nothing shared
        ([], [], 1.0),  # two empty graphs are the same graph
        ([(0, 1), (0, 2), (1, 2)], [(0, 1)], 0.3333),
    ],
)
def test_a_known_pair_of_rounds_gives_its_jaccard_similarity(before, after, similarity: float) -> None:
    stats = Stats.of(ops.graph_stats(_adj(3, after), prev=_adj(3, before)))
    assert stats.jaccard_similarity_prev == pytest.approx(similarity, abs=1e-12)
    assert Stats.of(ops.graph_stats(_adj(3, after))).jaccard_similarity_prev is None  # a first round
    d = stats.to_json()
    assert d["jaccard_similarity_prev"] == stats.jaccard_similarity_prev and "jaccard_prev" not in d
    assert Stats.from_json(json.loads(json.dumps(d))) == stats


def test_the_old_field_is_read_as_a_distance() -> None:
    old = {"edges": 2, "density": 0.5, "reciprocity": 0.0}
    assert Stats.from_json({**old, "jaccard_prev": 0.25}).jaccard_similarity_prev == 0.75
    assert Stats.from_json({**old, "jaccard_prev": 1.0}).jaccard_similarity_prev == 0.0
    assert Stats.from_json({**old, "jaccard_prev": 0.6667}).jaccard_similarity_prev == 0.3333
    assert Stats.from_json({**old, "jaccard_prev": None}).jaccard_similarity_prev is None
    assert Stats.from_json(old).jaccard_similarity_prev is None
    # a file with the new field is read as it is
    assert Stats.from_json({**old, "jaccard_similarity_prev": 0.25}).jaccard_similarity_prev == 0.25


def test_loop_records_the_similarity_of_consecutive_rounds() -> None:
    """The chain's graph is the same every round: similarity 1 (the old field said 0, a distance)."""
    _, records, _ = asyncio.run(one_episode(make_method("chain", rounds=3), TASK, team_engine()))
    sims = [None if r.stats is None else r.stats.jaccard_similarity_prev for r in records]
    assert sims == [None, 1.0, 1.0]
    line = records[1].to_json()
    assert line["stats"]["jaccard_similarity_prev"] == 1.0 and "jaccard_prev" not in line["stats"]
    assert RoundRecord.from_json(json.loads(json.dumps(line))).stats == records[1].stats


def test_v1_fixture_loads_with_converted_similarities(tmp_path: Path) -> None:
    run = load_run(shutil.copytree(RUN_V1, tmp_path / "run"))
    assert run.problems == []
    checked = {}
    for m in run.methods:
        for episode, records in m.traces.items():
            raw = (RUN_V1 / m.name / "traces" / f"{episode}.jsonl").read_text(encoding="utf-8").splitlines()
            for rec, line in zip(records, raw):
                old = json.loads(line).get("stats", {}).get("jaccard_prev")
                if old is None:
                    continue
                assert rec.stats is not None and rec.stats.jaccard_similarity_prev == 1.0 - old
                # and it is the Jaccard similarity of the edge sets the file holds
                prev = {(e.src, e.dst) for e in records[rec.round - 1].graph.edges}
                now = {(e.src, e.dst) for e in rec.graph.edges}
                union = prev | now
                assert rec.stats.jaccard_similarity_prev == (len(prev & now) / len(union) if union else 1.0)
                checked[(m.name, episode, rec.round)] = rec.stats.jaccard_similarity_prev
    # the fixture's dytopo and chain graphs repeat (distance 0); qmix's round 2 shares no edge (distance 1)
    assert checked[("dytopo", "demo-add", 1)] == 1.0 and checked[("chain", "demo-m1", 1)] == 1.0
    assert checked[("qmix", "HumanEval-0", 1)] == 0.0
    assert len(checked) == 5
