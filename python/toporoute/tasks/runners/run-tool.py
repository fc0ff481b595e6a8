"""Runs one tool, ``tool_function(input_data, **kwargs) -> str``, on the text of stdin (see toporoute.tasks.tools).

The tool's source is compiled as ``<tool>`` and executed in a fresh namespace; ``tool_function`` is called with
the whole of stdin and the keyword arguments decoded from JSON, and its result (made a string) is reported on a
private copy of stdout as "<nonce> <json>". The tool's own output goes to /dev/null, so printing cannot forge a
result.

A resource file of toporoute.tasks, not a module: toporoute.tasks._runners appends
``main(source, kwargs_json, nonce, limit)``.
"""

import inspect
import json
import os
import sys
import traceback


def main(source, kwargs_json, nonce, limit):
    fd = os.dup(1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)

    def emit(**record):
        os.write(fd, f"\n{nonce} {json.dumps(record)}\n".encode("utf-8", "replace"))

    def failure(stage, exc):
        frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<tool>"]
        lines = traceback.format_list(frames[-3:]) + traceback.format_exception_only(type(exc), exc)
        emit(stage=stage, error=type(exc).__name__, message=str(exc)[:500], trace="".join(lines)[-1200:])

    input_data = sys.stdin.read()
    namespace = {"__name__": "tool"}
    try:
        exec(compile(source, "<tool>", "exec"), namespace)
    except BaseException as exc:
        failure("load", exc)
        return
    fn = namespace.get("tool_function")
    if not callable(fn):
        emit(
            stage="load", error="MissingToolFunction", message="the source defines no callable tool_function"
        )
        return
    kwargs = json.loads(kwargs_json)
    try:  # keyword arguments the tool does not take are left out (an LLM-written tool may take none)
        params = inspect.signature(fn).parameters.values()
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            names = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
            kwargs = {k: v for k, v in kwargs.items() if k in names}
    except (TypeError, ValueError):
        pass
    try:
        value = fn(input_data, **kwargs)
    except BaseException as exc:
        failure("call", exc)
        return
    try:
        text = value if isinstance(value, str) else str(value)
    except BaseException as exc:
        failure("result", exc)
        return
    emit(stage="done", output=text[:limit], cut=max(0, len(text) - limit))
