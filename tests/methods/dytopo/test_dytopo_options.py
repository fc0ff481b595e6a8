"""DyTopo's optional behaviours from the spec (all off by default), on the scripted engine with the real encoder:
the manager as a sink node (8.6), no manager call in the last round (8.14), role-prefixed descriptors (8.18), the
manager's earlier goals (8.10) and per-role completion limits; each with its effect, and off = the default loop."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from test_methods import MATH, TASK, one_episode, team_engine, worker_reply

from toporoute.errors import InvalidArgumentError
from toporoute.llm import Request
from toporoute.llm.scripted import ScriptedEngine
from toporoute.methods import LoopConfig, make_method

INITIAL_GOAL = LoopConfig().initial_goal


def _manager_prompts(engine: ScriptedEngine) -> list[str]:
    return [r.messages[-1].content for b in engine.batches for r in b if r.tags.agent == "Manager"]


def _agents_per_batch(engine: ScriptedEngine) -> list[list[str]]:
    return [[r.tags.agent for r in b] for b in engine.batches]


# -- 8.14: no manager call in the last round ----------------------------------------------------------------


def test_skip_last_manager_drops_only_the_last_rounds_manager_call(encoder) -> None:
    plain = team_engine(done_at=9)
    out, records, _ = asyncio.run(one_episode(make_method("dytopo", rounds=3, encoder=encoder), TASK, plain))
    assert [len(b) for b in plain.batches] == [4, 1, 4, 1, 4, 1]
    assert all(r.manager is not None for r in records) and "Manager" in records[2].usage.agents

    skip = team_engine(done_at=9)
    method = make_method("dytopo", rounds=3, skip_last_manager=True, encoder=encoder)
    out, records, summary = asyncio.run(one_episode(method, TASK, skip))
    assert [len(b) for b in skip.batches] == [4, 1, 4, 1, 4]
    assert (out.rounds, out.halted) == (3, False)
    assert [r.manager is None for r in records] == [False, False, True]
    assert "Manager" not in records[2].usage.agents and summary.outcomes[0].usage["calls"] == 14
    assert records[2].goal == "goal after round 2"  # the goal the round-2 manager set still holds
    assert method.params()["skip_last_manager"] is True


# -- 8.10: the manager's earlier goals ----------------------------------------------------------------------


def test_manager_goal_history_lists_the_earlier_goals_and_changes_nothing_else(encoder) -> None:
    off = team_engine(done_at=9)
    asyncio.run(one_episode(make_method("dytopo", rounds=3, encoder=encoder), TASK, off))
    on = team_engine(done_at=9)
    method = make_method("dytopo", rounds=3, manager_goal_history=True, encoder=encoder)
    asyncio.run(one_episode(method, TASK, on))

    off_prompts, on_prompts = _manager_prompts(off), _manager_prompts(on)
    section = (
        "Goals of the earlier rounds, oldest first:\n"
        f"Round 1: {INITIAL_GOAL}\n"
        "Round 2: goal after round 1\n\n"
    )
    assert section in on_prompts[2]
    assert on_prompts[2].index(section) < on_prompts[2].index(
        "Round 3 of 3. Goal of this round: goal after round 2"
    )
    assert f"Goals of the earlier rounds, oldest first:\nRound 1: {INITIAL_GOAL}\n\n" in on_prompts[1]
    assert on_prompts[0] == off_prompts[0]  # round 1 has no earlier goal
    # the section is the only difference; without the option the manager sees no earlier goal
    assert on_prompts[2].replace(section, "") == off_prompts[2]
    assert all("Goals of the earlier rounds" not in p for p in off_prompts)
    assert _worker_prompts(on) == _worker_prompts(off)


def _worker_prompts(engine: ScriptedEngine) -> list[str]:
    return [r.messages[-1].content for b in engine.batches for r in b if r.tags.agent != "Manager"]


# -- 8.18: role-prefixed descriptors ------------------------------------------------------------------------


def _cosines(encoder, queries: list[str], keys: list[str]) -> np.ndarray:
    """``out[j, i] = cos(key_j, query_i)``, as the trace's ``scores[src][dst]``."""
    q, k = encoder.encode(queries), encoder.encode(keys)
    return np.asarray(k) @ np.asarray(q).T


