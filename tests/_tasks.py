"""Hand-written tasks for the tests that run code or methods on them."""

from __future__ import annotations

from toporoute.tasks import Task


def code_task(task_id: str, entry_point: str, prompt: str, *checks: str) -> Task:
    """A code task whose hidden test asserts each of ``checks`` (expressions of ``candidate``); with none, the
    test passes whatever the code returns."""
    body = "".join(f"    assert {c}\n" for c in checks) or "    pass\n"
    return Task(
        id=task_id, kind="code", prompt=prompt, entry_point=entry_point, test="def check(candidate):\n" + body
    )
