"""Agent Q-Mix above the core: phi and the wave schedule (spec §2), observations (§3) and the episode loop on the
scripted engine (messages delivered in waves, FinalRefer, traces). Acting needs no torch; the trainer's tests
(which do) are in test_qmix_train.py."""

from __future__ import annotations

import asyncio
from pathlib import Path

import _humaneval
import numpy as np
import pytest

from toporoute import ops
from toporoute.errors import InvalidArgumentError
from toporoute.llm.scripted import ScriptedEngine
from toporoute.methods import make_method
from toporoute.methods.qmix import (
    ACTIONS,
    Features,
    QMix,
    QMixPolicy,
    QMixSettings,
    actions_to_graph,
    global_state,
    hash_task_feature,
    observations,
    schedule,
)
from toporoute.runtime import Runtime
from toporoute.tasks import Task
from toporoute.types.qmix_params import QMixConfig, QMixParams

HE0_SOLUTION = (
    "```python\ndef has_close_elements(numbers, threshold):\n"
    "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n```"
)


def edges(adj: np.ndarray) -> set[tuple[int, int]]:
    return {(int(s), int(d)) for s, d in zip(*np.nonzero(adj))}


# ---------------------------------------------------------------------------------------------------- phi


@pytest.mark.parametrize(
    ("joint", "expected"),
    [
        ((0, 0, 0), set()),
        ((1, 1, 1), {(0, 1), (0, 2), (1, 2)}),
        ((2, 2, 2), {(0, 1), (1, 2)}),
        ((3, 3, 3), {(1, 0), (2, 0), (2, 1)}),
        ((4, 4, 4), {(0, 1), (1, 2)}),
        ((5, 5, 5), {(0, 1), (1, 0), (1, 2), (2, 1)}),
        ((1, 0, 0), {(0, 1), (0, 2)}),
        ((3, 2, 3), {(1, 0), (1, 2), (2, 0)}),
        ((5, 5, 5, 5), {(0, 2), (2, 0), (1, 3), (3, 1)}),
    ],
)
def test_phi_gives_the_specs_edge_sets(joint, expected) -> None:
    adj, _ = actions_to_graph(joint)
    assert edges(adj) == expected
    assert not adj.diagonal().any()


@pytest.mark.parametrize(
    ("joint", "waves", "inbound"),
    [
        ((0, 0, 0), [[0, 1, 2]], [[], [], []]),
        ((1, 1, 1), [[0], [1], [2]], [[], [0], [0, 1]]),
        ((3, 3, 3), [[2], [1], [0]], [[1, 2], [2], []]),
        ((1, 0, 0), [[0], [1, 2]], [[], [0], [0]]),
        ((3, 2, 3), [[1], [2], [0]], [[1, 2], [], [1]]),
        # debate pairs: the lower index runs first, its partner reads it
        ((5, 5, 5), [[0], [1], [2]], [[], [0], [1]]),
        ((5, 5, 5, 5), [[0, 1], [2, 3]], [[], [], [0], [1]]),
    ],
)
def test_schedule_runs_in_waves_with_the_debate_tie_break(joint, waves, inbound) -> None:
    s = schedule(*actions_to_graph(joint))
    assert s.waves == waves
    assert s.inbound == inbound
    assert sorted(s.order) == list(range(len(joint)))


def test_schedule_always_executes_a_dag_of_the_round_graph() -> None:
    rng = np.random.default_rng(0)
    longer_cycles = 0
    for _ in range(500):
        n = int(rng.integers(1, 9))
        joint = rng.integers(0, len(ACTIONS), size=n)
        adj, debates = actions_to_graph(joint)
        s = schedule(adj, debates)
        tie_break = {(max(i, p), min(i, p)) for i, p in debates}
        assert tie_break <= set(s.removed) and all(adj[a, b] for a, b in s.removed)
        # the guard tests only partner -> agent, so a debate can close a longer cycle through an earlier path
        # (e.g. (3, 5, 3, 5, 5, 0): 0 -> 3 -> 2 -> 0); the schedule breaks it like any cycle
        longer_cycles += len(s.removed) > len(tie_break)
        executed = adj.copy()
        for a, b in s.removed:
            executed[a, b] = False
        assert bool(ops.toposort(executed).is_dag)
        position = {v: k for k, wave in enumerate(s.waves) for v in wave}
        assert sorted(position) == list(range(n))
        for i in range(n):
            assert all(position[j] < position[i] for j in s.inbound[i])
    assert 0 < longer_cycles < 100


def test_phi_rejects_unknown_actions() -> None:
    with pytest.raises(InvalidArgumentError, match="actions must be in 0..5"):
        actions_to_graph([0, 6])


