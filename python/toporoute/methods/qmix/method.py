"""The Agent Q-Mix episode loop (spec §2, §5 "Inference", §7), as the paper describes it rather than as the
original code runs it (spec §10; each original behaviour stays reachable through a flag).

One round t: build the observations over the previous round's graph (round 0: the identity, ``initial_adj``),
advance the policy (``ops.qmix_forward`` in the compiled core: GNN, GRU memory, Q-head), take each agent's
greedy (or epsilon-greedy) action, map the joint action to the round graph (phi), and run the agents in
waves of ``ops.toposort`` levels after the debate tie-break: every agent of a wave is called at once, and
each reads its in-neighbours' outputs of this round and its own output of the previous round. After T rounds
the FinalRefer node writes the answer from every agent's latest output.

Replies are forwarded, remembered and read for the answer without their reasoning (``<think>`` blocks, see
:func:`~toporoute.llm.structured.strip_reasoning`). Code, math and multiple-choice tasks (``kind == "choice"``,
the reasoning team; the agents see the question with its lettered options) are solved.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import ops
from ...errors import InvalidArgumentError
from ...llm.structured import strip_reasoning
from ...llm.types import Request, Result, Tags
from ...tasks import Task, choice_prompt
from ...trace.schema import CallUsage, EdgeUsage, Graph, Message, RoundRecord, Stats, Usage, clip
from ...types.qmix_params import QMixParams
from ..episode import (
    Clock,
    Emit,
    EpisodeOutput,
    call_error,
    domain_of,
    first_answer,
    record_edges,
    request_seed,
)
from ..harness import exclude_trained
from ..waves import run_waves
from ._features import Features, global_state, observations
from ._graph import ACTIONS, Schedule, actions_to_graph, schedule
from .settings import QMixSettings
from .team import DOMAINS, QMixTeam, final_prompt, load_qmix_team, role_offset_for, worker_prompt

if TYPE_CHECKING:
    from ...embed import Encoder
    from ...runtime import EpisodeContext

__all__ = ["QMix", "QMixPolicy", "QMixStepRecord"]


class QMixPolicy:
    """A Q-Mix policy for acting: weights (compiled forward) plus the feature settings they were trained on.

    Parameters
    ----------
    params : QMixParams
    features : Features, optional
        Default: read from the checkpoint's metadata, else the hash featuriser.
    encoder : Encoder, optional
        Needed when ``features.task_feature == "encoder"`` (default ``Encoder.default()``).
    source : path, optional
        The checkpoint file it was read from (named in errors; :meth:`load` sets it).

    Attributes
    ----------
    train_task_ids : tuple of str or None
        The ids of the tasks the policy was trained on: the checkpoint's ``task_ids`` metadata, else (a
        checkpoint written before it was recorded) the ``task_ids`` of the ``train.json`` beside ``source``,
        else None (unknown).
    train_tasks_from : str or None
        Where ``train_task_ids`` came from: ``"checkpoint"``, the train.json's path, or None.
    """

    def __init__(
        self,
        params: QMixParams,
        features: Features | None = None,
        encoder: Encoder | None = None,
        *,
        source: str | Path | None = None,
    ):
        if features is None:
            meta = params.metadata.get("features")
            features = Features.from_json(meta) if meta else Features()
        self.params = params
        self.features = features
        self._encoder = encoder
        c = params.config
        if features.task_feature == "hash" and c.obs_dim != features.obs_dim():
            raise InvalidArgumentError(
                f"the policy's obs_dim is {c.obs_dim}, but its features ({features}) give {features.obs_dim()}",
                "checkpoint",
            )
        n = c.n_agents
        self.n_agents = n
        self.source = None if source is None else Path(source)
        self.train_task_ids, self.train_tasks_from = _train_task_ids(params, self.source)

    @classmethod
    def load(cls, path: str | Path, encoder: Encoder | None = None) -> QMixPolicy:
        """A policy from a checkpoint written by ``toporoute train qmix``."""
        return cls(QMixParams.load(path), encoder=encoder, source=path)

    def task_vector(self, text: str) -> np.ndarray:
        if self.features.task_feature == "encoder" and self._encoder is None:
            from ...embed import Encoder

            self._encoder = Encoder.default()
        return self.features.task_vector(text, self._encoder)

    def act(
        self,
        obs: np.ndarray,
        adj: np.ndarray,
        hidden: np.ndarray,
        *,
        epsilon: float,
        rng: np.random.Generator,
        backend: str | None = None,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """``(actions (n,) int, q (n, A), new hidden (n, H), explored (n,) bool)`` for one episode's round."""
        q, new_hidden = ops.qmix_forward(self.params, obs, adj, hidden, backend=backend)
        q = np.asarray(q)
        actions = q.argmax(axis=-1)
        explored = rng.random(len(actions)) < epsilon
        if explored.any():
            actions = np.where(explored, rng.integers(0, q.shape[-1], size=len(actions)), actions)
        return actions.astype(np.int64), q, np.asarray(new_hidden), explored


