"""Throughput of a run on Ray actors against the number of actors, with an engine of fixed simulated latency.

Each actor opens its own engine: the scripted DyTopo team of the method tests, every engine call taking
``LATENCY_S`` however many requests it holds (a server whose batch costs the same up to its size), and runs at
most ``PER_ACTOR`` episodes at once (``--concurrency``, the engine's capacity). Each run starts a local Ray
cluster with its actors and writes a fresh folder; the time is the summary's ``wall_s``, from the first episode
sent to the last one back (the cluster's start, the actors' engines and their methods' encoder are not timed). Both runs must finish every episode with the same calls per task.

Printed: episodes per second with 1 and 2 actors and their ratio (target >= 1.7x, issue 37). No timing
assertions.

Run: ``TOPOROUTE_BENCH=full python -m pytest bench/test_bench_ray.py -s``; under ``--benchmark-disable`` (CI)
smoke sizes.
"""

from __future__ import annotations

import asyncio
import dataclasses
from functools import partial
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'toporoute[ray]')")

from test_methods import MATH, TASK, team_engine

from toporoute.distributed.ray_run import MethodJob, RayCluster, RayOptions
from toporoute.llm.scripted import ScriptedEngine
from toporoute.methods import make_method

from ._compare import machine
from ._scale import pick

TASKS = pick(32, 8)
PER_ACTOR = pick(4, 2)
LATENCY_S = pick(0.25, 0.2)


async def latency_team(latency_s: float) -> ScriptedEngine:
    """The scripted team, each engine call taking ``latency_s``."""
    return team_engine(done_at=2, latency_s=latency_s)


def dytopo_warm() -> Any:
    """DyTopo with its encoder loaded and run once: the actors' first episodes do not time the model's load."""
    from toporoute.embed import Encoder

    encoder = Encoder.default()
    encoder.encode(["I need a warm start.", "I provide one."])
    return make_method("dytopo", encoder=encoder)


async def _timed(actors: int, out: Path) -> tuple[float, dict[str, Any]]:
    tasks = [TASK, MATH] + [
        dataclasses.replace(MATH, id=f"m{i}", prompt=f"{MATH.prompt} ({i})") for i in range(TASKS - 2)
    ]
    options = RayOptions(actors=actors, concurrency=PER_ACTOR)
    async with RayCluster(options, partial(latency_team, LATENCY_S)) as cluster:
        summary = await cluster.run_method(
            make_method("dytopo"),
            MethodJob(dytopo_warm),
            tasks,
            out,
            model="scripted",
            engine="ScriptedEngine",
            progress=False,
        )
        return float(summary["wall_s"]), summary  # from the first episode sent to the last one back


def test_throughput_scales_with_actors(tmp_path: Path) -> None:
    one, s1 = asyncio.run(_timed(1, tmp_path / "one"))
    two, s2 = asyncio.run(_timed(2, tmp_path / "two"))
    assert s1["ok"] == s2["ok"] == TASKS and s1["calls_per_task"] == s2["calls_per_task"]
    print(
        f"\n[cpu] {machine()}; DyTopo, {TASKS} episodes, {PER_ACTOR} per actor at once, {LATENCY_S * 1e3:.0f} ms "
        f"per engine call\n[ratio] Ray actors, episodes/s: 1 actor {TASKS / one:.2f} ({one:.2f} s), 2 actors "
        f"{TASKS / two:.2f} ({two:.2f} s) = {one / two:.2f}x "
        f"({'meets' if one / two >= 1.7 else 'BELOW'} target >= 1.7x)"
    )
