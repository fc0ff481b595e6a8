"""Fixtures of the TacoMAS tests: the scripted runs' HumanEval tasks and their canonical solutions (the
session's ``humaneval2`` and ``humaneval_solutions``, under the short names the tests take)."""

from __future__ import annotations

import pytest

from toporoute.tasks import Task


@pytest.fixture
def he(humaneval2: list[Task]) -> list[Task]:
    return humaneval2


@pytest.fixture
def solutions(humaneval_solutions: dict[str, str]) -> dict[str, str]:
    return humaneval_solutions
