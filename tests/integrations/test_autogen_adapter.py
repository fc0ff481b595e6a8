"""toporoute.integrations.autogen with AutoGen's ReplayChatCompletionClient: each turn's graph equals
``Router.route_texts`` on the participants' descriptors, the selected speaker (or the candidate list) is the
last message's best-matching provider, the team stops on its termination condition, a saved team resumes without
recording a turn twice, and the trace is the one ``toporoute report`` reads."""

from __future__ import annotations

import asyncio
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("autogen_agentchat")
pytest.importorskip("autogen_ext.models.replay")

from _framework_models import reply
from autogen_agentchat.conditions import TextMentionTermination
from autogen_ext.models.replay import ReplayChatCompletionClient

from toporoute.embed import Router
from toporoute.errors import InvalidArgumentError
from toporoute.integrations.autogen import DescriptorSelector, build_team
from toporoute.tasks import Task
from toporoute.trace.reader import load_run

TASK = "Write the Python implementation code of add(a, b) that returns the sum."
DEV = reply(
    "```python\ndef add(a, b):\n    return a + b\n```",
    "I need test cases with expected results for my function.",
    "I provide the Python implementation code of the function.",
)
TESTER = reply(
    "assert add(2, 3) == 5",
    "I need the Python implementation code of the function to test.",
    "I provide test cases with expected results.",
)
RESEARCHER = reply("Addition is O(1).", "I need a list of references.", "I provide a complexity analysis.")
OFFERS = {  # what each agent offers before its first reply
    "Developer": "I provide the Python implementation code.",
    "Researcher": "I provide a complexity analysis.",
    "Tester": "I provide test cases with expected results.",
}


@pytest.fixture(scope="module")
def router(encoder) -> Router:
    return Router(encoder, tau=0.3, k_in=3)


def _clients(turns: int = 6) -> dict[str, ReplayChatCompletionClient]:
    return {
        "Developer": ReplayChatCompletionClient([DEV] * turns),
        "Researcher": ReplayChatCompletionClient([RESEARCHER] * turns),
        "Tester": ReplayChatCompletionClient([TESTER] * turns),
    }


def _check_turns(router: Router, run_dir: Path, episode: str) -> list:
    """Every recorded turn's graph is the Router's on its descriptors, and its choice is the best provider."""
    trace = load_run(run_dir).methods[0].traces[episode]
    for rec in trace:
        assert rec.descriptors is not None
        routes = router.route_texts(rec.descriptors.query, rec.descriptors.key)
        names = rec.graph.agents
        expected = {(names[s], names[d]) for s, d in zip(*np.nonzero(routes.adjacency))}
        assert {(e.src, e.dst) for e in rec.graph.edges} == expected
        r = names.index(rec.extra["speaker"])
        providers = sorted(np.flatnonzero(routes.adjacency[:, r]), key=lambda j: -routes.scores[j, r])
        assert rec.extra["candidates"] == [names[j] for j in providers if names[j] != "user"]
    return trace


def test_selector_picks_the_best_matching_provider(router: Router, tmp_path: Path) -> None:
    selector_model = ReplayChatCompletionClient(["Researcher"] * 10)  # never asked: every turn has a match
    team, chooser = build_team(
        _clients(), selector_model, offers=OFFERS, router=router, recorder=tmp_path / "autogen", episode="e1", max_turns=4,
        task=Task(id="Add/0", kind="code", prompt="def add(a, b):\n    \"\"\"Sum.\"\"\"\n", entry_point="add",
                  test="def check(candidate):\n    assert candidate(2, 3) == 5\n"),
    )  # fmt: skip
    result = asyncio.run(team.run(task=TASK))
    speakers = [m.source for m in result.messages]
    assert speakers == ["user", "Developer", "Tester", "Developer", "Tester"]
    trace = _check_turns(router, tmp_path / "autogen", "e1")
    assert [r.round for r in trace] == [0, 1, 2, 3]
    assert [r.extra["selected"] for r in trace] == speakers[1:]
    assert trace[0].graph.agents == [
        "Developer",
        "Researcher",
        "Tester",
        "user",
    ]  # the task is the first need
    assert trace[1].graph.agents == ["Developer", "Researcher", "Tester"]
    assert (
        set(trace[1].messages) == {"Developer"} and trace[1].usage.agents["Developer"].completion_tokens > 0
    )
    assert selector_model.total_usage().completion_tokens == 0

    record = chooser.finish(result)
    assert record is not None and record.score["passed"] is True and "def add" in record.answer
    run = load_run(tmp_path / "autogen").methods[0]
    assert run.episodes[0].record is not None and run.episodes[0].record.rounds == 4
    assert run.config["method"] == "autogen-dytopo" and run.config["params"]["framework"] == "autogen"


