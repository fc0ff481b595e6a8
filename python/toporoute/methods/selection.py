"""Choosing one answer among several candidates of the same task: the majority vote of self-consistency and the
last debate round (math and choice), and the test-based pick (code).

Both rules group the candidates into clusters of equal answers first (:func:`answer_clusters`): math answers
by :func:`~toporoute.tasks.math.math_equal` (``0.5`` and ``\\frac{1}{2}`` vote together), option letters as
they are, programs by their normalised source (:func:`program_key`: comments, formatting and docstrings do not
split a cluster). A candidate without an answer votes for nothing.

- :func:`majority_vote`: the largest cluster wins; a tie goes to the cluster whose first member came earliest.
- :func:`pick_by_tests`: each distinct program runs on the prompt's **visible** examples in the sandbox
  (:func:`~toporoute.tasks.codetest.run_public_tests`; the hidden tests never), and the candidate passing the
  most examples wins; ties go to the largest cluster of identical normalised programs, then to the earliest.

:func:`select_answer` applies the task kind's rule. The :class:`Pick` it returns records every candidate's
cluster, votes and (code) verdict and pass count, for the trace.
"""

from __future__ import annotations

import ast
import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from .. import _ast_parse
from ..errors import InvalidArgumentError
from ..tasks import Task, math_equal
from ..tasks.codetest import TestReport, run_public_tests

__all__ = [
    "Pick",
    "TestRunner",
    "answer_clusters",
    "majority_vote",
    "pick_by_tests",
    "program_key",
    "public_test_reports",
    "select_answer",
]

TestRunner = Callable[..., TestReport]
"""``run(task, code, *, timeout_s, memory_mb) -> TestReport``: :func:`~toporoute.tasks.codetest.run_public_tests`
or a stand-in with its signature (tests)."""


@dataclass(frozen=True)
class Pick:
    """The chosen answer and why, over ``C`` candidates.

    Attributes
    ----------
    index : int
        The chosen candidate, or -1 when no candidate holds an answer (then ``answer`` is "").
    answer : str
        The chosen candidate's answer.
    rule : {"majority", "tests"}
        The rule that chose it.
    clusters : tuple of int, length C
        Each candidate's cluster, named by its first member's index; -1 for a candidate without an answer.
    votes : tuple of int, length C
        The size of each candidate's cluster (0 without an answer).
    passed, total : tuple of (int or None), length C, or None
        ``rule="tests"``: the visible examples each candidate passed, and the number of examples (None for a
        candidate without code); None under the majority rule.
    verdicts : tuple of (str or None), length C, or None
        ``rule="tests"``: each candidate's verdict on the visible examples.
    test_s : float
        Wall time of the sandbox runs.
    """

    index: int
    answer: str
    rule: str
    clusters: tuple[int, ...]
    votes: tuple[int, ...]
    passed: tuple[int | None, ...] | None = None
    total: tuple[int | None, ...] | None = None
    verdicts: tuple[str | None, ...] | None = None
    test_s: float = 0.0

    def to_json(self) -> dict[str, Any]:
        """The trace block (``selection``)."""
        out: dict[str, Any] = {
            "rule": self.rule,
            "chosen": self.index,
            "clusters": list(self.clusters),
            "votes": list(self.votes),
        }
        if self.rule == "tests":
            out.update(
                passed=list(self.passed or ()),
                total=list(self.total or ()),
                verdicts=list(self.verdicts or ()),
                test_s=round(self.test_s, 4),
            )
        return out


def _strip_docstrings(tree: ast.AST) -> None:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            body = node.body
            first = body[0].value if body and isinstance(body[0], ast.Expr) else None
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                node.body = body[1:] or [ast.Pass()]


def program_key(code: str) -> str:
    """The normalised form of a program: parsed and unparsed without comments or docstrings, so formatting
    does not tell two programs apart; the stripped text when it does not parse."""
    try:
        tree = _ast_parse.parse(code)
    except (SyntaxError, ValueError):
        return code.strip()
    _strip_docstrings(tree)
    return ast.unparse(tree)


def _kind(task: Task) -> str:
    if task.kind not in ("code", "math", "choice"):
        raise InvalidArgumentError(f"task.kind must be code, math or choice; got {task.kind!r}", "task")
    return task.kind


def answer_clusters(task: Task, answers: Sequence[str]) -> list[int]:
    """The cluster of each answer, named by the index of its first member (-1 for an empty answer).

    Parameters
    ----------
    task : Task
        Its kind decides equality: code by :func:`program_key`, math by
        :func:`~toporoute.tasks.math.math_equal` with each cluster's first member, choice by the letter.
    answers : sequence of str, length C

    Returns
    -------
    list of int, length C
    """
    kind = _kind(task)
    out: list[int] = []
    firsts: list[int] = []  # the clusters' first members, in order
    keys: dict[str, int] = {}
    for i, a in enumerate(answers):
        if not isinstance(a, str):
            raise InvalidArgumentError(f"answers[{i}] must be a string; got {type(a).__name__}", "answers")
        if not a.strip():
            out.append(-1)
            continue
        if kind == "math":
            home = next((f for f in firsts if math_equal(a, answers[f])), None)
            if home is None:
                firsts.append(i)
                home = i
            out.append(home)
            continue
        key = program_key(a) if kind == "code" else a.strip().upper()
        out.append(keys.setdefault(key, i))
    return out


