"""The programs that run an answer in the sandbox, kept as Python files in ``runners/`` (package data, not
modules: their names are not identifiers). Each file defines ``main``; :func:`runner_program` appends the call
with the arguments written as literals, so the sandbox gets one self-contained ``main.py``. A runner reports on
its own copy of stdout, one JSON object per line tagged with the nonce it was given (:func:`runner_records`)."""

from __future__ import annotations

import functools
import json
from importlib import resources
from typing import Any

__all__ = ["runner_program", "runner_records"]


def runner_program(name: str, *args: object) -> str:
    """The source of ``runners/<name>.py`` followed by ``main(*args)``, each argument as its ``repr``.

    Parameters
    ----------
    name : str
        ``"check-program"``, ``"public-tests"`` or ``"hidden-tests"``.
    *args
        ``main``'s arguments: str, int, or lists and tuples of them (values whose ``repr`` is a literal).

    Returns
    -------
    str
        A program for :func:`~toporoute.tasks.sandbox.run_python`.
    """
    return _source(name) + f"\n\nmain({', '.join(map(repr, args))})\n"


def runner_records(stdout: str, nonce: str) -> list[dict[str, Any]]:
    """The runner's records: lines ``<nonce> <json object>``, in order; anything else is ignored."""
    records = []
    prefix = nonce + " "
    for line in stdout.splitlines():
        if not line.startswith(prefix):
            continue
        try:
            record = json.loads(line[len(prefix) :])
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict):
            records.append(record)
    return records


@functools.cache
def _source(name: str) -> str:
    return (resources.files(__package__) / "runners" / f"{name}.py").read_text(encoding="utf-8")
