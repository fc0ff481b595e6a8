"""Fresh interpreters for the tests that must not share this process: ``python -c`` and the ``toporoute``
command, output captured as text, failures returned (not raised); and the servers that tests and benchmarks
start as processes (a free port, waiting for ``/health``)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import httpx


def run_python(
    code: str, cwd: Path, *, env: dict[str, str] | None = None, timeout: float = 120
) -> subprocess.CompletedProcess[str]:
    """``python -c code`` in ``cwd`` (``env``: the whole environment; default this process's)."""
    return _run([sys.executable, "-c", code], cwd, env, timeout)


def run_toporoute(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """``python -m toporoute args`` in ``cwd``, unbuffered, with this process's environment."""
    return _run([sys.executable, "-m", "toporoute", *args], cwd, {**os.environ, "PYTHONUNBUFFERED": "1"}, 300)


def _run(
    argv: list[str], cwd: Path, env: dict[str, str] | None, timeout: float
) -> subprocess.CompletedProcess[str]:
    """``argv`` in ``cwd``, its output captured as text; a failure is returned, not raised."""
    return subprocess.run(
        argv, check=False, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def replay_args(tasks: Path | str, transcript: Path, out: Path) -> list[str]:
    """The options of a ``run`` or ``train`` on a replayed transcript: tasks, engine, transcript, output folder."""
    return ["--tasks", str(tasks), "--engine", "replay", "--replay", str(transcript), "--out", str(out)]


def free_port() -> int:
    """A TCP port of 127.0.0.1 that no one listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_healthy(
    proc: subprocess.Popen[bytes],
    url: str,
    *,
    what: str,
    timeout_s: float,
    poll_s: float = 0.1,
    detail: Callable[[], str] = lambda: "",
) -> None:
    """Returns once ``url`` + ``/health`` answers 200; raises RuntimeError naming ``what`` (and ``detail()``, e.g.
    the tail of its log) when the process exits first or ``timeout_s`` pass."""
    deadline = time.monotonic() + timeout_s
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode}\n{detail()}")
        try:
            if httpx.get(f"{url}/health", timeout=2.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} did not answer /health in {timeout_s:.0f} s\n{detail()}")
        time.sleep(poll_s)
