"""AgentConductor's plan grammar (``plan_regex``): the ``validator`` grammar admits every plan the checker accepts in
the prompt's layout and leaves the logic rules to it; the ``strict`` preset keeps the earlier, narrower grammar.
Python's ``re.fullmatch`` is the oracle of what the regular expression admits; the grammar's dialect (no
lookarounds, no backreferences) is what vLLM's guided decoding compiles, checked with xgrammar where it is
installed."""

from __future__ import annotations

import argparse
import importlib.util
import re
from pathlib import Path

import pytest
import yaml
from _conductor_plans import contexts, layouts, plans, render, yaml_block
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toporoute.errors import InvalidArgumentError
from toporoute.methods import make_method
from toporoute.methods.conductor import GRAMMARS, Conductor, ConductorSettings, plan_regex
from toporoute.methods.conductor.plugin import OPTIONS as CONDUCTOR_OPTIONS
from toporoute.tasks import Task
from toporoute.types.conductor_topology import (
    LOGIC,
    OK,
    SCHEMA,
    CheckOptions,
    Context,
    Node,
    check,
    render_yaml,
)

OPTIONS = CheckOptions()
VALIDATOR_FIRST = plan_regex(OPTIONS, True)
VALIDATOR_LATER = plan_regex(OPTIONS, False)
STRICT_FIRST = plan_regex(OPTIONS, True, "strict")
STRICT_LATER = plan_regex(OPTIONS, False, "strict")
# the context of a second turn: turn 1 planned, coded and tested
TURN2 = Context(
    1, (Node("planner", "planner", 1, 0), Node("coder", "coder", 2, 0), Node("tester", "tester", 3, 0))
)


def chain(n: int, first: int = 1) -> list[tuple[int, list[tuple[str, list[str]]]]]:
    """n - 1 planners in a chain, then a coder and a tester: n + 1 steps."""
    steps = [(first, [("<planner>", [])])]
    for i in range(1, n - 1):
        steps.append((first + i, [(f"<planner_{i}>", [steps[-1][1][0][0]])]))
    steps.append((first + n - 1, [("<coder>", [steps[-1][1][0][0]])]))
    steps.append((first + n, [("<tester>", ["<coder>"])]))
    return steps


# Valid plans (the checker accepts them) that the strict grammar rejects: (name, block, context).
BEYOND_STRICT = [
    (
        "5 agents in a step",
        yaml_block(
            (
                1,
                [
                    ("<planner>", []),
                    ("<searcher>", []),
                    ("<algorithmer>", []),
                    ("<coder>", []),
                    ("<planner_2>", []),
                ],
            ),
            (2, [("<tester>", ["<coder>", "<planner>", "<searcher>", "<algorithmer>", "<planner_2>"])]),
        ),
        Context(),
    ),
    (
        "steps 98 to 100",
        yaml_block(
            (98, [("<planner>", [])]), (99, [("<coder>", ["<planner>"])]), (100, [("<tester>", ["<coder>"])])
        ),
        Context(),
    ),
    ("a second turn from step 1000", yaml_block((1000, [("<tester>", ["<coder>"])])), TURN2),
    ("steps 0 and -3", yaml_block((-3, [("<coder>", [])]), (0, [("<tester>", ["<coder>"])])), Context()),
    (
        "a 64-bit step",
        yaml_block((1, [("<coder>", [])]), (2**63 - 1, [("<tester>", ["<coder>"])])),
        Context(),
    ),
    ("10 steps", yaml_block(*chain(9)), Context()),
    (
        "7 refs",
        yaml_block(
            (1, [(f"<planner_{i}>", []) for i in range(1, 7)] + [("<coder>", [])]),
            (2, [("<tester>", ["<coder>"] + [f"<planner_{i}>" for i in range(1, 7)])]),
        ),
        Context(),
    ),
    ("id 10", yaml_block((1, [("<coder_10>", [])]), (2, [("<tester>", ["<coder_10>"])])), Context()),
    ("id 0", yaml_block((1, [("<coder_0>", [])]), (2, [("<tester_0>", ["<coder_0>"])])), Context()),
    (
        "a tester beside another agent last",
        yaml_block((1, [("<coder>", [])]), (2, [("<tester>", ["<coder>"]), ("<planner>", ["<coder>"])])),
        Context(),
    ),
    (
        "two testers last",
        yaml_block((1, [("<coder>", [])]), (2, [("<tester>", ["<coder>"]), ("<tester_2>", ["<coder>"])])),
        Context(),
    ),
    (
        "a tester before the last step",
        yaml_block(
            (1, [("<coder>", [])]), (2, [("<tester>", ["<coder>"])]), (3, [("<tester_2>", ["<coder>"])])
        ),
        Context(),
    ),
    ("a second turn of one step", yaml_block((4, [("<tester>", ["<coder>"])])), TURN2),
    ("a second turn, 9 steps", yaml_block(*chain(8, first=4)), TURN2),
]


