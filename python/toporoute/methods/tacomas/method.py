"""The TacoMAS episode loop (spec §3 with the resolutions A2, A7, A8, A9 of §8): a fast capability loop every
round and a slow topology loop every K rounds, over one query's team.

One round t (one trace record):

1. **Agents, wave by wave** (``ops.team_schedule``: strongly connected components in topological order, a
   component's wave = its longest path from a source component). All the agents of a wave go out in one
   ``generate`` call (the runtime batches it with the other episodes'). An agent reads the task, its memory
   and its in-neighbours' messages: this round's on an edge between waves, the previous round's on an edge
   inside a cycle (``lagged``; a bidirectional pair is a 2-cycle), each clipped to ``message_chars``.
2. **Contribution judge** for every agent, in one call batch (JSON ``{"score", "reason"}`` under a schema, plus a
   regular expression for engines that only constrain regexes); the verifier's call for s_t goes in the same
   batch. A malformed verdict gives no score for the round (or a clamped one), recorded.
3. **s_t** from the answer scorer (:mod:`.scorer`) on the sink's ``Final Answer:``; the run stops when
   s_t >= τ (A8).
4. **Coach** every ``coach_every`` rounds (0: only in the rounds that end with a slow step, A9), one call per
   agent in one batch; its errors and plan go into the agent's memory. Not in a round that ends the run (its
   plan would never be read).
5. **Slow step** when due, ``(t + 1) % K == 0`` or one round after a ``slow_again`` (A7), and s_t < τ: one
   meta call (JSON under the §5.3 schema; one re-prompt with the error when the reply holds no JSON object and
   the engine's structured layer did not already re-prompt; then a recorded error and no edits). Its
   operations are encoded as ``ops.team_project`` rows (:func:`.parsing.encode_plan`), projected and applied;
   its agent feedback goes into prompts and memories; ``time_control`` continues, asks for the next slow step
   after one round, or stops.

The statistics of the judged contributions (π, mean, variance, death candidates) come from ``ops.team_scores``
and the slow step's distance from ``ops.topology_distance``. Every malformed output is recorded in the round's
``tacomas.errors`` and gives its fallback; the run goes on.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ... import ops
from ...llm.types import Message as ChatMessage
from ...llm.types import Request, Result
from ...tasks import Task
from ...trace.schema import EdgeUsage, Graph, Message, clip
from ..episode import (
    Clock,
    Emit,
    EpisodeOutput,
    KindEpisode,
    SettingsMethod,
    domain_of,
)
from ..prompt_files import fill
from ..waves import Call, CallLog, run_waves
from . import parsing, steps
from .scorer import AnswerScore, programmatic_score, uses_verifier, verifier_score
from .settings import TacoMASSettings
from .team import Team

if TYPE_CHECKING:
    from ...runtime import EpisodeContext

__all__ = ["KINDS", "ROLE_KINDS", "TacoMAS"]

KINDS = ("code", "math", "choice")
"""The task kinds TacoMAS solves."""

ROLE_KINDS = ("agent", "judge", "coach", "meta", "verifier")
SCORER_KEY = "scorer:verifier"
"""The usage key of the answer scorer's verifier call (agents' calls are keyed by their ids)."""
"""The kinds of LLM call, as ``calls`` counts them per round (spec A14)."""

_JUDGE_CHARS = 800  # an agent output as the judge and the coach see it (the published runtime's limit)


class TacoMAS(SettingsMethod[TacoMASSettings]):
    """TacoMAS for the harness (``toporoute run tacomas``), named ``name`` in the run folder.

    Episodes are independent (a fresh team and cleared memory per task, spec App. B), so they run
    concurrently and their calls batch together through the runtime. A resumed run skips the finished episodes.
    """

    def __init__(self, settings: TacoMASSettings | None = None, *, name: str = "tacomas") -> None:
        super().__init__(name, settings or TacoMASSettings())

    async def episode(self, ctx: EpisodeContext, task: Task, emit: Emit) -> EpisodeOutput:
        """Runs up to R rounds on one task; ``emit`` gets one record per round."""
        domain_of(task, KINDS)
        return await _Episode(self.name, self.settings, ctx, task, emit).run()


@dataclass
class _RoundOut:
    answer: str
    score: AnswerScore
    time_control: str | None
    slow_taken: bool


def _num(x: float) -> float | None:
    return None if not math.isfinite(float(x)) else round(float(x), 4)


class _Episode(KindEpisode[TacoMASSettings]):
    """One task's rounds over a fresh team."""

    def __init__(
        self, method: str, settings: TacoMASSettings, ctx: EpisodeContext, task: Task, emit: Emit
    ) -> None:
        super().__init__(method, settings, ctx, task, emit)
        self.team = Team(settings.capacity, task.kind)
        self.prev: dict[str, tuple[str, int]] = {}  # agent id -> (last round's output, its completion tokens)
        self.log: dict[str, dict[int, dict[str, Any]]] = {}  # agent id -> round -> output, score, reason
        self.round_scores: list[dict[str, Any]] = []
        self.task_text = task.prompt.strip()
        verifier, note = uses_verifier(settings.scorer, task)
        self.verifier, self.verifier_note = verifier, note

    # ------------------------------------------------------------------------------------------ episode

    async def run(self) -> EpisodeOutput:
        s = self.s
        clock = Clock()
        answers: list[tuple[int, str, float | None]] = []
        slow_again_at: int | None = None
        slow_steps = 0
        stopped = "rounds"
        rounds = 0
        for t in range(s.rounds):
            rounds = t + 1
            if slow_again_at == t:
                why: str | None = "slow_again"
            elif (t + 1) % s.k == 0:
                why = "cadence"
            else:
                why = None
            out = await self.round(t, clock, why)
            answers.append((t, out.answer, out.score.score))
            slow_steps += out.slow_taken
            if out.score.score is not None and out.score.score >= s.tau:
                stopped = "tau"
                break
            if out.time_control == "stop":
                stopped = "meta_stop"
                break
            slow_again_at = t + 1 if out.time_control == "slow_again" else None
        chosen = answers[-1]
        if s.final == "best":
            scored = [a for a in answers if a[2] is not None and a[1]]
            if scored:  # the highest answer score, ties to the latest round
                chosen = max(scored, key=lambda a: (a[2] or 0.0, a[0]))
        answer, final = chosen[1], "best_scored" if s.final == "best" else "sink_last"
        return EpisodeOutput(
            answer,
            rounds,
            stopped != "rounds",
            clock.llm_s,
            clock.routing_s,
            extra={
                "tacomas": {
                    "scorer": s.scorer,
                    "oracle": s.scorer == "oracle",
                    "slow_steps": slow_steps,
                    "stopped": stopped,
                    "final": final,
                    "rounds": rounds,
                    "final_round": chosen[0],
                    "final_team": self.team.team_json(),
                }
            },
        )

    # ------------------------------------------------------------------------------------------ round

    async def round(self, t: int, clock: Clock, why: str | None) -> _RoundOut:
        s, team = self.s, self.team
        rc = clock.round()
        calls = CallLog(failures=("agent",))  # the structured calls' parsers record their own failures
        with rc.routing():
            sched = ops.team_schedule(team.adj[None], team.alive[None])
        level, lagged = sched.level[0], sched.lagged[0]
        order = [int(v) for v in sched.order[0] if v >= 0]
        waves = [[v for v in order if level[v] == lv] for lv in range(int(sched.n_levels[0]))]
        slots = team.slots()
        names = {v: team.name(v) for v in slots}
        start_team = team.team_json()
        start_edges = team.edges()

        # ---- agents, wave by wave
        outputs: dict[int, str] = {}
        tokens: dict[int, int] = {}
        inputs: dict[int, str] = {}
        edge_usage: list[EdgeUsage] = []

        def request(v: int) -> Request:
            parts = []
            for u in team.in_neighbours(v):
                if lagged[u, v]:
                    text, n_tok = self.prev.get(names[u], ("", 0))
                    when = "previous round"
                else:
                    text, n_tok = outputs.get(u, ""), tokens.get(u, 0)
                    when = "this round"
                if text.strip():
                    parts.append(f"[{names[u]}, {when}]\n{clip(text.strip(), s.message_chars)}")
                    edge_usage.append(EdgeUsage(names[u], names[v], n_tok))
            inputs[v] = "\n\n".join(parts) or "(none yet)"
            return self._agent_request(t, v, inputs[v])

        def deliver(v: int, r: Result) -> None:
            outputs[v] = r.text if r.ok else ""
            tokens[v] = r.usage.completion_tokens if r.ok else 0

        async def generate(keyed: Sequence[tuple[int, Request]]) -> list[Result]:
            return await self._generate(rc, calls, [(names[v], "agent", r) for v, r in keyed])

        await run_waves(waves, request, generate, deliver)

        # ---- the sink's answer
        answer, answer_error = steps.sink_answer(self.task, outputs, order, team.sink)
        if answer_error is not None:
            calls.error(names[team.sink], "answer", answer_error)

        # ---- judge (and the verifier), one batch
        keyed = [(f"judge:{names[v]}", "judge", self._judge_request(t, v, outputs[v])) for v in slots]
        if self.verifier:
            # keyed apart from the template's "verifier" agent, whose own call is keyed by its id
            keyed.append((SCORER_KEY, "verifier", self._verifier_request(t, answer, outputs[team.sink])))
        results = await self._generate(rc, calls, keyed)
        verdicts: dict[int, parsing.Verdict] = {}
        for v, r in zip(slots, results):
            verdict = parsing.parse_verdict(*parsing.json_of(r))
            if verdict.error is not None:
                fallback = "no score this round" if verdict.score is None else "clamped"
                calls.error(names[v], "judge", f"{verdict.error} ({fallback})")
            verdicts[v] = verdict
            if verdict.score is not None:
                team.agents[v].scores[t] = verdict.score
        if self.verifier:
            score = verifier_score(results[-1], self.verifier_note)
        else:
            score = await programmatic_score(
                s.scorer, self.task, answer, timeout_s=s.test_timeout_s, memory_mb=s.test_memory_mb
            )
        if score.error is not None:
            calls.error(SCORER_KEY, "answer_score", f"{score.error} (no s_t this round)")

        # ---- score statistics
        with rc.routing():
            hist, present = team.score_history(t + 1)
            stats = ops.team_scores(
                hist[None], present[None], eta=s.eta, window=s.window, death_threshold=s.death_threshold
            )
        last_present = present[t]
        pi = {names[v]: round(float(stats.pi[0, v]), 4) for v in slots if last_present[v]}
        death = [names[v] for v in slots if bool(stats.death[0, v])]
        trend = {names[v]: round(float(stats.trend[0, v]), 4) for v in slots if last_present[v]}
        mean, var = _num(stats.mean[0, t]), _num(stats.var[0, t])
        for v in slots:
            self.log.setdefault(names[v], {})[t] = {
                "output": outputs[v],
                "score": verdicts[v].score,
                "reason": verdicts[v].reason,
            }
        self.round_scores.append({"round": t, "mean": mean, "answer_score": score.score})

        # ---- coach
        reached = score.score is not None and score.score >= s.tau
        ends = reached or t == s.rounds - 1
        slow = why is not None and not reached
        coach_due = (s.coach_every > 0 and (t + 1) % s.coach_every == 0) or (s.coach_every == 0 and slow)
        coaching: dict[str, dict[str, Any]] = {}
        if coach_due and not ends:
            coaching = await self._coach(t, slots, outputs, verdicts, rc, calls)

        # ---- slow step
        slow_block: dict[str, Any] | None = None
        time_control: str | None = None
        if slow:
            assert why is not None
            slow_block = await self._slow(t, why, pi, trend, death, rc, calls)
            time_control = slow_block["time_control"]

        for v in slots:
            self.prev[names[v]] = (outputs[v], tokens[v])
        self._record(
            t,
            rc,
            calls,
            slots,
            names,
            start_team,
            start_edges,
            sched,
            waves,
            outputs,
            inputs,
            edge_usage,
            answer,
            answer_error,
            verdicts,
            score,
            coaching,
            pi,
            trend,
            mean,
            var,
            death,
            slow_block,
        )
        return _RoundOut(answer, score, time_control, slow_block is not None)

    # ------------------------------------------------------------------------------------------ requests

    async def _generate(
        self, rc: Clock, calls: CallLog, keyed: Sequence[tuple[str, str, Request]]
    ) -> list[Result]:
        """One LLM batch; each call logged under its key and kind (the key names the agent it concerns)."""
        return await calls.generate(self.ctx, rc, [(Call(key, key, kind), r) for key, kind, r in keyed])

    def _agent_request(self, t: int, v: int, incoming: str) -> Request:
        team, s = self.team, self.s
        a = team.agents[v]
        deltas = "".join(f"\nAdditional instruction: {d}" for d in a.prompt_deltas)
        system = fill(
            "tacomas", "agent_system.txt", role=a.role, goal=a.goal, constraint=a.constraint, deltas=deltas
        )
        if v == team.sink:
            duty = fill("tacomas", f"duty_sink_{self.task.kind}.txt", entry_point=self.task.entry_point or "")
        else:
            duty = fill("tacomas", "duty_worker.txt")
        memory = "\n".join(f"- {m}" for m in a.memory) or "(empty)"
        user = fill(
            "tacomas",
            "agent_user.txt",
            task=self.task_text,
            round=t + 1,
            rounds=s.rounds,
            incoming=incoming,
            memory=memory,
            duty=duty,
        )
        return self.request("agent", t, a.id, system, user)

    def _about(self, name: str, v: int, output: str, **values: object) -> str:
        """The prompt file ``name`` on agent ``v``'s output (the judge's, the coach's): the task, the agent's id,
        role and goal, its output as the judge sees it, and ``values``."""
        a = self.team.agents[v]
        output = clip(output.strip(), _JUDGE_CHARS) or "(no output)"
        return fill(
            "tacomas",
            name,
            task=self.task_text,
            agent=a.id,
            role=a.role,
            goal=a.goal,
            output=output,
            **values,
        )

    def _judge_request(self, t: int, v: int, output: str) -> Request:
        user = self._about("judge.txt", v, output)
        who = self.team.agents[v].id
        return self.request(
            "judge", t, who, None, user, schema=parsing.JUDGE_SCHEMA, regex=parsing.JUDGE_REGEX
        )

    def _verifier_request(self, t: int, answer: str, reply: str) -> Request:
        shown = answer or parsing.final_answer_text(reply) or reply
        user = fill(
            "tacomas", "verifier.txt", task=self.task_text, answer=clip(shown.strip(), 4000) or "(no answer)"
        )
        return self.request(
            "verifier", t, "verifier", None, user, schema=parsing.JUDGE_SCHEMA, regex=parsing.JUDGE_REGEX
        )

    # ------------------------------------------------------------------------------------------ answer

    # ------------------------------------------------------------------------------------------ coach

    async def _coach(
        self,
        t: int,
        slots: list[int],
        outputs: dict[int, str],
        verdicts: dict[int, parsing.Verdict],
        rc: Clock,
        calls: CallLog,
    ) -> dict[str, dict[str, Any]]:
        team = self.team
        keyed = []
        for v in slots:
            a, verdict = team.agents[v], verdicts[v]
            user = self._about(
                "coach.txt",
                v,
                outputs[v],
                score="unscored" if verdict.score is None else f"{verdict.score:.2f}",
                reason=verdict.reason or verdict.error or "no reason",
            )
            keyed.append(
                (
                    f"coach:{a.id}",
                    "coach",
                    self.request("coach", t, a.id, None, user, schema=parsing.COACH_SCHEMA),
                )
            )
        results = await self._generate(rc, calls, keyed)
        out: dict[str, dict[str, Any]] = {}
        for v, r in zip(slots, results):
            a = team.agents[v]
            c = parsing.parse_coaching(*parsing.json_of(r))
            if c.error is not None:
                calls.error(a.id, "coach", f"{c.error} (no memory update)")
            else:
                note = f"Round {t + 1} coaching. Errors: {c.errors or 'none named'}. Plan: {c.plan}"
                team.remember(v, note, self.s.memory_items)
            out[a.id] = c.to_json()
        return out

    # ------------------------------------------------------------------------------------------ slow step

    async def _slow(
        self,
        t: int,
        why: str,
        pi: dict[str, float],
        trend: dict[str, float],
        death: list[str],
        rc: Clock,
        calls: CallLog,
    ) -> dict[str, Any]:
        s, team = self.s, self.team
        graph = team.graph_json(pi)
        graph["score_trend"] = trend
        graph["death_candidates"] = death
        system = fill(
            "tacomas",
            "meta_system.txt",
            death=s.death_threshold,
            pairs=s.budget_pairs,
            edges=s.budget_edges,
            sink=team.sink_agent.id,
            max=s.max_agents,
        )
        user = fill(
            "tacomas",
            "meta_user.txt",
            task=self.task_text,
            graph=json.dumps(graph, ensure_ascii=False),
            ids=", ".join(team.ids()),
            summaries=steps.summaries(self.team, self.log, t, s.k),
            scores=json.dumps(self.round_scores[-max(s.k, 3) :]),
        )
        request = self.request(
            "meta",
            t,
            "meta",
            system,
            user,
            schema=parsing.meta_schema(s.budget_pairs, s.budget_edges, team.ids()),
        )
        (r,) = await self._generate(rc, calls, [("meta", "meta", request)])
        raw = r.text
        value, why_bad = _meta_json(r)
        if why_bad is not None and r.ok:
            # an engine that validates schemas never returns an invalid reply as ok: this one did not, so one
            # re-prompt with the error (after the structured layer's own re-prompts the call is not ok)
            retry = Request(
                request.messages
                + (
                    ChatMessage("assistant", r.text.strip()[:2000]),
                    ChatMessage("user", fill("tacomas", "meta_reprompt.txt", error=why_bad)),
                ),
                request.sampling,
                request.schema,
                request.tags,
            )
            (r,) = await self._generate(rc, calls, [("meta:reprompt", "meta", retry)])
            raw = r.text
            value, why_bad = _meta_json(r)
        plan = parsing.parse_meta(value, why_bad)
        if plan.error is not None:
            calls.error("meta", "meta", f"{plan.error} (no edits)")
        for note in plan.notes:
            calls.error("meta", "meta", note)
        block = steps.apply_plan(self.team, plan, s, self.task.kind, t, calls, routing=rc.routing)
        block.update(why=why, meta_raw=clip(raw.strip(), 4000), meta_error=plan.error)
        return block

    # ------------------------------------------------------------------------------------------ record

    def _record(
        self,
        t: int,
        rc: Clock,
        calls: CallLog,
        slots: list[int],
        names: dict[int, str],
        start_team: list[dict[str, Any]],
        start_edges: list[tuple[int, int]],
        sched: Any,
        waves: list[list[int]],
        outputs: dict[int, str],
        inputs: dict[int, str],
        edge_usage: list[EdgeUsage],
        answer: str,
        answer_error: str | None,
        verdicts: dict[int, parsing.Verdict],
        score: AnswerScore,
        coaching: dict[str, dict[str, Any]],
        pi: dict[str, float],
        trend: dict[str, float],
        mean: float | None,
        var: float | None,
        death: list[str],
        slow: dict[str, Any] | None,
    ) -> None:
        index = {v: k for k, v in enumerate(slots)}
        lagged = sched.lagged[0]
        kinds = ["lagged" if lagged[a, b] else "same_round" for a, b in start_edges]
        sink = self.team.sink
        graph = Graph.build(
            [names[v] for v in slots],
            [next(m["role"] for m in start_team if m["slot"] == v) for v in slots],
            [(index[a], index[b]) for a, b in start_edges],
            order=[index[v] for wave in waves for v in wave],
            levels=[int(sched.level[0, v]) for v in slots],
            is_dag=not bool(sched.cyclic[0]),
            inbox={index[b]: [index[a] for a, b2 in start_edges if b2 == b] for b in slots},
            kinds=kinds,
        )
        call_errors = calls.errors_by_key()
        messages = {
            names[v]: Message.of(
                outputs.get(v, ""),
                inputs.get(v, ""),
                answer if v == sink else None,
                call_errors.get(names[v]) or (answer_error if v == sink else None),
            )
            for v in slots
        }
        usage = calls.usage(self.ctx, t, edge_usage)
        block = {
            "team": start_team,
            "edges": [
                {"src": names[a], "dst": names[b], "lagged": bool(lagged[a, b])} for a, b in start_edges
            ],
            "waves": [[names[v] for v in wave] for wave in waves],
            "scores": {names[v]: verdicts[v].to_json() for v in slots},
            "coaching": coaching,
            "pi": pi,
            "trend": trend,
            "mean": mean,
            "var": var,
            "death_candidates": death,
            "answer": clip(answer, 4000),
            "answer_score": score.score,
            "scorer": score.scorer,
            "scorer_detail": score.detail,
            "slow": slow,
            "calls": calls.by_kind(ROLE_KINDS),
            "errors": calls.errors,
        }
        self.emit(self.record(t, graph, messages, usage, rc.timing(), {"tacomas": block}))


def _meta_json(result: Result) -> tuple[Any, str | None]:
    """The meta output's JSON object, or (None, why): the call failed, or its reply holds no JSON object."""
    value, why = parsing.json_of(result)
    if why is None and not isinstance(value, dict):
        return None, f"expected a JSON object; got {type(value).__name__}"
    return value, why
