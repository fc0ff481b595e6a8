"""Episodes on a local Ray cluster (``toporoute run ... --ray``): the same episode records and traces as a local
run, an interrupted run resumed losing only the episodes in flight, an actor that dies mid-run replaced by the
others. Each test starts its own local cluster (two actors, a CPU each; about 5 s)."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from _golden_runs import _clean, _folder, differences
from _procs import replay_args
from _procs import run_toporoute as toporoute
from test_methods import MATH, TASK, team_engine

from toporoute.llm import ReplayEngine, ScriptedEngine, Structured
from toporoute.methods import make_method
from toporoute.methods.harness import run_method
from toporoute.tasks import Task, load_tasks, write_tasks_jsonl

pytest.importorskip("ray", reason="the ray extra is not installed (pip install 'toporoute[ray]')")


def _tasks(n: int) -> list[Task]:
    """TASK (code), MATH and ``n - 2`` math variants of other ids and prompts (so each has its own replies)."""
    more = [
        dataclasses.replace(MATH, id=f"m{i}", prompt=f"{MATH.prompt} (variant {i})") for i in range(n - 2)
    ]
    return [TASK, MATH, *more]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Six tasks in a file and a transcript of DyTopo on them, recorded from the scripted team."""
    root = tmp_path_factory.mktemp("ray")
    tasks_file, transcript = root / "tasks.jsonl", root / "transcript.jsonl"
    write_tasks_jsonl(_tasks(6), tasks_file)

    async def record() -> None:
        engine = Structured(ReplayEngine(transcript, team_engine(done_at=2)))
        await run_method(make_method("dytopo"), load_tasks(str(tasks_file)), engine, root / "scratch")
        await engine.aclose()

    asyncio.run(record())
    return tasks_file, transcript


def _same_results(a: Path, b: Path) -> None:
    """Two method folders hold the same episode records, traces and totals (what varies between runs aside;
    the engine calls and batch sizes depend on how episodes met in batches)."""
    left, right = _folder(a), _folder(b)
    assert sorted(left["episodes"]) == sorted(right["episodes"]) and left["episodes"]
    for part in ("episodes", "traces"):
        assert differences(left[part], right[part]) == [], part
    batching = {"engine_calls", "mean_batch"}
    sums = [{k: v for k, v in side["summary"].items() if k not in batching} for side in (left, right)]
    assert differences(*sums) == []