@pytest.mark.parametrize("name", [b[0] for b in BEYOND_STRICT])
def test_validator_grammar_admits_valid_plans_the_strict_one_rejects(name: str) -> None:
    _, text, context = next(b for b in BEYOND_STRICT if b[0] == name)
    c = check(text, context)
    assert c.ok, (name, c.message)
    first = not context.nodes
    assert re.fullmatch(plan_regex(OPTIONS, first), text), name
    assert not re.fullmatch(plan_regex(OPTIONS, first, "strict"), text), name


def test_validator_grammar_stops_at_the_checkers_limits() -> None:
    # 64 agents in a step and 32 refs match; 65 agents in a step or 33 refs do not (the checker's SCHEMA limits)
    wide = [(f"<planner_{i}>", []) for i in range(62)] + [("<coder>", [])]
    text = yaml_block((1, wide), (2, [("<tester>", ["<coder>"] + [f"<planner_{i}>" for i in range(31)])]))
    assert check(text).ok and re.fullmatch(VALIDATOR_FIRST, text)
    refs33 = yaml_block((1, wide), (2, [("<tester>", ["<coder>"] + [f"<planner_{i}>" for i in range(32)])]))
    assert check(refs33).error == SCHEMA and not re.fullmatch(VALIDATOR_FIRST, refs33)
    step64 = yaml_block((1, [(f"<planner_{i}>", []) for i in range(64)]))
    assert check(step64).error == LOGIC and re.fullmatch(VALIDATOR_FIRST, step64)  # no tester: L3
    step65 = yaml_block((1, [(f"<planner_{i}>", []) for i in range(65)]))
    assert check(step65).error == SCHEMA and not re.fullmatch(VALIDATOR_FIRST, step65)
    # the limits are the options'
    small = CheckOptions(max_agents=3, max_refs=1)
    assert re.fullmatch(
        plan_regex(small, True), yaml_block((1, [("<coder>", [])]), (2, [("<tester>", ["<coder>"])]))
    )
    four = yaml_block((1, [("<planner>", []), ("<searcher>", []), ("<coder>", []), ("<algorithmer>", [])]))
    assert not re.fullmatch(plan_regex(small, True), four) and re.fullmatch(VALIDATOR_FIRST, four)
    # tokens outside the pool, malformed ids and non-decimal or zero-padded steps never match
    for bad in ("<reviewer>", "<coder_>", "<coder_1_2>", "<Coder>", "coder"):
        assert not re.fullmatch(VALIDATOR_FIRST, yaml_block((1, [(bad, [])])))
    for step in ("07", "+1", "0x10", "1.5", "one"):
        assert not re.fullmatch(
            VALIDATOR_FIRST, yaml_block((1, [("<coder>", [])])).replace("step: 1", f"step: {step}")
        )
    pool = ("coder", "debugger", "tester", "re-viewer 2")
    custom = plan_regex(CheckOptions(pool=pool), True)
    assert re.fullmatch(custom, yaml_block((1, [("<re-viewer 2_3>", [])])))
    assert not re.fullmatch(custom, yaml_block((1, [("<planner>", [])])))


# Plans the validator grammar admits and the checker rejects, so its error classes stay reachable, and whether the
# strict grammar admits them too: (name, block, error class, strict).
REACHABLE = [
    ("refs in the first step (L1)", yaml_block((1, [("<coder>", ["<planner>"])])), LOGIC, False),
    (
        "a ref to no earlier agent (L2)",
        yaml_block((1, [("<coder>", [])]), (2, [("<tester>", ["<coder_2>"])])),
        LOGIC,
        True,
    ),
    (
        "no tester last (L3)",
        yaml_block((1, [("<planner>", [])]), (2, [("<coder>", ["<planner>"])])),
        LOGIC,
        False,
    ),
    (
        "a tester without code (L4)",
        yaml_block((1, [("<planner>", [])]), (2, [("<tester>", ["<planner>"])])),
        LOGIC,
        False,
    ),
    (
        "a debugger first (L5)",
        yaml_block((1, [("<debugger>", [])]), (2, [("<tester>", ["<debugger>"])])),
        LOGIC,
        True,
    ),
    (
        "steps not increasing",
        yaml_block((2, [("<coder>", [])]), (1, [("<tester>", ["<coder>"])])),
        LOGIC,
        True,
    ),
    (
        "an id twice in a step",
        yaml_block((1, [("<coder>", []), ("<coder>", [])]), (2, [("<tester>", ["<coder>"])])),
        LOGIC,
        True,
    ),
    (
        "a ref twice",
        yaml_block((1, [("<coder>", [])]), (2, [("<tester>", ["<coder>", "<coder>"])])),
        LOGIC,
        True,
    ),
    (
        "more than 64 agents in all",
        yaml_block(
            (1, [(f"<planner_{i}>", []) for i in range(40)]),
            (2, [(f"<coder_{i}>", []) for i in range(24)] + [("<coder>", [])]),
            (3, [("<tester>", ["<coder>"])]),
        ),
        SCHEMA,
        False,
    ),
    (
        "a step over 64 bits",
        yaml_block((1, [("<coder>", [])]), (2**63, [("<tester>", ["<coder>"])])),
        SCHEMA,
        False,
    ),
]