def test_role_prefix_embeds_role_and_descriptor(encoder) -> None:
    runs = {}
    for prefix in (False, True):
        method = make_method("dytopo", rounds=1, role_prefix=prefix, encoder=encoder)
        runs[prefix] = asyncio.run(one_episode(method, TASK, team_engine(done_at=1)))[1][0]
    plain, enriched = runs[False], runs[True]
    queries, keys = plain.descriptors.query, plain.descriptors.key
    assert enriched.descriptors == plain.descriptors  # the trace keeps what the agents wrote
    roles = plain.graph.roles
    want_plain = _cosines(encoder, queries, keys)
    want_enriched = _cosines(
        encoder, [f"{r}: {q}" for r, q in zip(roles, queries)], [f"{r}: {k}" for r, k in zip(roles, keys)]
    )
    off_diag = ~np.eye(len(roles), dtype=bool)
    np.testing.assert_allclose(np.array(plain.graph.scores)[off_diag], want_plain[off_diag], atol=2e-4)
    np.testing.assert_allclose(np.array(enriched.graph.scores)[off_diag], want_enriched[off_diag], atol=2e-4)
    assert np.abs(want_enriched - want_plain)[off_diag].max() > 0.01  # the prefix moves the scores


def test_role_prefix_keeps_an_empty_descriptor_empty(encoder) -> None:
    """A worker that states no need still receives nothing with the prefix (the prefix alone would match)."""

    def reply(request: Request) -> str:
        body = json.loads(worker_reply(request.tags.agent, request.tags.round))
        if request.tags.agent == "Researcher":
            body["q_vector"] = ""
        return json.dumps(body)

    method = make_method(
        "dytopo", rounds=1, manager=False, role_prefix=True, tau=-0.5, k_in=0, encoder=encoder
    )
    record = asyncio.run(one_episode(method, TASK, ScriptedEngine(reply)))[1][0]
    assert record.graph.inbox["Researcher"] == []
    assert len(record.graph.edges) == 9  # every other ordered pair passes tau -0.5


# -- 8.6: the manager as a sink node ------------------------------------------------------------------------

MANAGER_NEED = "I need the complete Python implementation of the function."


def _sink_engine() -> ScriptedEngine:
    def reply(request: Request) -> str:
        agent, round_ = request.tags.agent, request.tags.round
        if agent == "Manager":
            return json.dumps(
                {
                    "public_content": "status",
                    "private_content": {},
                    "q_vector": MANAGER_NEED,
                    "k_vector": "I provide coordination.",
                    "is_complete": False,
                    "next_goal": f"goal after round {round_ + 1}",
                }
            )
        return worker_reply(agent, round_)

    return ScriptedEngine(reply)


def test_manager_sink_receives_the_private_messages_of_matching_workers(encoder) -> None:
    off_engine = _sink_engine()
    _, off, _ = asyncio.run(one_episode(make_method("dytopo", rounds=2, encoder=encoder), TASK, off_engine))
    engine = _sink_engine()
    method = make_method("dytopo", rounds=2, manager_sink=True, encoder=encoder)
    _, records, _ = asyncio.run(one_episode(method, TASK, engine))

    workers = ["Developer", "Researcher", "Tester", "Designer"]
    assert all(r.graph.agents == workers for r in off)
    for r, plain in zip(records, off):
        assert r.graph.agents == [*workers, "Manager"] and r.graph.roles[-1] == "Workflow Orchestrator"
        assert all(e.src != "Manager" for e in r.graph.edges)  # a sink: it offers nothing
        assert r.descriptors.key[-1] == ""
        between_workers = {(e.src, e.dst, e.score) for e in r.graph.edges if e.dst != "Manager"}
        assert between_workers == {(e.src, e.dst, e.score) for e in plain.graph.edges}  # workers unchanged
        assert "Manager" not in r.messages
    # round 1 matches the team's default need, round 2 the need the manager stated in round 1
    assert records[0].descriptors.query[-1] == "I need the status and the results of every agent's work."
    assert records[1].descriptors.query[-1] == MANAGER_NEED
    inbox = records[1].graph.inbox["Manager"]
    assert inbox and inbox[0] == "Developer"  # the Developer offers exactly what the manager needs
    # matched like any recipient: providers above tau, the k_in = 3 best, by descending score
    scores = np.array(records[1].graph.scores)
    want = sorted((i for i in range(4) if scores[i, 4] > 0.3), key=lambda i: (-scores[i, 4], i))[:3]
    assert inbox == [workers[i] for i in want]
    routed = [(e.src, e.dst) for e in records[1].usage.edges if e.dst == "Manager"]
    assert sorted(s for s, _ in routed) == sorted(inbox)
    # the manager's round-2 prompt holds those private messages, most relevant first
    prompt = _manager_prompts(engine)[1]
    assert "Private messages routed to you this round" in prompt
    assert "From Developer (Code Developer), relevance=" in prompt and "private from Developer r2" in prompt
    for a in workers:
        assert (f"private from {a} r2" in prompt) == (a in inbox)
    # the off run's manager sees no private message
    assert all("private from" not in p and "routed to you" not in p for p in _manager_prompts(off_engine))


