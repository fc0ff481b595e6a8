"""One entry point for scoring an answer to any task."""

from __future__ import annotations

import textwrap

from ..errors import InvalidArgumentError
from .base import Score, Task
from .choice import score_choice
from .humaneval import completion_for, defines_function, extract_code, score_completion
from .math import score_math

__all__ = ["score"]


def _is_bare_code(task: Task, text: str) -> bool:
    """Whether ``text`` is code without fences that :func:`extract_code` does not take (a function body, as
    ``extract_code`` returns it from a fenced block), so that scoring an already extracted answer gives the
    same verdict as scoring the message it came from."""
    if not text.strip():
        return False
    if task.entry_point and defines_function(
        text, task.entry_point
    ):  # even with a syntax error: scored as "error"
        return True
    body = textwrap.indent(textwrap.dedent(text), "    ")
    for source in (text, task.prompt + body):
        try:
            compile(source, "<answer>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            continue
        return True
    return False


def score(task: Task, answer: str | None, *, timeout_s: float = 10.0, memory_mb: int = 1024) -> Score:
    """Scores an answer (an LLM's final message) to a task.

    Code tasks: :func:`~toporoute.tasks.humaneval.extract_code`, then
    :func:`~toporoute.tasks.humaneval.completion_for` and :func:`~toporoute.tasks.humaneval.score_completion`
    (the tests run in the sandbox). Math tasks: :func:`~toporoute.tasks.math.score_math`. Choice tasks:
    :func:`~toporoute.tasks.choice.score_choice` (the chosen letter must be the task's ``answer``).

    Blocking (a code answer runs for up to ``timeout_s``); call it from a worker thread in async code.

    Parameters
    ----------
    task : Task
        The task.
    answer : str or None
        The answer text: the whole message, or what :func:`~toporoute.tasks.humaneval.extract_code` /
        :func:`~toporoute.tasks.math.extract_math_answer` / :func:`~toporoute.tasks.choice.extract_choice`
        took from it. None, or text without code / an
        answer, scores ``no-answer``.
    timeout_s, memory_mb
        Limits for running code answers.

    Returns
    -------
    Score
    """
    if not isinstance(task, Task):
        raise InvalidArgumentError(f"task must be a Task; got {type(task).__name__}", "task")
    if answer is not None and not isinstance(answer, str):
        raise InvalidArgumentError(f"answer must be a string or None; got {type(answer).__name__}", "answer")
    if task.kind == "math":
        return score_math(task, answer)
    if task.kind == "choice":
        return score_choice(task, answer)
    code = extract_code(answer, task.entry_point) if answer is not None else None
    if code is None and answer is not None and "```" not in answer and _is_bare_code(task, answer):
        code = answer
    if code is None or not code.strip():
        return Score(False, "no-answer", "no code found in the answer")
    return score_completion(task, completion_for(task, code), timeout_s=timeout_s, memory_mb=memory_mb)
