"""AgentConductor's prompt texts (data files in ``methods/prompts/conductor``) and the plan grammar."""

from __future__ import annotations

import functools

from ...errors import InvalidArgumentError
from ...types.conductor_topology import CheckOptions
from ..prompt_files import read_json, read_text

__all__ = ["GRAMMARS", "agent_parts", "plan_regex", "role_duties", "role_system", "roles_block", "text"]


def text(name: str) -> str:
    """The prompt file ``name`` (``.txt`` added)."""
    return read_text("conductor", f"{name}.txt")


def _json(name: str) -> dict[str, str]:
    return read_json("conductor", f"{name}.json")  # type: ignore[no-any-return]


def role_duties() -> dict[str, str]:
    """One-line duty of each role (the orchestrator's role list); ``role@corpus`` keys describe a role as a
    retrieval corpus other than solved problems makes it."""
    return _json("roles")


def agent_parts() -> dict[str, str]:
    """Headings and instructions of the role agents' prompts."""
    return _json("agent_parts")


def roles_block(pool: tuple[str, ...], corpus: str = "humaneval") -> str:
    """The orchestrator's role list; the searcher's duty is the one of its retrieval ``corpus``."""
    duties = role_duties()
    return "\n".join(
        f"- <{r}>: {duties.get(f'{r}@{corpus}', duties.get(r, 'an agent of the team'))}" for r in pool
    )


def role_system(role: str, corpus: str = "humaneval") -> str:
    """A role agent's system prompt (``<role>_<corpus>.txt`` where one exists, as the searcher's for the
    standard library's documentation, else ``<role>.txt``, else a generic line)."""
    for name in (f"{role}_{corpus}", role):
        try:
            return text(name).strip()
        except FileNotFoundError:
            continue
    return f"You are the {role} of a programming team."


GRAMMARS = ("validator", "strict")


@functools.cache
def plan_regex(options: CheckOptions, first_turn: bool, grammar: str = "validator") -> str:
    """A regular expression of the plan block for guided decoding, in the layout the orchestrator's prompt shows
    (:func:`~toporoute.types.conductor_topology.render_yaml`'s): a ```yaml fence, ``- step: N`` items, each with
    ``agents:`` entries ``- agent: <token>`` and a flow ``ref: [...]`` list.

    Parameters
    ----------
    options : CheckOptions
        The validator's options: the role pool and the limits ``max_agents`` and ``max_refs``.
    first_turn : bool
        Whether the plan is the first turn's (only the ``strict`` grammar uses it).
    grammar : {"validator", "strict"}
        ``validator`` (the default) admits the validator's syntax with its limits and leaves every logic rule
        to it: agent and ref tokens ``<role>`` or ``<role_N>`` (any digits) from the pool; any step number
        that fits in 64 bits, written in decimal (a leading minus allowed, no leading zeros); 1 to
        ``max_agents`` agents per step and 1 to ``max_agents`` steps (every step holds an agent); 0 to
        ``max_refs`` refs per agent. Every plan the validator accepts, written in this layout, matches; so do
        plans it rejects as ``[YAML LOGIC INVALID]`` (refs in the first step, refs to no earlier agent, step
        numbers not increasing, an id twice, no tester last, a debugger before a coder, ...) and, since a
        regular expression cannot count agents across steps or compare numbers, as ``[YAML SCHEMA INVALID]``
        (more than ``max_agents`` agents in all, a 19-digit step over 64 bits). So the reward's penalties for
        those classes stay reachable and the recorded plans are the ones the orchestrator chose. A forced
        block cannot yield ``[NO YAML FOUND]`` or ``[YAML PARSE ERROR]`` unless the reply is cut at the token
        limit: for prose around the plan, other YAML layouts and all four error classes, sample without a
        grammar (``guided=False``, as the paper does).
        ``strict`` is the earlier, narrower grammar: 2 to 8 steps numbered 1 to 99, 1 to 4 agents per step,
        ids ``_1`` to ``_9``, at most 6 refs, no refs in the first turn's first step, and a last step holding
        only a ``<tester>`` that refs a coder or debugger. L1 (in the first turn), L3 and L4 cannot fail under
        it, and it rejects plans the validator accepts.
    """
    if grammar not in GRAMMARS:
        raise InvalidArgumentError(f"grammar must be one of {GRAMMARS}; got {grammar!r}", "grammar")
    # role names are letters, digits, spaces and dashes (CheckOptions checks): literals as they are (an escaped
    # space is outside xgrammar's dialect)
    esc = list(options.pool)
    if grammar == "strict":
        return _strict_regex(options.pool, esc, first_turn)
    tok = "<(?:" + "|".join(esc) + ")(?:_[0-9]+)?>"
    refs = rf"\[(?:{tok}(?:, {tok}){{0,{options.max_refs - 1}}})?\]"
    agent = rf"    - agent: {tok}\n      ref: {refs}\n"
    step = rf"- step: -?(?:0|[1-9][0-9]{{0,18}})\n  agents:\n(?:{agent}){{1,{options.max_agents}}}"
    return f"```yaml\n(?:{step}){{1,{options.max_agents}}}```"


def _strict_regex(pool: tuple[str, ...], esc: list[str], first_turn: bool) -> str:
    max_steps, max_agents = 8, 4
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