def test_manager_sink_keeps_its_node_in_a_round_without_manager_call(encoder) -> None:
    method = make_method("dytopo", rounds=2, manager_sink=True, skip_last_manager=True, encoder=encoder)
    _, records, _ = asyncio.run(one_episode(method, TASK, _sink_engine()))
    last = records[1]
    assert last.manager is None and last.graph.agents[-1] == "Manager"
    assert last.descriptors.query[-1] == "" and last.graph.inbox["Manager"] == []
    assert last.stats is not None and last.stats.jaccard_similarity_prev is not None


def test_manager_sink_needs_semantic_routing_and_is_off_in_the_baselines() -> None:
    with pytest.raises(InvalidArgumentError, match="manager_sink"):
        LoopConfig(manager_sink=True, topology="chain")
    with pytest.raises(InvalidArgumentError, match="manager_sink"):
        LoopConfig(manager_sink=True, manager=False)
    for name in ("random", "chain", "parallel"):
        params = make_method(name, manager_sink=True, role_prefix=True).params()
        assert params["manager_sink"] is False and params["role_prefix"] is False
    assert make_method("dytopo", manager_sink=True).params()["manager_sink"] is True


def test_baseline_edge_counts_leave_out_edges_into_the_sink(tmp_path, encoder) -> None:
    from toporoute.llm import Structured
    from toporoute.methods.baselines import dytopo_edge_counts
    from toporoute.methods.harness import run_method

    method = make_method("dytopo", rounds=2, manager_sink=True, encoder=encoder)
    out = tmp_path / "dytopo"
    asyncio.run(run_method(method, [TASK], Structured(_sink_engine()), out, info={}, progress=False))
    lines = [json.loads(x) for x in (out / "traces" / f"{TASK.episode_id}.jsonl").read_text().splitlines()]
    assert any(e["dst"] == "Manager" for e in lines[1]["edges"])
    assert dytopo_edge_counts(out) == {
        TASK.episode_id: [sum(e["dst"] != "Manager" for e in r["edges"]) for r in lines]
    }


# -- per-role completion limits -----------------------------------------------------------------------------


def test_role_max_tokens_sets_that_roles_limit_and_schema(encoder) -> None:
    engine = team_engine(done_at=1)
    method = make_method("dytopo", max_tokens=1000, role_max_tokens={"Solver": 5000}, encoder=encoder)
    asyncio.run(one_episode(method, MATH, engine))
    limits = {r.tags.agent: r.sampling.max_tokens for b in engine.batches for r in b}
    assert limits == {"ProblemParser": 1000, "Solver": 5000, "Verifier": 1000, "Manager": 1000}
    schemas = {r.tags.agent: r.schema for b in engine.batches for r in b}
    cap = schemas["Solver"]["properties"]["public_content"]["maxLength"]
    assert cap > schemas["Verifier"]["properties"]["public_content"]["maxLength"]
    assert method.params()["role_max_tokens"] == {"Solver": 5000}

    default = team_engine(done_at=1)
    asyncio.run(one_episode(make_method("dytopo", max_tokens=1000, encoder=encoder), MATH, default))
    assert {r.sampling.max_tokens for b in default.batches for r in b} == {1000}
    # a role of the other domain's team does not touch this one
    other = team_engine(done_at=1)
    method = make_method("dytopo", max_tokens=1000, role_max_tokens={"Developer": 64}, encoder=encoder)
    asyncio.run(one_episode(method, MATH, other))
    assert {r.sampling.max_tokens for b in other.batches for r in b} == {1000}


