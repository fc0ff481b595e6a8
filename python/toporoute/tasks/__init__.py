"""Benchmark tasks and their scoring: HumanEval-style code problems run in a sandbox, math problems compared
by value, multiple-choice questions by the chosen letter.

:func:`load_tasks` reads a task set (``"humaneval"``, ``"math-demo"``, a JSONL task file, or a Hugging Face
dataset) into :class:`Task` records; :func:`score` turns an answer into a :class:`Score`. This layer knows
nothing about LLMs: it takes answer text and returns verdicts.
"""

from __future__ import annotations

from .base import Score, Task
from .choice import choice_prompt, extract_choice, score_choice
from .humaneval import check_program, completion_for, extract_code, score_completion
from .loading import load_tasks, write_tasks_jsonl
from .math import extract_math_answer, math_equal
from .sandbox import SandboxResult, run_python
from .scoring import score

__all__ = [
    "SandboxResult",
    "Score",
    "Task",
    "check_program",
    "choice_prompt",
    "completion_for",
    "extract_choice",
    "extract_code",
    "extract_math_answer",
    "load_tasks",
    "math_equal",
    "run_python",
    "score",
    "score_choice",
    "score_completion",
    "write_tasks_jsonl",
]