class QMix:
    """The Agent Q-Mix method for the harness (``toporoute run qmix --checkpoint ...``).

    Parameters
    ----------
    policy : QMixPolicy
    settings : QMixSettings, optional
    name : str
        The method's folder in a run directory.
    drop_trained_tasks : bool
        What :meth:`select_tasks` does with tasks the policy was trained on: leave them out (True) or refuse
        the run (False, the default: a score on training tasks is not an evaluation).
    """

    def __init__(
        self,
        policy: QMixPolicy,
        settings: QMixSettings | None = None,
        *,
        name: str = "qmix",
        drop_trained_tasks: bool = False,
    ) -> None:
        self.policy = policy
        self.settings = settings or QMixSettings()
        self.name = name
        self.drop_trained_tasks = drop_trained_tasks
        if self.settings.adversarial_agent_index is not None and not (
            0 <= self.settings.adversarial_agent_index < policy.n_agents
        ):
            raise InvalidArgumentError(
                f"adversarial_agent_index must be in 0..{policy.n_agents - 1}; "
                f"got {self.settings.adversarial_agent_index}",
                "adversarial_agent_index",
            )

    def params(self) -> dict[str, Any]:
        meta = self.policy.params.metadata
        return {
            "method": self.name,
            **asdict(self.settings),
            "features": asdict(self.policy.features),
            "net": asdict(self.policy.params.config),
            "checkpoint": {k: meta[k] for k in ("checkpoint_id", "domains", "episodes") if k in meta},
        }

    def select_tasks(self, tasks: Sequence[Task]) -> tuple[list[Task], dict[str, Any]]:
        """The tasks to evaluate: never one the policy was trained on (``toporoute train qmix`` defaults to
        HumanEval 0-14, ``toporoute run`` to every task from 0).

        Returns
        -------
        (list of Task, dict)
            The tasks to run, and what run.json records as ``task_selection``: where the training task ids
            came from (``trained_on``: ``"checkpoint"``, a train.json path, or None when unknown), how many
            there are, ``on_overlap`` (``"drop"`` / ``"refuse"``), the ``dropped`` ids, and a ``message`` the
            harness logs when tasks were dropped or the training tasks are unknown.

        Raises
        ------
        InvalidArgumentError
            When tasks overlap the training set and ``drop_trained_tasks`` is off: the message names the
            checkpoint and the overlapping ids.
        """
        policy = self.policy
        where = str(policy.source) if policy.source is not None else "the checkpoint"
        if policy.train_task_ids is not None:
            return exclude_trained(
                tasks,
                policy.train_task_ids,
                where=where,
                drop=self.drop_trained_tasks,
                trained_on=policy.train_tasks_from,
            )
        # an older checkpoint away from its training folder: refusing would make it unusable, so run, and say
        # that the overlap could not be checked
        why = (
            "written before checkpoints listed them, and no train.json beside it"
            if policy.source is not None
            else "its params carry no task_ids metadata"
        )
        record: dict[str, Any] = {
            "trained_on": policy.train_tasks_from,
            "trained_tasks": None,
            "on_overlap": "drop" if self.drop_trained_tasks else "refuse",
            "dropped": [],
        }
        record["message"] = (
            f"{where} does not record the tasks it was trained on ({why}): its evaluation may include training "
            "tasks (toporoute train qmix defaults to the first 15 HumanEval tasks; --offset 15 skips them)"
        )
        return list(tasks), record

    async def episode(self, ctx: EpisodeContext, task: Task, emit: Emit) -> EpisodeOutput:
        """Runs one task; ``emit`` gets one trace record per round (the last one also holds FinalRefer)."""
        s, policy = self.settings, self.policy
        domain = domain_of(task, DOMAINS)
        text = _task_text(task)
        n = policy.n_agents
        team = load_qmix_team(
            domain,
            n_agents=n,
            role_offset=role_offset_for(s.seed, ctx.episode),
            adversarial_agent_index=s.adversarial_agent_index,
        )
        names = team.names
        rounds = s.rounds_for(domain)
        rng = np.random.Generator(np.random.Philox(key=request_seed(s.seed, ctx.episode, "explore")))
        clock = Clock()
        with clock.routing():
            task_vec = policy.task_vector(text)
        adj_prev = np.eye(n, dtype=bool) if s.initial_adj == "identity" else np.zeros((n, n), dtype=bool)
        hidden = np.zeros((n, policy.params.config.hidden), dtype=np.float32)
        outputs = [""] * n
        tokens = np.zeros(n, dtype=np.int64)
        steps: list[dict[str, Any]] = []
        actions: np.ndarray | None = None
        record: RoundRecord | None = None

        def observe(adj: np.ndarray, *, after_round: bool) -> np.ndarray:
            """Every agent's observation over ``adj`` with the outputs and token counts so far."""
            has_output = np.array([bool(o) for o in outputs])
            return observations(policy.features, task_vec, adj, has_output, tokens, after_round=after_round)

        for t in range(rounds):
            rc = clock.round()
            explored = np.zeros(n, dtype=bool)
            q = None
            with rc.routing():
                obs = observe(adj_prev, after_round=t > 0)
                if actions is None or s.reselect_each_round:
                    actions, q, hidden, explored = policy.act(
                        obs, adj_prev, hidden, epsilon=s.epsilon, rng=rng, backend=s.backend
                    )
                adj, debates = actions_to_graph(actions)
                sched = schedule(adj, debates, legacy_repo_exec=s.legacy_repo_exec)

            this_round, results = await _run_waves(ctx, rc, s, team, text, t, sched, outputs, tokens)
            edges = record_edges(
                ctx,
                t,
                (
                    EdgeUsage(names[j], names[i], results[j].usage.completion_tokens)
                    for i in range(n)
                    for j in sched.inbound[i]
                    if this_round[j]
                ),
            )
            for i in results:  # agents that did not run keep their previous output (legacy mode)
                if this_round[i]:
                    outputs[i] = this_round[i]
            with rc.routing():
                post_obs = observe(adj, after_round=True)
                state = global_state(policy.features, post_obs, adj)
                stats = ops.graph_stats(adj, prev=adj_prev if t > 0 else None)
            steps.append(
                {
                    "obs": obs.round(6).tolist(),
                    "adj": adj_prev.astype(int).tolist(),
                    "actions": [int(a) for a in actions],
                    "state": state.round(6).tolist(),
                }
            )
            step = QMixStepRecord(actions, q, explored, sched)
            record = RoundRecord(
                method=self.name,
                episode=ctx.episode,
                task=task.id,
                round=t,
                graph=step.graph(team, adj),
                messages={
                    names[i]: Message.of(this_round[i], parse_error=call_error(results.get(i)))
                    for i in range(n)
                },
                usage=Usage.of(((names[i], r) for i, r in sorted(results.items())), edges),
                stats=Stats.of(stats),
                timing=rc.timing(),
                extra=step.to_json(names),
            )
            if t < rounds - 1:
                emit(record)
            adj_prev = adj

        assert record is not None  # rounds >= 1
        f0 = clock.round()
        final = Request.chat(
            team.final_system,
            _final_user(team, text, outputs),
            sampling=s.sampling(ctx.episode, rounds, "FinalRefer"),
            tags=Tags(round=rounds - 1, agent="FinalRefer", role="Decision"),
        )
        final_result = await f0.generate_one(ctx, final)
        final_text = strip_reasoning(final_result.text) if final_result.ok else ""
        answer = first_answer(task, [final_text, *reversed(outputs)])
        extra = dict(record.extra)
        extra["final"] = {
            "text": clip(final_result.text),
            "answer": answer,
            "usage": CallUsage.of(final_result).to_json(),
            "error": call_error(final_result),
        }
        emit(replace(record, usage=record.usage.with_call("FinalRefer", final_result), extra=extra))
        return EpisodeOutput(
            answer,
            rounds,
            False,
            clock.llm_s,
            clock.routing_s,
            extra={"qmix": {"steps": steps, "actions": [st["actions"] for st in steps]}},
        )