@pytest.mark.parametrize(
    ("value", "match"),
    [
        ({"Solvr": 5000}, r"unknown role\(s\) \['Solvr'\].*'Solver'"),
        ({"Solver": 0}, r"role_max_tokens\['Solver'\] must be an integer >= 1; got 0"),
        ({"Solver": "5000"}, r"role_max_tokens\['Solver'\] must be an integer"),
        (["Solver=5000"], "must map agent names"),
    ],
)
def test_role_max_tokens_rejects_bad_values_naming_them(value, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match) as exc:
        LoopConfig(role_max_tokens=value)
    assert exc.value.arg == "role_max_tokens"


def test_all_options_are_off_by_default_and_recorded() -> None:
    params = make_method("dytopo").params()
    assert {
        k: params[k] for k in ("manager_sink", "skip_last_manager", "role_prefix", "manager_goal_history")
    } == {
        "manager_sink": False,
        "skip_last_manager": False,
        "role_prefix": False,
        "manager_goal_history": False,
    }
    assert params["role_max_tokens"] == {}
    json.dumps(params)  # run.json holds them


# -- the command line ---------------------------------------------------------------------------------------


def _loop_settings(*argv: str) -> dict:
    import argparse
    from pathlib import Path

    from toporoute.methods.dytopo.plugin import LOOP_OPTIONS

    parser = argparse.ArgumentParser()
    LOOP_OPTIONS.add(parser.add_argument_group("loop"))
    return LOOP_OPTIONS.read(parser.parse_args(list(argv)), Path("unused"))


def test_cli_options_become_loop_settings() -> None:
    keys = ("manager_sink", "skip_last_manager", "role_prefix", "manager_goal_history", "role_max_tokens")
    assert {k: _loop_settings()[k] for k in keys} == dict(zip(keys, [False] * 4 + [{}]))
    settings = _loop_settings(
        "--manager-sink",
        "--skip-last-manager",
        "--role-prefix",
        "--manager-goal-history",
        "--role-max-tokens",
        "Solver=5000",
        "--role-max-tokens",
        "Verifier=800",
    )
    assert {k: settings[k] for k in keys} == {
        "manager_sink": True,
        "skip_last_manager": True,
        "role_prefix": True,
        "manager_goal_history": True,
        "role_max_tokens": {"Solver": 5000, "Verifier": 800},
    }
    assert LoopConfig(**settings).role_max_tokens == {"Solver": 5000, "Verifier": 800}


@pytest.mark.parametrize(
    ("item", "message"),
    [
        (
            "Solvr=5000",
            "unknown role 'Solvr'; the roles: Designer, Developer, Manager, ProblemParser, Researcher",
        ),
        ("Solver", "--role-max-tokens takes ROLE=N (e.g. Solver=5000); got 'Solver'"),
        ("=5000", "takes ROLE=N"),
        ("Solver=lots", "N must be an integer >= 1; got 'lots'"),
        ("Solver=0", "N must be an integer >= 1; got '0'"),
    ],
)
def test_cli_role_max_tokens_errors_name_the_bad_item(tmp_path, capsys, item: str, message: str) -> None:
    from toporoute.cli import main

    assert main(["run", "dytopo", "--role-max-tokens", item, "--out", str(tmp_path / "x")]) == 2
    err = capsys.readouterr().err
    assert message in err and repr(item) in err
    assert not (tmp_path / "x").exists()  # refused before anything starts


def test_cli_role_max_tokens_refuses_a_role_named_twice() -> None:
    with pytest.raises(InvalidArgumentError, match=r"names 'Solver' twice \(5000 and 6000\)"):
        _loop_settings("--role-max-tokens", "Solver=5000", "--role-max-tokens", "Solver=6000")