def test_legacy_repo_exec_runs_only_sources_and_delivers_nothing() -> None:
    s = schedule(*actions_to_graph((3, 3, 3)), legacy_repo_exec=True)
    assert s.waves == [[2]] and s.skipped == [0, 1] and s.inbound == [[], [], []]
    s = schedule(*actions_to_graph((5, 5, 5)), legacy_repo_exec=True)
    assert s.waves == [] and s.skipped == [0, 1, 2]
    s = schedule(*actions_to_graph((0, 0, 0)), legacy_repo_exec=True)
    assert s.waves == [[0, 1, 2]]


# ---------------------------------------------------------------------------------------------------- features


def test_hash_feature_is_the_original_byte_hash() -> None:
    text = "é" + "ab" * 100
    raw = text.encode()[:128]
    slots = np.zeros(32)
    for k, b in enumerate(raw):
        slots[k % 32] += b / 255
    assert np.allclose(hash_task_feature(text), slots / np.linalg.norm(slots), atol=1e-7)
    assert not hash_task_feature("").any()


def test_observations_and_state_layout() -> None:
    f = Features()
    adj, _ = actions_to_graph((1, 0, 0))  # 0->1, 0->2
    task = hash_task_feature("task")
    obs = observations(
        f, task, adj, np.array([True, False, True]), np.array([0, 5000, 20000]), after_round=True
    )
    assert obs.shape == (3, 51) and obs.dtype == np.float32
    assert np.array_equal(obs[:, :32], np.tile(task, (3, 1)))
    assert np.array_equal(obs[:, 32:48].argmax(1), [0, 1, 2]) and obs[:, 32:48].sum() == 3
    assert obs[:, 48].tolist() == [1, 0, 1]
    assert np.allclose(obs[:, 49], [2 / 3, 1 / 3, 1 / 3])
    assert np.allclose(obs[:, 50], [0, 0.5, 1.0])  # cumulative tokens / 10k, clipped
    s = global_state(f, obs, adj)
    assert s.shape == (156,) and np.allclose(s[-3:], [2 / 6, 2 / 9, 3 / 16])
    legacy = Features(legacy=True)
    lobs = observations(legacy, task, adj, np.ones(3, bool), np.array([9, 9, 9]), after_round=True)
    assert np.allclose(lobs[:, 49], [3 / 3, 2 / 3, 2 / 3]) and not lobs[:, 50].any()
    assert np.allclose(global_state(legacy, lobs, adj)[-3:], [2, 2 / 9, 3])


# ---------------------------------------------------------------------------------------------------- the loop


def forced_params(action: int, config: QMixConfig | None = None) -> QMixParams:
    """Random weights whose Q-head always prefers ``action`` (zero last layer, one-hot bias)."""
    p = QMixParams.random(config or QMixConfig(), seed=3)
    tensors = dict(p.tensors)
    tensors["agent.head.2.weight"] = np.zeros_like(tensors["agent.head.2.weight"])
    bias = np.zeros(p.config.n_actions, np.float32)
    bias[action] = 1.0
    tensors["agent.head.2.bias"] = bias
    return QMixParams.from_tensors(p.config, tensors, {"features": Features().to_json()})


class ScriptedPolicy(QMixPolicy):
    """Plays given joint actions per round (the loop's mechanics without a trained policy)."""

    def __init__(self, joint_per_round: list[tuple[int, ...]]) -> None:
        super().__init__(QMixParams.random(QMixConfig(), seed=0))
        self.joint = joint_per_round
        self.calls = 0

    def act(self, obs, adj, hidden, *, epsilon, rng, backend=None):
        q, hidden = ops.qmix_forward(self.params, obs, adj, hidden, backend=backend)
        joint = np.asarray(self.joint[min(self.calls, len(self.joint) - 1)])
        self.calls += 1
        return joint, np.asarray(q), np.asarray(hidden), np.zeros(len(joint), bool)


def reply(request) -> str:
    if request.tags.agent == "FinalRefer":
        return HE0_SOLUTION
    return f"<{request.tags.agent} r{request.tags.round}>"


async def run_episode(method: QMix, task: Task, engine: ScriptedEngine, out: Path | None = None):
    """Runs one episode; returns its output and its round records as written to the trace (JSON)."""
    records: list[dict] = []
    result: dict = {}

    async def fn(ctx):
        result["out"] = await method.episode(ctx, task, lambda r: records.append(r.to_json()))
        return {}

    await Runtime(engine, concurrency=1, out_dir=out, progress=False).run([("ep", fn)])
    return result["out"], records


he = _humaneval.tasks_fixture(3)


def user_text(request) -> str:
    return request.messages[-1].content