def test_a_ray_run_writes_what_a_local_run_writes(recorded: tuple[Path, Path], tmp_path: Path) -> None:
    tasks_file, transcript = recorded
    local, on_ray = tmp_path / "local", tmp_path / "ray"
    p = toporoute("run", "dytopo", *replay_args(tasks_file, transcript, local), "--no-progress", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    args = ["run", "dytopo", *replay_args(tasks_file, transcript, on_ray), "--ray", "--ray-actors", "2"]
    p = toporoute(*args, "--concurrency", "2", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "ray: 2 actor(s) on 1 node(s)" in p.stderr and "2 actors" in p.stderr  # the progress bar's actors
    _same_results(local / "dytopo", on_ray / "dytopo")
    run = json.loads((on_ray / "dytopo" / "run.json").read_text())
    assert run["ray"]["actors"] == 2 and run["ray"]["concurrency_per_actor"] == 2
    # the same folder resumed: every episode is finished, none runs again
    stamps = {f: f.stat().st_mtime_ns for f in (on_ray / "dytopo").glob("*/*.json*")}
    p = toporoute(*args, cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    assert {f: f.stat().st_mtime_ns for f in (on_ray / "dytopo").glob("*/*.json*")} == stamps
    # a folder of a local run is refused with other settings, and --record is one clear error
    p = toporoute(*args, "--max-tokens", "64", cwd=tmp_path)
    assert p.returncode != 0 and "other settings" in p.stderr
    p = toporoute(*args[:-3], "--ray", "--record", str(tmp_path / "r.jsonl"), cwd=tmp_path)
    assert p.returncode != 0 and "--record cannot be used with --ray" in p.stderr


async def held_team() -> Any:
    """The scripted team, answering the calls of the first two tasks' episodes only: the calls of any later
    episode wait until the run is cut, so exactly two episodes finish and the next ones are in flight (however
    slowly the machine runs the test)."""
    return _Held(team_engine(done_at=2, latency_s=0.05), {t.episode_id for t in _tasks(2)})


class _Team:
    """The scripted team behind a ``generate`` of a test's own."""

    def __init__(self, inner: ScriptedEngine) -> None:
        self.inner, self.name = inner, inner.name
        self.supports_guided_json = inner.supports_guided_json

    async def aclose(self) -> None:
        await self.inner.aclose()


class _Held(_Team):
    def __init__(self, inner: ScriptedEngine, answered: set[str]) -> None:
        super().__init__(inner)
        self.answered = answered

    async def generate(self, requests: Any) -> Any:
        if any(r.tags.episode not in self.answered for r in requests):
            await asyncio.Event().wait()  # held until the actor is stopped
        return await self.inner.generate(requests)


async def dying_team(marker: str) -> Any:
    """The scripted team; the first actor to call it ends its own process at that call (``marker`` records
    that one did)."""
    return _Dying(team_engine(done_at=2, latency_s=0.05), Path(marker))


class _Dying(_Team):
    def __init__(self, inner: ScriptedEngine, marker: Path) -> None:
        super().__init__(inner)
        self.marker = marker

    async def generate(self, requests: Any) -> Any:
        try:
            fd = os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return await self.inner.generate(requests)
        os.close(fd)
        os._exit(1)  # the actor's process dies with this episode (and any other) in flight


_DRIVER = """
import asyncio, sys
from functools import partial
from pathlib import Path
from test_ray_run import _tasks, held_team, dying_team
from toporoute.distributed.ray_run import MethodJob, RayOptions, run_method_on_ray
from toporoute.methods import make_method

factory = held_team if sys.argv[2] == "held" else partial(dying_team, sys.argv[3])
asyncio.run(run_method_on_ray(make_method("dytopo"), MethodJob(partial(make_method, "dytopo")), factory, _tasks(8),
    Path(sys.argv[1]), options=RayOptions(actors=2, concurrency=1), model="scripted", engine="ScriptedEngine",
    progress=False))
"""


def _driver(out: Path, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    return subprocess.Popen(
        [sys.executable, "-c", _DRIVER, str(out), *args],
        cwd=out.parent,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def test_an_interrupted_ray_run_resumes_and_survives_a_dead_actor(tmp_path: Path) -> None:
    out, reference = tmp_path / "dytopo", tmp_path / "reference"
    asyncio.run(
        run_method(make_method("dytopo"), _tasks(8), team_engine(done_at=2), reference, progress=False)
    )
    # cut with Ctrl-C once two episodes are done: two actors, one episode each at a time; the next two episodes
    # are held in flight (held_team)
    proc = _driver(out, "held")
    deadline = time.monotonic() + 120
    while len(list(out.glob("episodes/*.json"))) < 2:
        assert proc.poll() is None, proc.communicate()[0][-3000:]
        assert time.monotonic() < deadline, "no episode finished in 120 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    try:
        text = proc.communicate(timeout=120)[0]
    except subprocess.TimeoutExpired:
        proc.kill()
        pytest.fail(f"the driver went on for 120 s after Ctrl-C:\n{proc.communicate()[0][-3000:]}")
    assert proc.returncode != 0, text[-3000:]
    assert "KeyboardInterrupt" in text, text[-3000:]
    done = {f: f.stat().st_mtime_ns for f in out.glob("episodes/*.json")}
    assert len(done) == 2, text[-3000:]  # the episodes in flight were lost, nothing else
    assert all(json.loads(f.read_text())["status"] == "ok" for f in done)
    assert {f.stem for f in out.glob("traces/*.jsonl")} >= {f.stem for f in done}
    # resumed on two new actors, one of which dies at its first call: its episode goes to the other
    marker = tmp_path / "died"
    proc = _driver(out, "dying", str(marker))
    text = proc.communicate(timeout=300)[0]
    assert proc.returncode == 0, text[-3000:]
    assert marker.exists() and "died" in text
    assert {f: f.stat().st_mtime_ns for f in done} == done  # finished episodes were not run again
    _same_results(reference, out)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["episodes"] == 8 and summary["ok"] == 8, summary
    assert _clean(json.loads((out / "run.json").read_text()))["task_ids"] == [t.id for t in _tasks(8)]
