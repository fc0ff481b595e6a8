"""The final answer of a worker-loop episode (the spec's 'Final answer': the paper only says "extracted from the
last global state"), from the rounds' worker outputs (pure functions, no LLM calls)."""

from __future__ import annotations

import ast
from collections.abc import Sequence

from ... import _ast_parse
from ...tasks import Task, extract_code, extract_math_answer
from .messages import WorkerOutput
from .team import Team

__all__ = ["final_answer", "has_body"]

Rounds = Sequence[tuple[Sequence[WorkerOutput], Sequence[int]]]
"""Each round's worker outputs (roster order) and its sigma (agent indices)."""


def _is_placeholder(stmt: ast.stmt) -> bool:
    """``pass``, ``...``, a string (a docstring) or ``raise NotImplementedError``: no behaviour of its own."""
    if isinstance(stmt, ast.Pass):
        return True
    if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
        return stmt.value.value is Ellipsis or isinstance(stmt.value.value, str)
    if isinstance(stmt, ast.Raise) and stmt.exc is not None:
        exc = stmt.exc.func if isinstance(stmt.exc, ast.Call) else stmt.exc
        return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"
    return False


def has_body(code: str, name: str) -> bool:
    """Whether ``code`` defines ``def name(...)`` at top level with a real body: a statement other than a
    docstring, ``pass``, ``...`` or ``raise NotImplementedError``. The last definition counts (it is the one
    that runs). Code that does not parse has no verified body (False)."""
    try:
        tree = _ast_parse.parse(code)
    except (SyntaxError, ValueError):
        return False
    defs = [
        node
        for node in tree.body
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name
    ]
    return bool(defs) and not all(_is_placeholder(s) for s in defs[-1].body)


def _readers(lead: int, order: Sequence[int]) -> list[int]:
    """The agents whose messages are searched, in preference order: the answer agent, then reverse sigma."""
    return [lead] + [j for j in reversed(order) if j != lead]


def _code_answer(task: Task, lead: int, rounds: Rounds) -> str:
    entry = task.entry_point
    if entry:
        # a real definition of the entry point anywhere beats any other block: the last round's Tester asserts
        # or a Designer's signature stub must not replace the Developer's code of an earlier round
        for outs, order in reversed(rounds):
            for i in _readers(lead, order):
                code = extract_code(outs[i].public, entry)
                if code and has_body(code, entry):
                    return code
    for outs, order in reversed(rounds):
        for i in _readers(lead, order):
            code = extract_code(outs[i].public, entry)
            if code:
                return code
    return ""


def _math_answer(lead: int, rounds: Rounds) -> str:
    if rounds and rounds[-1][0][lead].answer:
        return rounds[-1][0][lead].answer or ""
    for outs, _ in reversed(rounds):
        for o in outs:
            if o.answer:
                return o.answer
    for outs, order in reversed(rounds):
        for i in reversed(order):
            if "\\boxed" in outs[i].public:
                found = extract_math_answer(outs[i].public)
                if found:
                    return found
    return ""


def final_answer(task: Task, team: Team, rounds: Rounds) -> str:
    """The episode's answer, from the last round first, then earlier rounds.

    Code: rounds newest first, in each the answer agent's public message then the others' in reverse sigma,
    for the code block that defines the task's entry point with a real body (:func:`has_body`: a signature
    stub or a docstring-only definition does not count); only when no message holds one, the same search for
    any code block (as :func:`~toporoute.tasks.extract_code` picks it). Math: the answer agent's ``answer`` of
    the last round, else the latest non-empty ``answer``, else the last ``\\boxed{}``.

    Parameters
    ----------
    task : Task
    team : Team
        The team whose ``answer_agent`` leads the search (Developer / Solver).
    rounds : sequence of (outputs, sigma)
        Each round's worker outputs in roster order and its sigma as agent indices, oldest first.
    """
    lead = team.names.index(team.answer_agent)
    if task.kind == "code":
        return _code_answer(task, lead, rounds)
    return _math_answer(lead, rounds)
