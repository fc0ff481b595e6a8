"""Running a tool, ``tool_function(input_data, **kwargs) -> str``, whose source came from somewhere untrusted (an
LLM wrote it): a static check, then one sandboxed process per call.

:func:`check_tool_source` refuses a source that does not compile, defines no ``tool_function`` taking
``input_data``, or names anything of the deny-list (``os``, ``sys``, ``subprocess``, ``exec``, ``eval``,
``__import__``, ``open``) as a whole word. :func:`run_tool` runs a source (checked first unless ``trusted``) in
:func:`~toporoute.tasks.sandbox.run_python` (time and memory limits, no network, file access kept inside its
own directory) through the runner program ``runners/run-tool.py``: the input goes in on stdin, the result comes
back on a private, nonce-tagged copy of stdout, and the tool's own printing goes to ``/dev/null``. The source is
never executed in this process.

This module knows nothing of the methods that write tools; a failed or timed-out tool is a :class:`ToolRun` with
an error, never an exception.
"""

from __future__ import annotations

import ast
import json
import re
import secrets
import time
from dataclasses import asdict, dataclass
from typing import Any

from .. import _ast_parse
from .._checks import int_at_least
from ..errors import InvalidArgumentError, ToporouteError
from ._runners import runner_program, runner_records
from .sandbox import check_limits, run_python

__all__ = ["DENY_LIST", "DENY_PATTERN", "OUTPUT_LIMIT", "ToolRun", "check_tool_source", "run_tool"]

DENY_LIST = ("os", "sys", "subprocess", "exec", "eval", "__import__", "open")
"""Names an untrusted tool source must not contain as a whole word (spec: HiVA App. A.3's governed execution)."""
DENY_PATTERN = re.compile(r"(?<![A-Za-z0-9_])(" + "|".join(map(re.escape, DENY_LIST)) + r")(?![A-Za-z0-9_])")
OUTPUT_LIMIT = 4000
"""Most characters of a tool's result kept (the rest is cut, and counted in :attr:`ToolRun.cut`)."""
_SIGNATURE = "tool_function"


@dataclass(frozen=True)
class ToolRun:
    """One tool call.

    Parameters
    ----------
    ok : bool
        The tool returned a value.
    output : str
        Its result as a string (at most :data:`OUTPUT_LIMIT` characters), "" on failure.
    error : str or None
        Why it failed: ``"denied: ..."`` (the static check refused the source; it was not run), ``"load: ..."``
        (the source raised while loading), ``"call: ..."`` (``tool_function`` raised), ``"timeout"``,
        ``"crashed: ..."`` (the process died without a report, e.g. killed for memory).
    attempts : int
        Sandboxed runs made (retries after a timeout or a crash included; 0 when the source was denied).
    wall_s : float
        Seconds over all attempts.
    cut : int
        Characters of the result left out.
    isolation : str
        The sandbox's network and file isolation of the last attempt ("" when nothing ran).
    """

    ok: bool
    output: str
    error: str | None
    attempts: int
    wall_s: float
    cut: int = 0
    isolation: str = ""

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "wall_s": round(self.wall_s, 4)}


def check_tool_source(source: str) -> str | None:
    """Why ``source`` may not run as a tool, or None when it may.

    Parameters
    ----------
    source : str
        Python source that should define ``tool_function(input_data, **kwargs)``.

    Returns
    -------
    str or None
        ``"empty source"``, ``"syntax error: ..."``, ``"no tool_function(input_data, ...) defined"`` or
        ``"deny-list: <name> (line n)"``; None when every check passes.
    """
    if not isinstance(source, str) or not source.strip():
        return "empty source"
    try:
        tree = _ast_parse.parse(source, "<tool>")
    except (SyntaxError, ValueError) as exc:
        return f"syntax error: {exc}"
    found = next(
        (n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == _SIGNATURE),
        None,
    )
    if found is None or not (found.args.posonlyargs + found.args.args):
        return f"no {_SIGNATURE}(input_data, ...) defined at the top level"
    for number, line in enumerate(source.splitlines(), 1):
        m = DENY_PATTERN.search(line)
        if m:
            return f"deny-list: {m.group(1)} (line {number})"
    return None