def test_episode_delivers_this_rounds_outputs_in_waves(he) -> None:
    engine = ScriptedEngine(reply)
    policy = ScriptedPolicy([(3, 3, 3), (1, 0, 0)])
    out, records = asyncio.run(run_episode(QMix(policy, QMixSettings(rounds=2)), he[0], engine))
    # round 0: all aggregate -> waves [2], [1], [0]; round 1: 0 broadcasts -> [0], [1, 2]; then FinalRefer
    sizes = [len(b) for b in engine.batches]
    assert sizes == [1, 1, 1, 1, 2, 1]
    agents = [[r.tags.agent for r in b] for b in engine.batches]
    assert agents[:3] == [["AnalyzeAgent_2"], ["CodeWriter_1"], ["CodeWriter_0"]]
    first_0 = user_text(engine.batches[2][0])
    assert "<AnalyzeAgent_2 r0>" in first_0 and "<CodeWriter_1 r0>" in first_0
    assert "<AnalyzeAgent_2 r0>" in user_text(engine.batches[1][0])
    assert "<CodeWriter_1 r0>" not in user_text(engine.batches[0][0])
    # round 1: each agent sees its own previous output; 1 and 2 read 0's output of this round
    r1 = {r.tags.agent: user_text(r) for b in engine.batches[3:5] for r in b}
    assert "<CodeWriter_0 r0>" in r1["CodeWriter_0"] and "<CodeWriter_0 r1>" in r1["CodeWriter_1"]
    assert "<CodeWriter_0 r1>" in r1["AnalyzeAgent_2"] and "<AnalyzeAgent_2 r0>" in r1["AnalyzeAgent_2"]
    assert "<CodeWriter_1 r0>" not in r1["AnalyzeAgent_2"]
    final = user_text(engine.batches[5][0])
    assert all(f"<{a} r1>" in final for a in ("CodeWriter_0", "CodeWriter_1", "AnalyzeAgent_2"))
    assert out.rounds == 2 and "def has_close_elements" in out.answer
    assert [len(r["waves"]) for r in records] == [3, 2]
    assert records[0]["actions"] == dict.fromkeys(
        ["CodeWriter_0", "CodeWriter_1", "AnalyzeAgent_2"], ACTIONS[3]
    )
    assert records[0]["levels"] == [2, 1, 0] and records[0]["inbox"]["CodeWriter_0"] == [
        "CodeWriter_1",
        "AnalyzeAgent_2",
    ]
    assert "final" in records[1] and "final" not in records[0]
    assert records[1]["usage"]["agents"]["FinalRefer"]["completion_tokens"] > 0
    steps = out.extra["qmix"]["steps"]
    assert [s["actions"] for s in steps] == [[3, 3, 3], [1, 0, 0]]
    assert steps[0]["adj"] == np.eye(3, dtype=int).tolist()  # A0 = I
    assert steps[1]["adj"] == actions_to_graph((3, 3, 3))[0].astype(int).tolist()


def test_debate_pair_lower_index_first(he) -> None:
    engine = ScriptedEngine(reply)
    policy = ScriptedPolicy([(5, 5, 5)])
    _, records = asyncio.run(run_episode(QMix(policy, QMixSettings(rounds=1)), he[0], engine))
    assert records[0]["removed"] == [
        {"src": "CodeWriter_1", "dst": "CodeWriter_0"},
        {"src": "AnalyzeAgent_2", "dst": "CodeWriter_1"},
    ]
    assert "<CodeWriter_0 r0>" in user_text(engine.batches[1][0])


def test_legacy_repo_exec_flag_reproduces_the_missing_messages(he) -> None:
    engine = ScriptedEngine(reply)
    policy = ScriptedPolicy([(3, 3, 3)])
    settings = QMixSettings(rounds=2, legacy_repo_exec=True, reselect_each_round=False)
    _, records = asyncio.run(run_episode(QMix(policy, settings), he[0], engine))
    assert [[r.tags.agent for r in b] for b in engine.batches] == [
        ["AnalyzeAgent_2"],
        ["AnalyzeAgent_2"],
        ["FinalRefer"],
    ]
    assert "r0>" not in user_text(engine.batches[0][0])
    assert policy.calls == 1  # select once
    assert records[0]["skipped"] == ["CodeWriter_0", "CodeWriter_1"]


def test_forced_policy_through_the_compiled_forward(he) -> None:
    engine = ScriptedEngine(reply)
    policy = QMixPolicy(forced_params(1))
    out, records = asyncio.run(run_episode(QMix(policy, QMixSettings(rounds=2)), he[1], engine))
    assert [s["actions"] for s in out.extra["qmix"]["steps"]] == [[1, 1, 1], [1, 1, 1]]
    assert records[0]["q"]["CodeWriter_0"] == [0.0, 1.0, 0.0, 0.0, 0.0, 0.0]


