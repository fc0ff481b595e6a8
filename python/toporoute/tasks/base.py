"""The task and score records shared by every task set: plain frozen values, safe to pass between threads."""

from __future__ import annotations

import hashlib
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import InvalidArgumentError

__all__ = ["KINDS", "STATUSES", "Score", "Task"]

KINDS = ("code", "math", "choice")
STATUSES = ("passed", "failed", "timeout", "error", "no-answer")

_SAFE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
# Without "-": the set of ids that are their own episode id. Ids with "-" always get a hash suffix, which
# keeps them apart from the ids whose only unsafe character is "/" (those map to "-" without a hash).
_SAFE_NO_DASH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._]{0,127}$")
_UNSAFE_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
_HASH_LEN = 10
_LETTERS = string.ascii_uppercase  # the option letters of a choice task (tasks.choice.LETTERS)


@dataclass(frozen=True)
class Task:
    """One benchmark problem.

    Parameters
    ----------
    id : str
        Unique id within its set, e.g. ``"HumanEval/0"``.
    kind : str
        ``"code"`` (scored by running ``test``), ``"math"`` (scored against ``answer``) or ``"choice"``
        (multiple choice: the chosen option's letter must be ``answer``).
    prompt : str
        Code: the function signature and docstring (HumanEval's ``prompt``). Math: the problem text. Choice: the
        question, without its options (:func:`~toporoute.tasks.choice.choice_prompt` shows both).
    entry_point : str or None
        Code: the name of the function under test.
    test : str or None
        Code: a test program defining ``check(candidate)``.
    answer : str or None
        Math: the reference answer. Choice: the letter of the correct option (``"A"`` for ``choices[0]``).
    choices : tuple of str or None
        Choice: the options, 2 to 26 non-empty strings, lettered A, B, ... in order.
    meta : Mapping
        Free-form JSON-serialisable extras (source, difficulty, ...). Copied on construction; not hashed.
    """

    id: str
    kind: str
    prompt: str
    entry_point: str | None = None
    test: str | None = None
    answer: str | None = None
    meta: Mapping[str, Any] = field(default_factory=dict, hash=False)
    choices: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id:
            raise InvalidArgumentError(f"Task.id must be a non-empty string; got {self.id!r}", "id")
        if self.kind not in KINDS:
            raise InvalidArgumentError(
                f"Task.kind must be 'code', 'math' or 'choice'; got {self.kind!r}", "kind"
            )
        if not isinstance(self.prompt, str):
            raise InvalidArgumentError(
                f"Task.prompt must be a string; got {type(self.prompt).__name__}", "prompt"
            )
        if not isinstance(self.meta, Mapping):
            raise InvalidArgumentError(f"Task.meta must be a mapping; got {type(self.meta).__name__}", "meta")
        # a private copy: the caller's dict stays theirs, and two tasks never share one
        object.__setattr__(self, "meta", dict(self.meta))
        self._check_choices()

    def _check_choices(self) -> None:
        """``choices`` and ``answer`` of a choice task; ``choices`` is None on the other kinds."""
        if self.kind != "choice":
            if self.choices is not None:
                raise InvalidArgumentError(
                    f"Task.choices is for choice tasks; got choices on a {self.kind} task", "choices"
                )
            return
        choices = self.choices
        if (
            isinstance(choices, (str, bytes))
            or not isinstance(choices, Sequence)
            or not 2 <= len(choices) <= len(_LETTERS)
            or not all(isinstance(c, str) and c.strip() for c in choices)
        ):
            raise InvalidArgumentError(
                f"Task.choices of a choice task must be 2 to {len(_LETTERS)} non-empty strings; got {choices!r}",
                "choices",
            )
        object.__setattr__(self, "choices", tuple(choices))
        letters = _LETTERS[: len(choices)]
        if self.answer not in tuple(letters):
            raise InvalidArgumentError(
                f"Task.answer of a choice task must be the letter of one of its {len(choices)} choices "
                f"({letters[0]}-{letters[-1]}); got {self.answer!r}",
                "answer",
            )

    @property
    def episode_id(self) -> str:
        """A filename-safe form of :attr:`id` (``^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$``).

        Deterministic, and distinct for distinct ids: an id that is already safe and has no ``-`` is kept; one
        whose only unsafe character is ``/`` has it replaced by ``-`` (``"HumanEval/0"`` ->
        ``"HumanEval-0"``); any other id is sanitised and gets ``-`` plus a short SHA-256 of the id appended.
        """
        return episode_id_for(self.id)


def episode_id_for(task_id: str) -> str:
    """The :attr:`Task.episode_id` of an id (see there)."""
    if _SAFE_NO_DASH.match(task_id):
        return task_id
    if "-" not in task_id:
        slashed = task_id.replace("/", "-")
        if _SAFE.match(slashed):
            return slashed
    digest = hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest()[:_HASH_LEN]
    base = _UNSAFE_CHARS.sub("-", task_id).strip("-._")[: 127 - _HASH_LEN - 1]
    if not base or not base[0].isalnum():
        base = "t" + base[: 127 - _HASH_LEN - 2]
    return f"{base}-{digest}"


@dataclass(frozen=True)
class Score:
    """The verdict on one answer.

    Parameters
    ----------
    passed : bool
        Whether the answer is correct.
    status : str
        ``"passed"``, ``"failed"`` (wrong answer or a failing test), ``"timeout"``, ``"error"`` (the program
        could not run: syntax error, crash) or ``"no-answer"`` (nothing to score in the reply).
    detail : str
        Short explanation: the failing assertion or exception line, the extracted answer; at most 500 chars.
    """

    passed: bool
    status: str
    detail: str = ""

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise InvalidArgumentError(
                f"Score.status must be one of {', '.join(STATUSES)}; got {self.status!r}", "status"
            )
        if self.passed != (self.status == "passed"):
            raise InvalidArgumentError(
                f"Score.passed must be True exactly when status is 'passed'; got passed={self.passed!r} "
                f"with status {self.status!r}",
                "passed",
            )
        object.__setattr__(self, "detail", clip(self.detail))


def clip(text: str, limit: int = 500) -> str:
    """``text`` cut to ``limit`` characters, marking the cut with an ellipsis."""
    text = str(text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
