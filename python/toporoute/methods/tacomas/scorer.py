"""TacoMAS's pluggable answer scorer s_t (spec A1): what decides the stop at τ, the slow step's gate and, with
``final="best"``, the answer. The published code scores with the gold rubric, leaking the grader into all three;
here the default never reads the reference:

- ``verifier`` (default): a reference-free LLM verifier reads the task and the sink's answer and returns
  ``{"score", "reason"}`` (its request goes out with the round's judge calls);
- ``tests``: for a code task, the prompt's visible examples run on the answer in the sandbox
  (:func:`~toporoute.tasks.codetest.run_public_tests`): the share of examples passed. A task without visible
  examples (or not a code task) falls back to the verifier, recorded in the round;
- ``oracle``: the task's own scorer (hidden tests, gold answer; :func:`toporoute.tasks.score`): only when asked
  for, recorded in the run's params, every round and the episode, and labelled in the report.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from ...llm.types import Result
from ...tasks import Task, score
from ...tasks.codetest import public_examples, run_public_tests
from .parsing import json_of, parse_verdict

__all__ = ["AnswerScore", "programmatic_score", "uses_verifier", "verifier_score"]


@dataclass(frozen=True)
class AnswerScore:
    """One round's s_t.

    Attributes
    ----------
    score : float or None
        In [0, 1]; None when the scorer gave nothing usable (then the round does not stop and a slow step is
        not gated by it).
    scorer : str
        The scorer that produced it: ``verifier``, ``tests`` or ``oracle``.
    detail : str
        Its reason or test verdict (and a fallback's cause).
    error : str or None
    """

    score: float | None
    scorer: str
    detail: str
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"score": self.score, "scorer": self.scorer, "detail": self.detail, "error": self.error}


def uses_verifier(scorer: str, task: Task) -> tuple[bool, str]:
    """Whether the round's s_t comes from the verifier call, and why (the ``tests`` fallback's cause)."""
    if scorer == "verifier":
        return True, ""
    if scorer == "tests":
        if task.kind != "code" or not task.entry_point:
            return True, f"tests: a {task.kind} task has no visible examples to run; the verifier scored it"
        if not public_examples(task):
            return True, "tests: the prompt shows no examples; the verifier scored it"
    return False, ""


def verifier_score(result: Result, note: str = "") -> AnswerScore:
    """The verifier's s_t from its call's result (None with an error when unusable; clamped when out of
    range)."""
    verdict = parse_verdict(*json_of(result))
    detail = f"{note} {verdict.reason}".strip()
    return AnswerScore(verdict.score, "verifier", detail, verdict.error)


async def programmatic_score(
    scorer: str, task: Task, answer: str, *, timeout_s: float, memory_mb: int
) -> AnswerScore:
    """s_t of the ``tests`` scorer (share of the visible examples passed; 1.0 when all pass) or of the
    ``oracle`` (1.0 when the task's own scorer passes the answer, else 0.0), run in a worker thread."""
    if scorer == "tests":
        report = await asyncio.to_thread(
            run_public_tests, task, answer or None, timeout_s=timeout_s, memory_mb=memory_mb
        )
        total = report.total or 0
        value = 1.0 if report.ok else ((report.passed or 0) / total if total else 0.0)
        return AnswerScore(value, "tests", f"{report.verdict}: {report.passed or 0}/{total} visible examples")
    verdict = await asyncio.to_thread(score, task, answer or None, timeout_s=timeout_s, memory_mb=memory_mb)
    detail = f"{verdict.status}: {verdict.detail}".strip().rstrip(":")
    return AnswerScore(1.0 if verdict.passed else 0.0, "oracle", detail)
