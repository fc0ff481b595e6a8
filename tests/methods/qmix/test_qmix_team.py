"""Agent Q-Mix team composition and prompt rendering (toporoute.methods.qmix.team)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib import resources

import pytest

from toporoute.errors import InvalidArgumentError
from toporoute.methods.qmix.team import (
    DOMAINS,
    QMixAgent,
    QMixTeam,
    final_prompt,
    load_qmix_team,
    role_offset_for,
    worker_prompt,
)

CODE_ROLES = ["Project Manager", "Algorithm Designer", "Programming Expert", "Test Analyst", "Bug Fixer"]
MATH_ROLES = ["Math Solver", "Mathematical Analyst", "Programming Expert", "Inspector"]
POOLS = {"code": CODE_ROLES, "math": MATH_ROLES, "choice": ["Reasoning Expert"]}
WRITER = {"code": "CodeWriter", "math": "MathSolver", "choice": "ReasoningAgent"}


def _qmix_dir():
    return resources.files("toporoute.methods") / "prompts" / "qmix"


def test_data_files_all_present_and_nonempty():
    spec = json.loads((_qmix_dir() / "team.json").read_text(encoding="utf-8"))
    files = [r["file"] for d in spec["domains"].values() for r in d["roles"]]
    files += [d["final"] for d in spec["domains"].values()]
    files += [d["constraint"] for d in spec["domains"].values() if "constraint" in d]
    files += [spec["analyzer"]["file"], spec["adversary"]["file"], *spec["templates"].values()]
    for name in files:
        assert (_qmix_dir() / name).read_text(encoding="utf-8").strip(), name
    assert sorted(spec["domains"]) == sorted(DOMAINS)


@pytest.mark.parametrize("domain", DOMAINS)
def test_default_team_is_two_writers_and_an_analyzer(domain):
    team = load_qmix_team(domain)
    assert isinstance(team, QMixTeam) and team.domain == domain
    assert all(isinstance(a, QMixAgent) for a in team.agents)
    w = WRITER[domain]
    assert team.names == [f"{w}_0", f"{w}_1", "AnalyzeAgent_2"]
    assert [a.kind for a in team.agents] == [w, w, "AnalyzeAgent"]
    pool = POOLS[domain]
    assert [a.role for a in team.agents] == [pool[0], pool[1 % len(pool)], "Analyzer"]
    assert all(a.system for a in team.agents)
    assert team.final_system


@pytest.mark.parametrize("domain", DOMAINS)
def test_single_agent_is_one_writer(domain):
    team = load_qmix_team(domain, n_agents=1)
    assert team.names == [f"{WRITER[domain]}_0"]
    assert team.agents[0].role == POOLS[domain][0]


def test_four_agents():
    team = load_qmix_team("code", n_agents=4, role_offset=3)
    assert team.names == ["CodeWriter_0", "CodeWriter_1", "CodeWriter_2", "AnalyzeAgent_3"]
    assert [a.role for a in team.agents] == ["Test Analyst", "Bug Fixer", "Project Manager", "Analyzer"]


def test_sixteen_agents_cycle_roles():
    team = load_qmix_team("math", n_agents=16)
    assert [a.role for a in team.agents[:-1]] == [MATH_ROLES[s % 4] for s in range(15)]
    assert team.agents[-1].kind == "AnalyzeAgent"


@pytest.mark.parametrize("domain", DOMAINS)
def test_rotation_wraps_and_is_deterministic(domain):
    pool = POOLS[domain]
    for offset in range(-3, 2 * len(pool) + 1):
        team = load_qmix_team(domain, role_offset=offset)
        assert [a.role for a in team.agents[:2]] == [pool[offset % len(pool)], pool[(offset + 1) % len(pool)]]
        assert team == load_qmix_team(domain, role_offset=offset)
    last = load_qmix_team(domain, role_offset=len(pool) - 1)
    assert [a.role for a in last.agents[:2]] == [pool[-1], pool[0]]
    assert load_qmix_team(domain, role_offset=len(pool)) == load_qmix_team(domain, role_offset=0)


def test_roles_have_distinct_prompts_per_domain():
    for domain in DOMAINS:
        prompts = {load_qmix_team(domain, n_agents=1, role_offset=k).agents[0].system for k in range(5)}
        assert len(prompts) == len(POOLS[domain])
    code_pe = load_qmix_team("code", n_agents=1, role_offset=2).agents[0]
    math_pe = load_qmix_team("math", n_agents=1, role_offset=2).agents[0]
    assert code_pe.role == math_pe.role == "Programming Expert"
    assert code_pe.system != math_pe.system
    assert "answer" in math_pe.system


def test_format_constraints_in_prompts():
    math_team = load_qmix_team("math", n_agents=5)
    for agent in math_team.agents[:4]:
        if agent.role != "Programming Expert":
            assert "The answer is" in agent.system, agent.role
    assert "The answer is" in math_team.final_system
    code_final = load_qmix_team("code").final_system
    assert "python" in code_final.lower() and "The answer is" not in code_final


def test_analyzer_prompt_shared_across_domains():
    assert load_qmix_team("code").agents[-1].system == load_qmix_team("math").agents[-1].system


@pytest.mark.parametrize("adversary", [None, 0, 2])
def test_choice_team_agents_all_get_the_multiple_choice_constraint(adversary):
    constraint = (_qmix_dir() / "choice_constraint.txt").read_text(encoding="utf-8").strip()
    team = load_qmix_team("choice", adversarial_agent_index=adversary)
    assert team.names == ["ReasoningAgent_0", "ReasoningAgent_1", "AnalyzeAgent_2"]
    for agent in team.agents:
        assert agent.system.endswith("\n\n" + constraint), agent.name
    analyzer = load_qmix_team("code").agents[-1].system
    if adversary != 2:
        assert team.agents[-1].system == analyzer + "\n\n" + constraint
    # the other teams get no such constraint; FinalRefer answers with the letter alone
    assert all(constraint not in a.system for d in ("code", "math") for a in load_qmix_team(d).agents)
    assert "one letter" in team.final_system and "nothing else" in team.final_system
    text = worker_prompt(team, 0, "Q?", [], None)
    assert text.endswith("Think it through step by step, then give your answer.")


@pytest.mark.parametrize("index", [0, 1, 2])
def test_adversary_replaces_one_slot(index):
    plain = load_qmix_team("math")
    team = load_qmix_team("math", adversarial_agent_index=index)
    for slot, (a, b) in enumerate(zip(plain.agents, team.agents)):
        assert a.name == b.name and a.kind == b.kind
        if slot == index:
            assert b.role == "Adversary" and b.system != a.system
        else:
            assert b == a
    assert sum(a.role == "Adversary" for a in team.agents) == 1
    assert all(a.role != "Adversary" for a in plain.agents)


def test_adversary_prompt_not_used_by_default():
    adversary = load_qmix_team("code", adversarial_agent_index=0).agents[0].system
    for domain in DOMAINS:
        for offset in range(5):
            team = load_qmix_team(domain, n_agents=6, role_offset=offset)
            assert all(a.system != adversary for a in team.agents)


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        ({"domain": "reasoning"}, "domain"),
        ({"domain": "code", "n_agents": 0}, "n_agents"),
        ({"domain": "code", "n_agents": 17}, "n_agents"),
        ({"domain": "code", "n_agents": 2.0}, "n_agents"),
        ({"domain": "code", "n_agents": True}, "n_agents"),
        ({"domain": "code", "adversarial_agent_index": 3}, "adversarial_agent_index"),
        ({"domain": "code", "adversarial_agent_index": -1}, "adversarial_agent_index"),
        ({"domain": "math", "n_agents": 1, "adversarial_agent_index": 1}, "adversarial_agent_index"),
        ({"domain": "math", "role_offset": 1.5}, "role_offset"),
    ],
)
def test_invalid_arguments(kwargs, arg):
    with pytest.raises(InvalidArgumentError) as info:
        load_qmix_team(**kwargs)
    assert info.value.arg == arg
    assert isinstance(info.value, ValueError)


def test_role_offset_for_is_stable_and_varies():
    # Stable means the same value in every process: a fresh interpreter with another hash seed agrees with
    # this one and with the values written down when the digest was chosen.
    pinned = {(0, "HumanEval/1"): 4893100257574145258, (7, "ep"): 1939967511663352740}
    here = {key: role_offset_for(*key) for key in pinned}
    assert here == pinned
    code = (
        "from toporoute.methods.qmix.team import role_offset_for; "
        f"print([role_offset_for(*key) for key in {list(pinned)!r}])"
    )
    env = {**os.environ, "PYTHONHASHSEED": "12345"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(list(pinned.values())), out.stderr
    values = [role_offset_for(0, f"ep{k}") for k in range(20)]
    assert all(isinstance(v, int) and 0 <= v < 2**63 for v in values)
    assert len(set(values)) > 1
    assert len({v % 5 for v in values}) > 1
    assert len({role_offset_for(s, "ep0") for s in range(10)}) > 1
    # Separator: (1, "2x") and (12, "x") must not collide through plain concatenation.
    assert role_offset_for(1, "2x") != role_offset_for(12, "x")


def test_role_offset_for_known_value():
    # Pinned so that a switch to hash() or another digest (per-process, irreproducible) fails.
    import hashlib

    expected = int.from_bytes(hashlib.sha256(b"3\x00task-9").digest()[:8], "big") >> 1
    assert role_offset_for(3, "task-9") == expected


def test_worker_prompt_task_only():
    team = load_qmix_team("code")
    text = worker_prompt(team, 0, "Write add(a, b).", [], None)
    assert "Write add(a, b)." in text
    assert "other agents" not in text.lower()
    assert "previous round" not in text.lower()
    assert worker_prompt(team, 0, "Write add(a, b).", [("MathSolver_1", "Inspector", "  ")], "") == text


def test_worker_prompt_sections_in_order():
    team = load_qmix_team("code")
    inbound = [
        ("CodeWriter_1", "Algorithm Designer", "DESIGN-TEXT"),
        ("AnalyzeAgent_2", "Analyzer", ""),
        ("AnalyzeAgent_0", "Analyzer", "CRITIQUE-TEXT"),
    ]
    text = worker_prompt(team, 0, "TASK-TEXT", inbound, "MY-OLD-OUTPUT")
    lower = text.lower()
    positions = [
        text.index("TASK-TEXT"),
        lower.index("other agents"),
        text.index("DESIGN-TEXT"),
        text.index("CRITIQUE-TEXT"),
        lower.index("previous round"),
        text.index("MY-OLD-OUTPUT"),
    ]
    assert positions == sorted(positions)
    assert "CodeWriter_1 (Algorithm Designer)" in text
    assert "AnalyzeAgent_0 (Analyzer)" in text
    assert "AnalyzeAgent_2" not in text  # empty text skipped
    # The closing instruction comes last.
    assert text.rstrip().endswith(worker_prompt(team, 0, "x", [], None).split("\n\n")[-1])


def test_worker_prompt_only_one_optional_section():
    team = load_qmix_team("math")
    only_prev = worker_prompt(team, 1, "Q", [], "OLD")
    assert "OLD" in only_prev and "other agents" not in only_prev.lower()
    only_in = worker_prompt(team, 1, "Q", [("MathSolver_0", "Math Solver", "NEW")], None)
    assert "NEW" in only_in and "previous round" not in only_in.lower()


def test_worker_prompt_inbound_order_preserved():
    team = load_qmix_team("math")
    a = ("MathSolver_0", "Math Solver", "FIRST")
    b = ("AnalyzeAgent_2", "Analyzer", "SECOND")
    ab = worker_prompt(team, 1, "Q", [a, b], None)
    ba = worker_prompt(team, 1, "Q", [b, a], None)
    assert ab.index("FIRST") < ab.index("SECOND")
    assert ba.index("SECOND") < ba.index("FIRST")


def test_worker_prompt_closing_depends_on_kind():
    for domain in DOMAINS:
        team = load_qmix_team(domain)
        writer = worker_prompt(team, 0, "Q", [], None)
        analyzer = worker_prompt(team, 2, "Q", [], None)
        assert writer != analyzer
    code = worker_prompt(load_qmix_team("code"), 0, "Q", [], None)
    math = worker_prompt(load_qmix_team("math"), 0, "Q", [], None)
    assert code != math


def test_worker_prompt_text_with_braces():
    team = load_qmix_team("code")
    text = worker_prompt(team, 0, "f({x})", [("CodeWriter_1", "Bug Fixer", "d = {'a': 1}")], "{previous}")
    assert "f({x})" in text and "d = {'a': 1}" in text and "{previous}" in text


@pytest.mark.parametrize("i", [-1, 3, 1.0])
def test_worker_prompt_bad_index(i):
    with pytest.raises(InvalidArgumentError) as info:
        worker_prompt(load_qmix_team("code"), i, "Q", [], None)
    assert info.value.arg == "i"


def test_final_prompt_contains_every_output_in_order():
    team = load_qmix_team("math")
    outputs = [
        ("MathSolver_0", "Math Solver", "The answer is 5"),
        ("MathSolver_1", "Inspector", "The answer is 6"),
        ("AnalyzeAgent_2", "Analyzer", "The answer is 7"),
    ]
    text = final_prompt(team, "TASK-TEXT", outputs)
    assert text.index("TASK-TEXT") < text.index("MathSolver_0 (Math Solver)")
    positions = [text.index(f"The answer is {k}") for k in (5, 6, 7)]
    assert positions == sorted(positions)
    for name, role, _ in outputs:
        assert f"{name} ({role})" in text
    assert "final answer" in text[positions[-1] :].lower()


def test_final_prompt_keeps_empty_outputs_visible():
    team = load_qmix_team("code")
    text = final_prompt(
        team, "T", [("CodeWriter_0", "Project Manager", ""), ("AnalyzeAgent_2", "Analyzer", "X")]
    )
    assert "CodeWriter_0 (Project Manager)" in text and "AnalyzeAgent_2 (Analyzer)" in text