def test_candidate_func_leaves_the_choice_among_matches_to_the_model(router: Router, tmp_path: Path) -> None:
    selector_model = ReplayChatCompletionClient(["Tester"] * 10)
    team, _ = build_team(
        _clients(), selector_model, offers=OFFERS, router=router, recorder=tmp_path / "ag", selector="candidates",
        max_turns=3, fallback="next",
    )  # fmt: skip
    result = asyncio.run(team.run(task=TASK))
    assert [m.source for m in result.messages] == ["user", "Developer", "Tester", "Developer"]
    trace = _check_turns(router, tmp_path / "ag", "team")
    assert trace[0].extra["candidates"] == ["Developer"]  # one match: the model is not asked
    assert trace[1].extra["candidates"] == ["Tester"] and trace[1].extra["selected"] is None
    assert selector_model.total_usage().completion_tokens == 0


def test_termination_and_resume_from_saved_state(router: Router, tmp_path: Path) -> None:
    done = reply("All tests pass. DONE", "I need nothing more.", "I provide the test verdict.")
    clients = _clients()
    clients["Tester"] = ReplayChatCompletionClient([TESTER, done])
    team, _ = build_team(
        clients, ReplayChatCompletionClient([]), offers=OFFERS, router=router, recorder=tmp_path / "ag", episode="e2", max_turns=2,
        termination_condition=TextMentionTermination("DONE"),
    )  # fmt: skip
    first = asyncio.run(team.run(task=TASK))
    assert [m.source for m in first.messages] == ["user", "Developer", "Tester"]
    state = asyncio.run(team.save_state())

    # a new team (a restarted process) loads the saved state and goes on where the first stopped
    clients2 = _clients()
    clients2["Tester"] = ReplayChatCompletionClient([done])
    team2, _ = build_team(
        clients2, ReplayChatCompletionClient([]), offers=OFFERS, router=router, recorder=tmp_path / "ag", episode="e2", max_turns=4,
        termination_condition=TextMentionTermination("DONE"),
    )  # fmt: skip
    asyncio.run(team2.load_state(state))
    second = asyncio.run(team2.run())
    assert [m.source for m in second.messages] == ["Developer", "Tester"]
    assert second.stop_reason is not None and "DONE" in second.stop_reason
    trace = _check_turns(router, tmp_path / "ag", "e2")
    assert [r.round for r in trace] == [0, 1, 2, 3]
    assert [r.extra["selected"] for r in trace] == ["Developer", "Tester", "Developer", "Tester"]


def test_no_match_falls_back(router: Router) -> None:
    from autogen_agentchat.messages import TextMessage

    chooser = DescriptorSelector(["Developer", "Tester"], router=router, fallback="next")
    thread = [TextMessage(content="Unrelated small talk about the weather.", source="user")]
    assert asyncio.run(chooser.select(thread)) == "Developer"
    assert asyncio.run(DescriptorSelector(["Developer", "Tester"], router=router).select(thread)) is None
    assert asyncio.run(chooser.candidates(thread)) == ["Developer", "Tester"]
    with pytest.raises(InvalidArgumentError, match="fallback"):
        DescriptorSelector(["Developer", "Tester"], router=router, fallback="random")
