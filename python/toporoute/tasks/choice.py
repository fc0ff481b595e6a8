"""Multiple-choice tasks (``kind == "choice"``): the options as the agents see them, the chosen letter in a reply,
and the score (the chosen letter equals the task's ``answer``).

A choice task holds its question in ``prompt``, its options in ``choices`` (2 to 26 of them, lettered A, B, ...)
and the letter of the correct option in ``answer``. :func:`choice_prompt` shows the question with its lettered
options; :func:`extract_choice` finds the letter a reply chose.
"""

from __future__ import annotations

import re
import string

from .._checks import is_int
from ..errors import InvalidArgumentError
from .base import Score, Task

__all__ = ["LETTERS", "choice_prompt", "extract_choice", "score_choice"]

LETTERS = string.ascii_uppercase
"""The option letters, in order: option k of a task is ``LETTERS[k]``."""

_DECOR = r"[\s*_`'\"“”‘’()\[\]{}<>.,:;!]*"
# the reply is one letter, decorated at most: "B", "(B)", "**B.**", "Answer: B"
_ALONE = re.compile(
    rf"^{_DECOR}(?:(?:final\s+)?answer\s*(?:is)?\s*:?)?{_DECOR}([A-Z]){_DECOR}$", re.IGNORECASE
)
# an explicit statement: "the answer is (C)", "Answer: C", "final answer: **C**", "\boxed{C}", "option C is correct"
_STATED = (
    re.compile(r"\\boxed\{\s*(?:\\text\{\s*)?([A-Za-z])\s*\}"),
    re.compile(r"(?i:\banswer\s*(?:is|:|=)\s*(?:option\s*)?)[*_`'\"“(\[]*([A-Z])(?![A-Za-z0-9])"),
    re.compile(r"(?i:\b(?:option|choice)\s+)\(?([A-Z])\)?(?i:\s+is\s+(?:the\s+)?correct)"),
)
# the first line starts with the letter and punctuation: "B) because ...", "(B) ...", "B. ..."
_FIRST_LINE = re.compile(r"^[\s*_`]*\(?([A-Z])(?:\)|\.|:)(?:\s|$)")
_STANDALONE = re.compile(r"(?<![A-Za-z0-9'’])\(?([A-Z])\)?(?![A-Za-z0-9'’])")


def choice_prompt(task: Task) -> str:
    """The question of a choice task followed by its options, one per line (``A. text``).

    Raises
    ------
    InvalidArgumentError
        When ``task`` is not a choice task.
    """
    _check(task)
    assert task.choices is not None  # _check
    options = "\n".join(f"{LETTERS[k]}. {c.strip()}" for k, c in enumerate(task.choices))
    return f"{task.prompt.strip()}\n\nOptions:\n{options}"


def extract_choice(text: str | None, n_choices: int) -> str | None:
    """The letter of the option a reply chose, or None when it chose none (or several, ambiguously).

    In order of preference: the whole reply as one letter (``"B"``, ``"(B)"``, ``"**B.**"``); the last explicit
    statement (``\\boxed{B}``, "the answer is B", "Answer: (B)", "option B is correct"); a first line that is
    the letter, or starts with it and a ``)``, ``.`` or ``:`` (the format the prompts ask for); else the one
    capital letter standing alone (or in parentheses) in the reply, when exactly one such letter among the
    options appears. Only the letters of the ``n_choices`` options count; a lower-case letter counts only alone
    (the whole reply or its first line) or in ``\\boxed{}``.

    Parameters
    ----------
    text : str or None
        The reply (reasoning already stripped).
    n_choices : int
        Number of options (2 to 26).

    Returns
    -------
    str or None
        An upper-case letter among the first ``n_choices``.
    """
    if not is_int(n_choices) or not 2 <= n_choices <= len(LETTERS):
        raise InvalidArgumentError(f"n_choices must be an integer in 2..26; got {n_choices!r}", "n_choices")
    if text is None:
        return None
    if not isinstance(text, str):
        raise InvalidArgumentError(f"text must be a string or None; got {type(text).__name__}", "text")
    valid = LETTERS[:n_choices]

    def ok(letter: str) -> str | None:
        letter = letter.upper()
        return letter if letter in valid else None

    stripped = text.strip()
    m = _ALONE.match(stripped)
    if m:
        return ok(m[1])
    for pattern in _STATED:
        hits = [h for h in (ok(m[1]) for m in pattern.finditer(stripped)) if h]
        if hits:
            return hits[-1]
    first = stripped.split("\n", 1)[0]
    m = _ALONE.match(first) or _FIRST_LINE.match(first)
    if m:
        return ok(m[1])
    found = {m[1] for m in _STANDALONE.finditer(stripped) if m[1] in valid}
    # "A" and "I" are also words; a lone one is a choice only when no other letter stands alone
    return found.pop() if len(found) == 1 else None


def score_choice(task: Task, answer: str | None) -> Score:
    """Scores a reply to a choice task: passed when the chosen letter (:func:`extract_choice`) is the task's
    ``answer``; ``no-answer`` when no letter is chosen."""
    _check(task)
    assert task.choices is not None and task.answer is not None  # _check
    chosen = extract_choice(answer, len(task.choices))
    if chosen is None:
        return Score(False, "no-answer", "no option letter found in the answer")
    if chosen == task.answer:
        return Score(True, "passed", f"chose {chosen}")
    return Score(False, "failed", f"chose {chosen}; expected {task.answer}")


def _check(task: Task) -> None:
    if not isinstance(task, Task) or task.kind != "choice" or task.choices is None or task.answer is None:
        raise InvalidArgumentError(
            f"task must be a choice task with choices and an answer; got "
            f"{type(task).__name__ if not isinstance(task, Task) else f'kind={task.kind!r}'}",
            "task",
        )