@pytest.mark.parametrize("name", [r[0] for r in REACHABLE])
def test_validator_grammar_leaves_logic_and_counts_to_the_checker(name: str) -> None:
    _, text, error, strict = next(r for r in REACHABLE if r[0] == name)
    assert check(text).error == error, name
    assert re.fullmatch(VALIDATOR_FIRST, text) and re.fullmatch(VALIDATOR_LATER, text)
    assert bool(re.fullmatch(STRICT_FIRST, text)) == strict


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_every_plan_past_the_schema_matches_the_validator_grammar(data: st.DataObject) -> None:
    """Random plans (mostly valid, some with a defect) in random layouts: every one the checker accepts, or rejects
    only for its logic, matches once written in the prompt's layout (render_yaml's, for the valid ones)."""
    context = data.draw(contexts())
    c = check(render(data.draw(plans(context)), data.draw(layouts())), context)
    if c.error not in (OK, LOGIC):
        return
    assert c.yaml is not None
    doc = yaml.safe_load(c.yaml)
    text = yaml_block(*[(it["step"], [(a["agent"], a.get("ref") or []) for a in it["agents"]]) for it in doc])
    if c.ok:
        assert c.graph is not None and text == "```yaml\n" + render_yaml(c.graph, context) + "```"
    assert re.fullmatch(plan_regex(OPTIONS, not context.nodes), text), (c.message, text)


def test_grammar_dialect_and_presets() -> None:
    for regex in (VALIDATOR_FIRST, VALIDATOR_LATER, STRICT_FIRST, STRICT_LATER):
        for construct in ("(?=", "(?!", "(?<=", "(?<!", "(?P", "\\1", "\\b"):
            assert construct not in regex, construct
    custom = plan_regex(CheckOptions(pool=("coder", "debugger", "tester", "re-viewer 2")), True)
    assert "<(?:coder|debugger|tester|re-viewer 2)" in custom  # no escaped space: xgrammar does not know it
    assert VALIDATOR_FIRST == VALIDATOR_LATER  # L1 is the checker's
    assert STRICT_FIRST != STRICT_LATER
    assert GRAMMARS == ("validator", "strict")
    with pytest.raises(InvalidArgumentError, match="grammar must be one of .*'loose'"):
        plan_regex(OPTIONS, True, "loose")
    with pytest.raises(InvalidArgumentError, match="grammar"):
        ConductorSettings(grammar="loose")


@pytest.mark.skipif(
    importlib.util.find_spec("xgrammar") is None, reason="xgrammar (vLLM's grammar engine) is not installed"
)
def test_xgrammar_compiles_both_grammars() -> None:
    import xgrammar

    custom = plan_regex(CheckOptions(pool=("coder", "debugger", "tester", "re-viewer 2")), True)
    for regex in (VALIDATOR_FIRST, STRICT_FIRST, STRICT_LATER, custom):
        assert "root" in str(xgrammar.Grammar.from_regex(regex))


def test_setting_cli_option_and_params(tmp_path: Path) -> None:
    he = Task("t/0", "code", "def f():\n    pass\n", "f", "def check(f):\n    pass\n")
    m = Conductor()
    assert m.settings.grammar == "validator" and m.params()["grammar"] == "validator"
    req = m._orchestrator_request("e", he, 0, [], first=True)
    assert req.regex == VALIDATOR_FIRST
    strict = make_method("conductor", grammar="strict")
    assert strict.params()["grammar"] == "strict"
    assert strict._orchestrator_request("e", he, 0, [], first=True).regex == STRICT_FIRST
    assert strict._orchestrator_request("e", he, 1, [], first=False).regex == STRICT_LATER
    parser = argparse.ArgumentParser()
    parser.add_argument("--eval-timeout", type=float, default=5.0)  # a shared option the group reads
    CONDUCTOR_OPTIONS.add(parser.add_argument_group(CONDUCTOR_OPTIONS.title))
    read = CONDUCTOR_OPTIONS.read
    assert read(parser.parse_args([]), tmp_path)["grammar"] == "validator"
    got = read(parser.parse_args(["--grammar", "strict"]), tmp_path)
    assert got["grammar"] == "strict" and got["guided"] is True
    assert read(parser.parse_args(["--no-guided"]), tmp_path)["guided"] is False
    with pytest.raises(SystemExit):
        parser.parse_args(["--grammar", "loose"])
