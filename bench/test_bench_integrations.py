"""Routing overhead of the LangGraph adapter per superstep, against the same graph with LangGraph's static edges.

Both graphs run R rounds of N = 4 agents whose replies are instant (runnables returning DyTopo's JSON fields,
so only the graphs' own work is timed): every round fans out to the agents, joins, delivers the private messages
and loops. The static graph is plain LangGraph: ``add_edge`` fan-out to nodes that invoke the same agent
runnables, a join node that appends each private message to its chain successor's memory, a conditional edge
back to the agents. The adapter's graph
(:func:`toporoute.integrations.langgraph.build_graph`, no manager, no recorder) does the same with a ``Send`` per
agent and toporoute's routing in the join node:

- ``chain``: the fixed chain graph (the adapter's own overhead: prompts, parsing, sigma and inboxes);
- ``dytopo``: the descriptors matched by the Router, the same four descriptors every round (the encoder's cache
  answers them: the routing op and the graph work);
- ``dytopo-new``: new descriptors every round (the encoder embeds 2N texts per round, as in a real run).

Printed: time per round of each, the ratio to the static graph and the overhead per superstep (a round is two
supersteps: the agents, then the join). No timing assertions. The graphs' delivered memories are checked equal
(chain) before timing.

Run: ``TOPOROUTE_BENCH=full python -m pytest bench/test_bench_integrations.py -s``; under ``--benchmark-disable``
(CI) smoke sizes.
"""

from __future__ import annotations

import itertools
import operator
from typing import Annotated, Any, TypedDict

import pytest

pytest.importorskip("langgraph")

from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.runnables import RunnableLambda
from langgraph.graph import END, START, StateGraph

from toporoute.integrations.langgraph import build_graph, team_input

from ._compare import machine, report, seconds
from ._scale import pick

NAMES = ["Developer", "Researcher", "Tester", "Designer"]
ROUNDS = pick(5, 2)
NEEDS = [
    "I need the test cases.",
    "I need the function signature.",
    "I need the implementation to test.",
    "I need the chosen algorithm.",
]
OFFERS = [
    "I provide the implementation.",
    "I provide the algorithm and its complexity.",
    "I provide test cases with expected results.",
    "I provide the function signature.",
]
_fresh = itertools.count()


def _reply(i: int, fresh: bool) -> dict[str, Any]:
    tag = f" (variant {next(_fresh)})" if fresh else ""
    return {
        "public_content": f"{NAMES[i]}'s contribution.",
        "private_content": {"": f"a note from {NAMES[i]}"},
        "q_vector": NEEDS[i] + tag,
        "k_vector": OFFERS[i] + tag,
    }


def _agents(fresh: bool = False) -> dict[str, Any]:
    return {name: RunnableLambda(lambda _m, i=i: _reply(i, fresh)) for i, name in enumerate(NAMES)}


def _merge(a: dict[str, Any] | None, b: dict[str, Any] | None) -> dict[str, Any]:
    return {**(a or {}), **(b or {})}


class StaticState(TypedDict, total=False):
    round: int
    outputs: Annotated[dict[str, Any], _merge]
    memory: dict[str, list[Any]]
    log: Annotated[list[Any], operator.add]


def _static_graph(rounds: int) -> Any:
    """The same rounds with LangGraph's static edges: fan-out, join (chain delivery), loop. Each agent node
    invokes the same runnable as the adapter's, with a system and a user message."""
    graph = StateGraph(StaticState)
    agents = _agents()
    for name in NAMES:

        def agent(state: StaticState, name: str = name) -> dict[str, Any]:
            messages = [SystemMessage(f"You are {name}."), HumanMessage(f"Round {state.get('round', 0)}.")]
            return {"outputs": {name: agents[name].invoke(messages)}}

        graph.add_node(name, agent)
        graph.add_edge(START, name)
        graph.add_edge(name, "join")

    def join(state: StaticState) -> dict[str, Any]:
        memory = {k: list(v) for k, v in (state.get("memory") or {}).items()}
        outputs = state["outputs"]
        for i, name in enumerate(NAMES):
            routed = [] if i == 0 else [(NAMES[i - 1], outputs[NAMES[i - 1]]["private_content"][""])]
            memory[name] = [*memory.get(name, []), (outputs[name]["public_content"], routed)]
        return {"memory": memory, "round": int(state.get("round") or 0) + 1}

    graph.add_node("join", join)
    graph.add_conditional_edges("join", lambda s: END if s["round"] >= rounds else NAMES, [*NAMES, END])
    return graph.compile()


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> Any:
    from toporoute.embed import Encoder, Router

    return Router(Encoder.default(cache_dir=tmp_path_factory.mktemp("bench-cache")), tau=0.3, k_in=3)


def test_routing_overhead_per_superstep_vs_static_edges(router: Any) -> None:
    static = _static_graph(ROUNDS)
    chain = build_graph(_agents(), routing="chain", max_rounds=ROUNDS).compile()
    dytopo = build_graph(_agents(), router=router, max_rounds=ROUNDS).compile()
    fresh = build_graph(_agents(fresh=True), router=router, max_rounds=ROUNDS).compile()

    want = static.invoke({"round": 0, "memory": {}})
    got = chain.invoke(team_input("Write add(a, b)."))
    for name in NAMES:  # the same messages reach the same agents
        assert [
            (b["public"], [(r["sender"], r["text"]) for r in b["routed"]]) for b in got["memory"][name]
        ] == [(p, routed) for p, routed in want["memory"][name]]
    routed = dytopo.invoke(team_input("Write add(a, b)."))["routed"]
    assert routed, "the descriptors route at least one message"

    print(f"\n[cpu] {machine()}; {ROUNDS} rounds of {len(NAMES)} agents per run")
    t_static = seconds(lambda: static.invoke({"round": 0, "memory": {}})) / ROUNDS
    cases = [
        ("chain", chain),
        ("dytopo", dytopo),
        ("dytopo-new", fresh),
    ]
    for label, app in cases:
        t = seconds(lambda app=app: app.invoke(team_input("Write add(a, b)."))) / ROUNDS
        report(f"LangGraph round, toporoute {label} vs static edges", label, t, "static", t_static, None)
        print(
            f"[overhead] {label}: {t * 1e3:.2f} ms per round vs {t_static * 1e3:.2f} ms static: "
            f"+{(t - t_static) / 2 * 1e3:.2f} ms per superstep"
        )