@dataclass(frozen=True)
class QMixStepRecord:
    """What a Q-Mix round adds to its trace record: the joint action, its Q-values (None when actions were
    not reselected), the explored agents and the executed schedule."""

    actions: np.ndarray
    q: np.ndarray | None
    explored: np.ndarray
    schedule: Schedule

    def graph(self, team: QMixTeam, adj: np.ndarray) -> Graph:
        """The round graph phi(u) with the schedule's order, waves as levels and undelivered edges removed."""
        sched = self.schedule
        levels = [-1] * len(team.agents)
        for lv, wave in enumerate(sched.waves):
            for i in wave:
                levels[i] = lv
        removed = sorted(set(sched.removed))
        return Graph.build(
            team.names,
            [a.role for a in team.agents],
            [(int(s), int(d)) for s, d in zip(*np.nonzero(adj))],
            order=sched.order,
            levels=levels,
            removed=removed,
            is_dag=not removed,
            inbox=sched.inbound,
        )

    def to_json(self, names: list[str]) -> dict[str, Any]:
        q = self.q
        return {
            "actions": {names[i]: ACTIONS[int(a)] for i, a in enumerate(self.actions)},
            "q": None
            if q is None
            else {names[i]: np.round(q[i].astype(np.float64), 4).tolist() for i in range(len(names))},
            "explored": [names[i] for i in np.flatnonzero(self.explored)],
            "waves": [[names[i] for i in w] for w in self.schedule.waves],
            "skipped": [names[i] for i in self.schedule.skipped],
        }


