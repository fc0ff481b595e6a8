"""One run at a time on a run folder (issue 31): an OS file lock held for the run's life. A second run refuses
at once, naming the holder's PID and start time, before any engine starts; the kernel drops the lock when the
holder dies, so after ``kill -9`` the next run resumes the folder (the finished episodes kept, none corrupt)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from _chat_server import ChatServer

from toporoute._runlock import LOCK_NAME, RunFolderBusyError, RunLock

HOLD = """
import sys, time
from toporoute._runlock import RunLock
RunLock(sys.argv[1]).acquire()
print("held", flush=True)
time.sleep(60)
"""


def hold_in_child(folder: Path) -> subprocess.Popen[str]:
    child = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(folder)], stdout=subprocess.PIPE, text=True, start_new_session=True
    )
    assert child.stdout is not None and child.stdout.readline().strip() == "held"
    return child


def test_a_second_lock_is_refused_and_the_first_released(tmp_path: Path) -> None:
    with RunLock(tmp_path / "run") as lock:
        assert lock.held and (tmp_path / "run" / LOCK_NAME).is_file()
        with pytest.raises(RunFolderBusyError, match=f"process {os.getpid()} \\(started 20") as info:
            RunLock(tmp_path / "run").acquire()
        assert info.value.holder["pid"] == os.getpid() and info.value.arg == "out"
    assert not lock.held
    with RunLock(tmp_path / "run"):  # released: free again
        pass


def test_a_killed_holder_leaves_no_stale_lock(tmp_path: Path) -> None:
    child = hold_in_child(tmp_path)
    try:
        with pytest.raises(RunFolderBusyError, match=f"process {child.pid} "):
            RunLock(tmp_path).acquire()
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    with RunLock(tmp_path) as lock:  # the kernel dropped the dead process's lock
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid() and lock.held


def toporoute(*args: str, cwd: Path, **kw: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "toporoute", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=cwd,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
        start_new_session=True,
        **kw,
    )


def test_the_command_refuses_a_folder_in_use_before_its_engine_starts(tmp_path: Path) -> None:
    child = hold_in_child(tmp_path / "run")
    try:
        t0 = time.perf_counter()
        # the vllm engine is the default: refused before it would start (the model is never loaded)
        p = toporoute("run", "single", "--tasks", "math-demo", "--limit", "1", "--out", "run", cwd=tmp_path)
        _, err = p.communicate(timeout=120)
        took = time.perf_counter() - t0
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait(timeout=10)
    assert p.returncode == 2, err
    assert f"in process {child.pid} (started " in err and "choose another --out" in err
    assert "starting vLLM" not in err and "Traceback" not in err
    assert took < 60, took  # no model start


def test_two_runs_at_once_and_a_resume_after_kill_9(tmp_path: Path) -> None:
    server = ChatServer("The answer is \\boxed{4}.", delay_s=1.0)
    args = [
        "run",
        "single",
        "--tasks",
        "math-demo",
        "--limit",
        "8",
        "--concurrency",
        "1",
        "--engine",
        "openai",
    ]
    args += ["--model", "m", "--base-url", server.url, "--out", "run", "--no-progress"]
    episodes = tmp_path / "run" / "single" / "episodes"
    try:
        first = toporoute(*args, cwd=tmp_path)
        deadline = time.monotonic() + 120
        while len(list(episodes.glob("*.json"))) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        # a second run on the same folder, while the first runs: refused at once
        second = toporoute(*args, cwd=tmp_path)
        _, err = second.communicate(timeout=120)
        assert second.returncode == 2 and f"in process {first.pid} " in err, err
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=10)
        kept = sorted(p.name for p in episodes.glob("*.json"))
        assert 3 <= len(kept) < 8, kept
        for p in episodes.glob("*.json"):  # none corrupt: every record written whole
            assert json.loads(p.read_text())["status"] == "ok"
        stamps = {p: p.stat().st_mtime_ns for p in episodes.glob("*.json")}
        resume = toporoute(*args, cwd=tmp_path)
        _, err = resume.communicate(timeout=300)
    finally:
        server.stop()
    assert resume.returncode == 0, err[-2000:]
    assert len(list(episodes.glob("*.json"))) == 8
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())  # the kept ones were not run again
    summary = json.loads((tmp_path / "run" / "single" / "summary.json").read_text())
    assert (summary["episodes"], summary["ok"], summary["errors"]) == (8, 8, 0)
