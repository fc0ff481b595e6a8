"""toporoute.integrations.langgraph with LangChain's fake chat models: the routed edges equal
``Router.route_texts`` on the agents' descriptors, the routed private messages reach their recipients (through
the ``Send`` that starts their next call), the manager's decision ends the graph, a checkpointer interrupts and
resumes a run with the same result, and the trace is the one ``toporoute report`` reads."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("langgraph")

from _framework_models import decision, recording, reply
from langchain_core.language_models.fake_chat_models import FakeListChatModel
from langgraph.checkpoint.memory import InMemorySaver

from toporoute.embed import Router
from toporoute.errors import InvalidArgumentError
from toporoute.integrations.langgraph import Agent, build_graph, team_input
from toporoute.integrations.rounds import QMixRouting
from toporoute.methods.qmix import actions_to_graph
from toporoute.tasks import Task
from toporoute.trace.reader import load_run

NAMES = ["Developer", "Researcher", "Tester", "Designer"]
TITLES = ["Code Developer", "Algorithm Researcher", "Quality Tester", "API Designer"]
# two rounds of (need, offer) per agent: the Tester wants the code, the Developer wants tests, ...
DESCRIPTORS = [
    [
        (
            "I need the test cases and the expected results.",
            "I provide the Python implementation of the function.",
        ),
        (
            "I need the function signature to study.",
            "I provide the standard algorithm and its time complexity.",
        ),
        (
            "I need the Python implementation of the function to test.",
            "I provide test cases with expected results.",
        ),
        ("I need the chosen algorithm.", "I provide the function signature and type hints."),
    ],
    [
        ("I need the failing test case.", "I provide the fixed Python implementation."),
        ("I need nothing more.", "I provide a complexity analysis."),
        ("I need the fixed implementation to run the tests again.", "I provide the failing test case."),
        ("I need a review of the interface.", "I provide the final interface."),
    ],
]
CODE = "```python\ndef add(a, b):\n    return a + b\n```"


def _replies(t: int) -> list[str]:
    return [
        reply(
            CODE if name == "Developer" else f"{name} round {t}",
            need,
            offer,
            {"Tester": f"from {name} in round {t}"},
        )
        for name, (need, offer) in zip(NAMES, DESCRIPTORS[t])
    ]


@pytest.fixture(scope="module")
def router(encoder) -> Router:
    return Router(encoder, tau=0.3, k_in=3)


def _team(seen: dict[str, list], halt_after: int | None = 2) -> tuple[dict, FakeListChatModel]:
    per_round = [_replies(t) for t in range(len(DESCRIPTORS))]
    models = {
        name: recording([r[i] for r in per_round], seen.setdefault(name, [])) for i, name in enumerate(NAMES)
    }
    decisions = [decision(halt_after is not None and t + 1 >= halt_after) for t in range(3)]
    return models, FakeListChatModel(responses=decisions)


def _expected(router: Router, t: int) -> tuple[np.ndarray, np.ndarray]:
    queries, keys = zip(*DESCRIPTORS[t])
    routes = router.route_texts(list(queries), list(keys))
    return routes.adjacency, routes.scores


def _events(app, inputs, config) -> list[dict]:
    return [e for mode, e in app.stream(inputs, config, stream_mode=["custom"]) if mode == "custom"]


def test_routed_edges_delivered_messages_and_halting(router: Router, tmp_path: Path) -> None:
    seen: dict[str, list] = {}
    models, manager = _team(seen)
    graph = build_graph(models, manager=manager, router=router, max_rounds=4, recorder=tmp_path / "langgraph")
    app = graph.compile(checkpointer=InMemorySaver())
    config = {"configurable": {"thread_id": "t1"}}
    events = _events(app, team_input("Write add(a, b).", episode="ep1"), config)

    routes = [e for e in events if e["event"] == "route"]
    assert [e["round"] for e in routes] == [0, 1]  # the manager halted after round 2 of 4
    for t, event in enumerate(routes):
        adjacency, scores = _expected(router, t)
        expected = {(NAMES[s], NAMES[d]) for s, d in zip(*np.nonzero(adjacency))}
        assert {(e["src"], e["dst"]) for e in event["edges"]} == expected
        assert expected, "the descriptors route at least one message"
        for e in event["edges"]:
            assert e["score"] == pytest.approx(
                float(scores[NAMES.index(e["src"]), NAMES.index(e["dst"])]), abs=1e-4
            )

    # round 2's prompt of each agent holds the private messages routed to it in round 1, best match first
    adjacency, scores = _expected(router, 0)
    for i, name in enumerate(NAMES):
        assert len(seen[name]) == 2
        prompt = seen[name][1][1].content
        providers = sorted(np.flatnonzero(adjacency[:, i]), key=lambda j: -scores[j, i])
        got = [n for n in NAMES if f"From {n} (" in prompt]
        assert sorted(got) == sorted(NAMES[j] for j in providers)
        positions = [
            prompt.index(f"From {NAMES[j]} ({TITLES[j]}), relevance={scores[j, i]:.2f}") for j in providers
        ]
        assert positions == sorted(positions)
        for j in providers:
            assert f"from {NAMES[j]} in round 0" in prompt
        assert (
            "round 1" not in seen[name][0][1].content.split("Your memory:")[1]
        )  # nothing routed before round 1

    state = app.get_state(config)
    assert state.next == () and state.values["halted"] is True
    assert events[-1] == {"event": "finish", "episode": "ep1", "answer": state.values["answer"], "halted": True,
                          "rounds": 2}  # fmt: skip
    assert "def add(a, b)" in state.values["answer"]

    run = load_run(tmp_path / "langgraph").methods[0]
    trace = run.traces["ep1"]
    assert [r.round for r in trace] == [0, 1]
    for t, rec in enumerate(trace):
        assert rec.graph.agents == NAMES and rec.graph.roles == TITLES
        assert rec.descriptors is not None and rec.descriptors.query == [q for q, _ in DESCRIPTORS[t]]
        assert {(e.src, e.dst) for e in rec.graph.edges} == {(e["src"], e["dst"]) for e in routes[t]["edges"]}
        assert rec.manager is not None and rec.manager.is_complete is (t == 1)
        assert set(rec.usage.agents) == {*NAMES, "Manager"}
    assert run.episodes[0].record is not None and run.episodes[0].record.halted
    assert run.config["method"] == "langgraph-dytopo" and run.config["params"]["tau"] == 0.3


def test_interrupt_and_resume_through_a_checkpointer(router: Router, tmp_path: Path) -> None:
    straight_seen: dict[str, list] = {}
    models, manager = _team(straight_seen)
    straight = build_graph(models, manager=manager, router=router, max_rounds=4).compile(
        checkpointer=InMemorySaver()
    )
    want = straight.invoke(team_input("Write add(a, b)."), {"configurable": {"thread_id": "a"}})

    seen: dict[str, list] = {}
    models, manager = _team(seen)
    graph = build_graph(models, manager=manager, router=router, max_rounds=4, recorder=tmp_path / "lg")
    saver = InMemorySaver()
    app = graph.compile(checkpointer=saver, interrupt_before=["route"], interrupt_after=["manager"])
    config = {"configurable": {"thread_id": "b"}}
    app.invoke(team_input("Write add(a, b)."), config)
    stops = []
    while app.get_state(config).next:
        stops.append(app.get_state(config).next)
        app.invoke(None, config)
    assert stops == [("route",), ("Developer", "Researcher", "Tester", "Designer"), ("route",), ("finish",)]
    got = app.get_state(config).values
    assert got["answer"] == want["answer"] and got["halted"] is want["halted"] is True
    assert [h["order"] for h in got["history"]] == [h["order"] for h in want["history"]]
    assert got["memory"] == want["memory"]
    trace = load_run(tmp_path / "lg").methods[0].traces["task"]
    assert [r.round for r in trace] == [0, 1]  # each round recorded once

    # a new graph object (a restarted process) resumes from the same checkpointer's thread
    models, manager = _team({})
    fresh = build_graph(models, manager=manager, router=router, max_rounds=4)
    app2 = fresh.compile(checkpointer=saver, interrupt_before=["route"])
    config2 = {"configurable": {"thread_id": "c"}}
    app2.invoke(team_input("Write add(a, b)."), config2)
    assert app2.get_state(config2).next == ("route",)
    resumed = fresh.compile(checkpointer=saver).invoke(None, config2)
    assert resumed["answer"] == want["answer"] and resumed["memory"] == want["memory"]


def test_async_run_routes_as_the_sync_one(router: Router) -> None:
    models, manager = _team({})
    want = (
        build_graph(models, manager=manager, router=router).compile().invoke(team_input("Write add(a, b)."))
    )
    models, manager = _team({})
    app = build_graph(models, manager=manager, router=router).compile()
    got = asyncio.run(app.ainvoke(team_input("Write add(a, b).")))
    assert got["memory"] == want["memory"] and got["routed"] == want["routed"]


def test_without_manager_runs_max_rounds_on_a_fixed_graph(tmp_path: Path) -> None:
    models, _ = _team({})
    app = build_graph(models, routing="chain", max_rounds=2, recorder=tmp_path / "chain").compile()
    events = _events(app, team_input("Write add(a, b)."), {})
    routes = [e for e in events if e["event"] == "route"]
    chain = [{"src": NAMES[i], "dst": NAMES[i + 1], "score": None} for i in range(3)]
    assert [e["edges"] for e in routes] == [chain, chain]
    assert events[-1]["halted"] is False and events[-1]["rounds"] == 2
    trace = load_run(tmp_path / "chain").methods[0].traces["task"]
    assert [r.manager for r in trace] == [None, None] and trace[0].graph.scores is None


def test_qmix_checkpoint_routes_by_its_actions(tmp_path: Path) -> None:
    from toporoute.types.qmix_params import QMixConfig, QMixParams

    path = tmp_path / "agents.safetensors"
    QMixParams.random(QMixConfig(), seed=3).save(path)
    routing = QMixRouting(path)
    models, _ = _team({})
    three = {n: models[n] for n in NAMES[:3]}
    app = build_graph(three, routing=routing, max_rounds=2, recorder=tmp_path / "qmix").compile()
    state = app.invoke(team_input("Write add(a, b)."))
    actions = state["memo"]["actions"]
    assert len(actions) == 2
    for t, rec in enumerate(load_run(tmp_path / "qmix").methods[0].traces["task"]):
        from toporoute.methods.qmix import ACTIONS

        adj, _ = actions_to_graph([ACTIONS.index(a) for a in actions[t]])
        assert {(e.src, e.dst) for e in rec.graph.edges} == {
            (NAMES[s], NAMES[d]) for s, d in zip(*np.nonzero(adj))
        }
        assert rec.extra["actions"] == dict(zip(NAMES[:3], actions[t]))
    with pytest.raises(InvalidArgumentError, match="3 agents"):
        build_graph(models, routing=routing)


def test_custom_roles_and_structured_runnables() -> None:
    from langchain_core.runnables import RunnableLambda

    def agent(need: str, offer: str):
        return RunnableLambda(
            lambda _messages: {"public_content": offer, "q_vector": need, "k_vector": offer}
        )

    agents = [
        Agent(
            "Planner",
            agent("I need a critique of the plan.", "I provide a plan."),
            "Planner",
            "Plans the work.",
        ),
        Agent(
            "Critic",
            agent("I need a plan to critique.", "I provide a critique of the plan."),
            "Critic",
            "Critiques.",
        ),
    ]
    app = build_graph(agents, routing=np.array([[0, 1], [1, 0]], dtype=bool), max_rounds=1).compile()
    state = app.invoke(team_input("Plan a trip."))
    assert {(e["src"], e["dst"]) for e in state["routed"]} == {("Planner", "Critic"), ("Critic", "Planner")}
    assert state["memory"]["Critic"][0]["public"] == "I provide a critique of the plan."
    with pytest.raises(InvalidArgumentError, match="not in DyTopo's code team"):
        build_graph({"Nobody": None, "Developer": None})


def test_a_scored_task_writes_its_episode(router: Router, tmp_path: Path) -> None:
    task = Task(
        id="Add/0", kind="code", prompt="def add(a, b):\n    '''Add.'''\n", entry_point="add",
        test="def check(candidate):\n    assert candidate(2, 3) == 5\n",
    )  # fmt: skip
    models, manager = _team({}, halt_after=1)
    app = build_graph(models, manager=manager, router=router, recorder=tmp_path / "lg").compile()
    state = app.invoke(team_input(task))
    assert state["episode"] == "Add-0"
    episode = json.loads((tmp_path / "lg" / "episodes" / "Add-0.json").read_text())
    assert episode["record"]["score"]["passed"] is True and episode["record"]["rounds"] == 1
    assert episode["usage"]["calls"] == 5
    summary = json.loads((tmp_path / "lg" / "summary.json").read_text())
    assert summary["passed"] == 1 and summary["episodes"] == 1


def test_routing_through_a_service_equals_in_process(router: Router) -> None:
    from _serve import live_server

    from toporoute.client import AsyncClient, Client
    from toporoute.serve import ServeConfig

    models, manager = _team({})
    want = (
        build_graph(models, manager=manager, router=router).compile().invoke(team_input("Write add(a, b)."))
    )

    def edges(state: dict) -> set[tuple[str, str]]:
        return {(e["src"], e["dst"]) for e in state["routed"]}

    with live_server(ServeConfig(port=0)) as url:
        with Client(url) as client:
            models, manager = _team({})
            got = (
                build_graph(models, manager=manager, client=client)
                .compile()
                .invoke(team_input("Write add(a, b)."))
            )
        assert edges(got) == edges(want) and got["memory"] == want["memory"]
        for a, b in zip(got["routed"], want["routed"]):
            assert a["score"] == pytest.approx(b["score"], abs=1e-4)

        async def run_async() -> dict:
            async with AsyncClient(url) as client:
                models, manager = _team({})
                app = build_graph(models, manager=manager, client=client).compile()
                return await app.ainvoke(team_input("Write add(a, b)."))

        assert edges(asyncio.run(run_async())) == edges(want)
