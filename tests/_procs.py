"""Fresh interpreters for the tests that must not share this process: ``python -c`` and the ``toporoute``
command, output captured as text, failures returned (not raised)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


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