def test_epsilon_one_explores_every_agent(he) -> None:
    engine = ScriptedEngine(reply)
    policy = QMixPolicy(forced_params(1))
    out, records = asyncio.run(run_episode(QMix(policy, QMixSettings(rounds=2, epsilon=1.0)), he[1], engine))
    assert records[0]["explored"] == ["CodeWriter_0", "CodeWriter_1", "AnalyzeAgent_2"]
    assert {a for s in out.extra["qmix"]["steps"] for a in s["actions"]} != {1}


def test_policy_and_method_errors(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="obs_dim"):
        QMixPolicy(QMixParams.random(QMixConfig(obs_dim=40)))
    with pytest.raises(InvalidArgumentError, match="adversarial_agent_index"):
        QMix(QMixPolicy(forced_params(0)), QMixSettings(adversarial_agent_index=3))
    with pytest.raises(InvalidArgumentError, match="checkpoint"):
        make_method("qmix")
    with pytest.raises(InvalidArgumentError, match="does not exist"):
        make_method("qmix", checkpoint=tmp_path / "none.safetensors")
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"\x10\x00\x00\x00\x00\x00\x00\x00{not json}      ")
    with pytest.raises(InvalidArgumentError, match="not a valid safetensors file"):
        QMixParams.load(bad)
    QMixParams.random().save(tmp_path / "p.safetensors")
    raw = (tmp_path / "p.safetensors").read_bytes()
    (tmp_path / "cut.safetensors").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(InvalidArgumentError, match="cut.safetensors"):
        QMixParams.load(tmp_path / "cut.safetensors")


# ------------------------------------------------------------------------------------- reasoning and choice


def thinking_reply(final: str):
    """Workers reply with a reasoning block before their message; FinalRefer replies ``final``."""

    def fn(request) -> str:
        if request.tags.agent == "FinalRefer":
            return final
        return f"<think>secret of {request.tags.agent}</think>\n<{request.tags.agent} r{request.tags.round}>"

    return fn


def test_reasoning_is_not_forwarded_nor_read_for_the_answer() -> None:
    task = Task(id="m", kind="math", prompt="What is 2 + 3?", answer="5")
    # the reasoning holds a boxed answer that would win over the reply's "The answer is 5"
    engine = ScriptedEngine(thinking_reply("<think>maybe \\boxed{7}</think>\nThe answer is 5"))
    policy = ScriptedPolicy([(1, 1, 1)])  # broadcast: 1 reads 0, 2 reads 0 and 1; round 1 reads round 0
    out, records = asyncio.run(run_episode(QMix(policy, QMixSettings(rounds=2)), task, engine))
    texts = [user_text(r) for b in engine.batches for r in b]
    assert len(texts) == 7
    assert "<MathSolver_0 r0>" in texts[1] and "<MathSolver_0 r0>" in texts[3]  # forwarded, then remembered
    assert all("secret" not in t and "<think>" not in t for t in texts)
    assert out.answer == "5"
    assert records[0]["messages"]["MathSolver_0"]["public"] == "<MathSolver_0 r0>"


def choice_task() -> Task:
    return Task(
        id="mc/1",
        kind="choice",
        prompt="Which planet is the largest?",
        answer="C",
        choices=("Mars", "Venus", "Jupiter", "Earth"),
    )


def test_choice_task_uses_the_reasoning_team(tmp_path: Path) -> None:
    from toporoute.methods.harness import run_method

    task = choice_task()
    engine = ScriptedEngine(thinking_reply("<think>Answer: A, or is it?</think>\nC"))
    method = QMix(QMixPolicy(forced_params(1)))
    out, records = asyncio.run(run_episode(method, task, engine))
    requests = [r for b in engine.batches for r in b]
    assert [r.tags.agent for r in requests] == [
        "ReasoningAgent_0",
        "ReasoningAgent_1",
        "AnalyzeAgent_2",
    ] * 2 + ["FinalRefer"]  # choice tasks take 2 rounds
    assert [r.tags.role for r in requests[:3]] == ["Reasoning Expert", "Reasoning Expert", "Analyzer"]
    for r in requests:
        assert (
            "Which planet is the largest?\n\nOptions:\nA. Mars\nB. Venus\nC. Jupiter\nD. Earth"
            in user_text(r)
        )
    workers, final = requests[:-1], requests[-1]
    assert all("letter of the option you choose" in r.messages[0].content for r in workers)
    assert "multiple-choice" in final.messages[0].content and "one letter" in final.messages[0].content
    assert out.rounds == 2 and out.answer == "C"
    assert records[-1]["final"]["answer"] == "C"
    # through the harness: scored by the chosen letter
    summary = asyncio.run(run_method(method, [task], engine, tmp_path / "qmix", progress=False))
    assert summary["episodes"] == 1 and summary["passed"] == 1
