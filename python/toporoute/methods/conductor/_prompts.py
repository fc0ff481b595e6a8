"""AgentConductor's prompt texts (data files in ``methods/prompts/conductor``) and the plan grammar."""

from __future__ import annotations

import functools
import re

from ..prompt_files import read_json, read_text

__all__ = ["agent_parts", "plan_regex", "role_duties", "text"]


def text(name: str) -> str:
    """The prompt file ``name`` (``.txt`` added)."""
    return read_text("conductor", f"{name}.txt")


def _json(name: str) -> dict[str, str]:
    return read_json("conductor", f"{name}.json")  # type: ignore[no-any-return]


def role_duties() -> dict[str, str]:
    """One-line duty of each role (the orchestrator's role list)."""
    return _json("roles")


def agent_parts() -> dict[str, str]:
    """Headings and instructions of the role agents' prompts."""
    return _json("agent_parts")


def roles_block(pool: tuple[str, ...]) -> str:
    duties = role_duties()
    return "\n".join(f"- <{r}>: {duties.get(r, 'an agent of the team')}" for r in pool)


@functools.cache
def plan_regex(pool: tuple[str, ...], first_turn: bool, max_steps: int = 8, max_agents: int = 4) -> str:
    """A regular expression of the plan layout for guided decoding: a ```yaml fence, steps of 1 to
    ``max_agents`` agents with role tokens from ``pool`` (an optional id suffix), a last step holding only a
    tester that refs a coder or debugger and, in the first turn, a first step without refs. It fixes the
    syntax and the schema; whether each ref names an earlier agent is still checked afterwards."""
    esc = [re.escape(r) for r in pool]
    any_tok = "<(?:" + "|".join(esc) + ")(?:_[1-9])?>"
    worker_tok = "<(?:" + "|".join(e for r, e in zip(pool, esc) if r != "tester") + ")(?:_[1-9])?>"
    refs = rf"\[(?:{any_tok}(?:, {any_tok}){{0,5}})?\]"
    num = "[1-9][0-9]?"
    head = rf"- step: {num}\n  agents:\n"
    agent = rf"    - agent: {worker_tok}\n      ref: {refs}\n"
    first = head + (
        rf"(?:    - agent: {worker_tok}\n      ref: \[\]\n){{1,{max_agents}}}"
        if first_turn
        else f"(?:{agent}){{1,{max_agents}}}"
    )
    middle = f"(?:{head}(?:{agent}){{1,{max_agents}}}){{0,{max_steps - 2}}}"
    fix = "<(?:coder|debugger)(?:_[1-9])?>"
    last = rf"{head}    - agent: <tester>\n      ref: \[(?:{any_tok}, )*{fix}(?:, {any_tok})*\]\n"
    return f"```yaml\n{first}{middle}{last}```"
