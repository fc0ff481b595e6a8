"""HiVA's environment E_env (spec §2, §8.13): what judges an iteration's answer, without leaking the hidden
tests or the gold answer unless the run asks for the oracle.

- Code: the prompt's visible examples (:func:`~toporoute.tasks.codetest.run_public_tests`) give both the
  feedback and the signal; with ``oracle_feedback`` the feedback comes from the task's hidden tests instead
  (:func:`~toporoute.tasks.codetest.run_hidden_tests`), while the signal that picks the best answer and stops
  early stays the visible examples'.
- Code under ``environment="self-critique"`` (the paper's w/o Env): the self-critique, as for math; with
  ``oracle_feedback`` the feedback is the hidden tests' verdict, the signal still the self-critique's.
- Math: a self-critique (consistency, completeness, alignment; the paper's w/o-Env variant) gives the feedback
  and the signal; with ``oracle_feedback`` the feedback says whether the answer equals the gold answer (without
  revealing it).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from ...tasks import Task, codetest, math_equal
from ...tasks.codetest import NO_TESTS

__all__ = ["Outcome", "code_critique_outcome", "code_outcome", "math_outcome"]


@dataclass(frozen=True)
class Outcome:
    """What the environment says of one answer.

    Parameters
    ----------
    text : str
        The outcome the loss sees.
    success : bool
        The feedback's success (the oracle's, under ``oracle_feedback``).
    signal : float
        The non-oracle score in [0, 1] that picks the best answer.
    signal_ok : bool
        The non-oracle success (early stop).
    source : str
        ``public-tests``, ``hidden-tests``, ``self-critique`` or ``gold-answer``: where ``text`` came from.
    details : dict
        The test verdicts, for the trace.
    """

    text: str
    success: bool
    signal: float
    signal_ok: bool
    source: str
    details: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "text": self.text,
            "success": self.success,
            "signal": round(self.signal, 4),
            "signal_ok": self.signal_ok,
            **self.details,
        }


async def _oracle_verdict(
    task: Task, code: str, details: dict[str, Any], timeout_s: float, memory_mb: int
) -> tuple[str, bool, str]:
    """The hidden tests' verdict on ``code`` as the feedback (``oracle_feedback``): its text, success and
    source; the verdict goes into ``details``."""
    hidden = await asyncio.to_thread(
        codetest.run_hidden_tests, task, code, timeout_s=timeout_s, memory_mb=memory_mb
    )
    details["hidden"] = {"verdict": hidden.verdict}
    return (
        _report_text("the task's hidden tests (oracle)", hidden.verdict, hidden.logs),
        hidden.ok,
        "hidden-tests",
    )


async def code_outcome(task: Task, code: str, *, oracle: bool, timeout_s: float, memory_mb: int) -> Outcome:
    """The visible examples' verdict on ``code`` (run in the sandbox, in a worker thread); the hidden tests'
    verdict as the feedback only when ``oracle``."""
    public = await asyncio.to_thread(
        codetest.run_public_tests, task, code, timeout_s=timeout_s, memory_mb=memory_mb
    )
    if public.ok:
        signal = 1.0
    elif public.verdict == NO_TESTS:
        signal = 0.5
    else:
        signal = 0.9 * (public.passed or 0) / public.total if public.total else 0.0
    details: dict[str, Any] = {
        "public": {"verdict": public.verdict, "passed": public.passed, "total": public.total}
    }
    text = _report_text("the examples shown in the problem", public.verdict, public.logs)
    success, source = public.ok, "public-tests"
    if oracle:
        text, success, source = await _oracle_verdict(task, code, details, timeout_s, memory_mb)
    return Outcome(text, success, signal, public.ok, source, details)


async def code_critique_outcome(
    task: Task,
    code: str,
    critique: str,
    verdict: bool | None,
    *,
    oracle: bool,
    timeout_s: float,
    memory_mb: int,
) -> Outcome:
    """The self-critique (its text and its PASS/FAIL verdict, None when unreadable) of a program as the
    feedback and the signal, no test run; under ``oracle`` the feedback is the hidden tests' verdict."""
    signal = 1.0 if verdict else 0.0
    details: dict[str, Any] = {"critique_verdict": verdict}
    text = critique.strip() or "The self-critique gave no assessment."
    success, source = bool(verdict), "self-critique"
    if oracle:
        text, success, source = await _oracle_verdict(task, code, details, timeout_s, memory_mb)
    return Outcome(text, success, signal, bool(verdict), source, details)


def _report_text(what: str, verdict: str, logs: str) -> str:
    return f"Tests run: {what}.\nVerdict: {verdict}\n{logs}".strip()


def math_outcome(task: Task, answer: str, critique: str, verdict: bool | None, *, oracle: bool) -> Outcome:
    """The self-critique (its text and its PASS/FAIL verdict, None when unreadable) as the feedback and the
    signal; under ``oracle`` the feedback is whether ``answer`` equals the gold answer."""
    signal = 1.0 if verdict else 0.0
    details: dict[str, Any] = {"critique_verdict": verdict}
    if not oracle:
        text = critique.strip() or "The self-critique gave no assessment."
        return Outcome(text, bool(verdict), signal, bool(verdict), "self-critique", details)
    ok = bool(answer) and math_equal(answer, task.answer)
    shown = answer or "(no final answer found)"
    text = f"The final answer {shown} is {'correct' if ok else 'incorrect'}."
    details["gold_match"] = ok
    return Outcome(text, ok, signal, bool(verdict), "gold-answer", details)