def _votes(clusters: Sequence[int]) -> list[int]:
    sizes: dict[int, int] = {}
    for c in clusters:
        if c >= 0:
            sizes[c] = sizes.get(c, 0) + 1
    return [sizes.get(c, 0) if c >= 0 else 0 for c in clusters]


def majority_vote(task: Task, answers: Sequence[str]) -> Pick:
    """The answer of the largest cluster of equal answers (:func:`answer_clusters`); a tie goes to the cluster
    whose first member came first.

    Parameters
    ----------
    task : Task
    answers : sequence of str, length C
        The candidates' extracted answers ("" for none).

    Returns
    -------
    Pick
        ``rule="majority"``; ``index`` is the winning cluster's first member.
    """
    clusters = answer_clusters(task, answers)
    votes = _votes(clusters)
    best = -1
    for i, (c, v) in enumerate(zip(clusters, votes)):
        if c == i and (best < 0 or v > votes[best]):  # first members only, so ties keep the earliest
            best = i
    answer = answers[best] if best >= 0 else ""
    return Pick(best, answer, "majority", tuple(clusters), tuple(votes))


def pick_by_tests(
    task: Task, answers: Sequence[str], reports: Sequence[TestReport | None], *, test_s: float = 0.0
) -> Pick:
    """The program passing the most visible examples; ties to the largest cluster of identical normalised
    programs, then to the earliest.

    Parameters
    ----------
    task : Task
        A code task.
    answers : sequence of str, length C
        The candidates' code ("" for none).
    reports : sequence of (TestReport or None), length C
        Each candidate's report on the visible examples (None for a candidate without code).
    test_s : float
        Wall time of the runs (recorded).

    Returns
    -------
    Pick
        ``rule="tests"``.
    """
    if len(reports) != len(answers):
        raise InvalidArgumentError(
            f"reports must have one entry per answer ({len(answers)}); got {len(reports)}", "reports"
        )
    clusters = answer_clusters(task, answers)
    votes = _votes(clusters)
    passed = [None if c < 0 or r is None else int(r.passed or 0) for c, r in zip(clusters, reports)]
    best = -1
    for i, c in enumerate(clusters):
        if c < 0:
            continue
        if best < 0 or ((passed[i] or 0), votes[i]) > ((passed[best] or 0), votes[best]):
            best = i
    return Pick(
        best,
        answers[best] if best >= 0 else "",
        "tests",
        tuple(clusters),
        tuple(votes),
        tuple(passed),
        tuple(None if c < 0 or r is None else r.total for c, r in zip(clusters, reports)),
        tuple(None if c < 0 or r is None else r.verdict for c, r in zip(clusters, reports)),
        test_s,
    )


async def public_test_reports(
    task: Task,
    answers: Sequence[str],
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 1024,
    run: TestRunner = run_public_tests,
) -> list[TestReport | None]:
    """Each candidate program's report on the prompt's visible examples, in the sandbox (a worker thread).

    Each distinct normalised program runs once; its copies share its report. Candidates without code get
    None. The hidden tests are never run here.

    Parameters
    ----------
    task : Task
        A code task.
    answers : sequence of str, length C
    timeout_s, memory_mb : limits of one sandbox run.
    run : callable
        The runner (default :func:`~toporoute.tasks.codetest.run_public_tests`).

    Returns
    -------
    list of (TestReport or None), length C
    """
    clusters = answer_clusters(task, answers)
    done: dict[int, TestReport] = {}
    for c in clusters:
        if c >= 0 and c not in done:
            done[c] = await asyncio.to_thread(run, task, answers[c], timeout_s=timeout_s, memory_mb=memory_mb)
    return [done[c] if c >= 0 else None for c in clusters]


async def select_answer(
    task: Task,
    answers: Sequence[str],
    *,
    timeout_s: float = 5.0,
    memory_mb: int = 1024,
    run: TestRunner = run_public_tests,
) -> Pick:
    """The task kind's rule: :func:`pick_by_tests` on the visible examples for code, :func:`majority_vote`
    for math and choice.

    Parameters
    ----------
    task : Task
    answers : sequence of str, length C
        The candidates' extracted answers ("" for none).
    timeout_s, memory_mb, run : see :func:`public_test_reports` (code only).

    Returns
    -------
    Pick
    """
    if _kind(task) != "code":
        return majority_vote(task, answers)
    t0 = time.perf_counter()
    reports = await public_test_reports(task, answers, timeout_s=timeout_s, memory_mb=memory_mb, run=run)
    return pick_by_tests(task, answers, reports, test_s=time.perf_counter() - t0)