def _task_text(task: Task) -> str:
    """The task as the agents see it (and the task feature reads): a choice task's question with its lettered
    options, else the prompt."""
    return choice_prompt(task) if task.kind == "choice" else task.prompt


async def _run_waves(
    ctx: EpisodeContext,
    rc: Clock,
    s: QMixSettings,
    team: QMixTeam,
    text: str,
    t: int,
    sched: Schedule,
    outputs: list[str],
    tokens: np.ndarray,
) -> tuple[list[str], dict[int, Result]]:
    """Round ``t``'s agents, wave by wave: each sees the outputs of this round's in-neighbours (earlier waves).
    Returns what each forwarded this round ("" for none) and the replies; ``tokens`` gains their totals."""
    names = team.names
    this_round = [""] * len(names)

    def request(i: int) -> Request:
        return Request.chat(
            team.agents[i].system,
            _worker_user(team, i, text, sched.inbound[i], this_round, outputs[i]),
            sampling=s.sampling(ctx.episode, t, names[i]),
            tags=Tags(round=t, agent=names[i], role=team.agents[i].role),
        )

    def deliver(i: int, r: Result) -> None:
        this_round[i] = strip_reasoning(r.text) if r.ok else ""  # forwarded and kept: no reasoning
        tokens[i] += r.usage.total_tokens

    async def generate(keyed: Sequence[tuple[int, Request]]) -> list[Result]:
        return await rc.generate(ctx, [r for _, r in keyed])

    results = await run_waves(sched.waves, request, generate, deliver)
    return this_round, results


def _worker_user(
    team: QMixTeam, i: int, text: str, inbound: list[int], this_round: list[str], previous: str
) -> str:
    agents = team.agents
    msgs = [(agents[j].name, agents[j].role, this_round[j]) for j in inbound]
    return worker_prompt(team, i, text, msgs, previous or None)


def _final_user(team: QMixTeam, text: str, outputs: list[str]) -> str:
    return final_prompt(team, text, [(a.name, a.role, outputs[i]) for i, a in enumerate(team.agents)])


def _train_task_ids(params: QMixParams, source: Path | None) -> tuple[tuple[str, ...] | None, str | None]:
    """``(ids, where from)`` of the tasks a policy was trained on (see :class:`QMixPolicy`)."""
    raw = params.metadata.get("task_ids")
    if raw is not None:
        try:
            ids = json.loads(raw)
        except ValueError:
            ids = None
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise InvalidArgumentError(
                f"{source or 'the checkpoint'}: metadata task_ids must be a JSON list of task ids; got {raw!r:.80}",
                "checkpoint",
            )
        return tuple(ids), "checkpoint"
    if source is None:
        return None, None
    # every toporoute train qmix writes train.json (with the task ids) beside its policy files
    beside = source.parent / "train.json"
    try:
        ids = json.loads(beside.read_text(encoding="utf-8")).get("task_ids")
    except (OSError, ValueError, AttributeError):
        return None, None
    if isinstance(ids, list) and all(isinstance(i, str) for i in ids):
        return tuple(ids), str(beside)
    return None, None