def run_tool(
    source: str,
    input_data: str,
    *,
    kwargs: dict[str, Any] | None = None,
    timeout_s: float = 30.0,
    memory_mb: int = 512,
    retries: int = 3,
    backoff_s: float = 0.5,
    trusted: bool = False,
) -> ToolRun:
    """Runs ``tool_function(input_data, **kwargs)`` of ``source`` in the sandbox.

    Blocking (up to ``(retries + 1) * timeout_s`` plus back-off); call it from a worker thread in async code.

    Parameters
    ----------
    source : str
        The tool's source.
    input_data : str
        Its input (sent on stdin).
    kwargs : dict, optional
        Keyword arguments, JSON-serialisable.
    timeout_s, memory_mb : float, int
        Limits of one sandboxed run (see :func:`~toporoute.tasks.sandbox.run_python`).
    retries : int
        Further attempts after a timeout or a crash without a report, waiting ``backoff_s * 2**i`` before the
        i-th; an exception inside the tool is not retried (the same input fails the same way).
    backoff_s : float
        First back-off in seconds (>= 0).
    trusted : bool
        Skip the deny-list (a tool shipped with toporoute; it still runs only in the sandbox). Syntax and the
        ``tool_function`` definition are checked either way.

    Returns
    -------
    ToolRun

    Raises
    ------
    InvalidArgumentError
        A bad argument (not a failing tool: that is a ``ToolRun`` with an error).
    """
    if not isinstance(input_data, str):
        raise InvalidArgumentError(
            f"input_data must be a string; got {type(input_data).__name__}", "input_data"
        )
    check_limits(timeout_s, memory_mb)
    int_at_least("retries", retries, 0)
    if not backoff_s >= 0:
        raise InvalidArgumentError(f"backoff_s must be >= 0; got {backoff_s!r}", "backoff_s")
    try:
        kwargs_json = json.dumps(dict(kwargs or {}))
    except (TypeError, ValueError) as exc:
        raise InvalidArgumentError(f"kwargs must be JSON-serialisable; got {exc}", "kwargs") from None
    problem = check_tool_source(source)
    if problem is not None and not (trusted and problem.startswith("deny-list")):
        return ToolRun(False, "", f"denied: {problem}", 0, 0.0)
    nonce = secrets.token_hex(16)
    program = runner_program("run-tool", source, kwargs_json, nonce, OUTPUT_LIMIT)
    start = time.perf_counter()
    error = "crashed: no report"
    isolation = ""
    attempts = 0
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff_s * 2 ** (attempt - 1))
        attempts += 1
        try:
            result = run_python(program, timeout_s=timeout_s, memory_mb=memory_mb, stdin=input_data)
        except ToporouteError as exc:  # the interpreter could not start: retried like a crash
            error = f"crashed: {exc}"
            continue
        isolation = f"{result.network_isolation}; {result.file_isolation}"
        records = runner_records(result.stdout, nonce)
        last = records[-1] if records else None
        if last is not None and last.get("stage") == "done":
            return ToolRun(
                True,
                str(last.get("output", "")),
                None,
                attempts,
                time.perf_counter() - start,
                int(last.get("cut", 0) or 0),
                isolation,
            )
        if last is not None and "error" in last:
            detail = f"{last['error']}: {last.get('message', '')}".rstrip(": ")
            return ToolRun(
                False,
                "",
                f"{last.get('stage', 'call')}: {detail}",
                attempts,
                time.perf_counter() - start,
                0,
                isolation,
            )
        if result.timed_out:
            error = f"timeout after {timeout_s:g} s"
        else:
            tail = result.stderr.strip().splitlines()[-1:] or [f"exit status {result.returncode}"]
            signal = f", signal {result.killed_by_signal}" if result.killed_by_signal else ""
            error = f"crashed: {tail[0][:300]}{signal}"
    return ToolRun(False, "", error, attempts, time.perf_counter() - start, 0, isolation)
