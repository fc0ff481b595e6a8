"""The TacoMAS episode loop (spec §3 with the resolutions A2, A7, A8, A9 of §8): a fast capability loop every
round and a slow topology loop every K rounds, over one query's team.

One round t (one trace record):

1. **Agents, wave by wave** (``ops.team_schedule``: strongly connected components in topological order, a
   component's wave = its longest path from a source component). All the agents of a wave go out in one
   ``generate`` call (the runtime batches it with the other episodes'). An agent reads the task, its memory
   and its in-neighbours' messages: this round's on an edge between waves, the previous round's on an edge
   inside a cycle (``lagged``; a bidirectional pair is a 2-cycle), each clipped to ``message_chars``. Replies
   are read without their ``<think>`` reasoning. **Tools** (``tool_calls`` ReAct steps): a reply that holds its
   task kind's tool input (:func:`.steps.tool_input`) has the tool run on it in the sandbox, and the agent sees
   the result and replies again; the tool's run on the reply that becomes the message travels with it and is the
   judge's evidence. Every run is recorded in the round's ``tools``.
2. **Contribution judge** for every agent with its evidence gate (tools used, PASS / FAIL, the tool's result), in
   one call batch (JSON ``{"score", "reason"}`` under a schema, plus a regular expression for engines that only
   constrain regexes); the verifier's call for s_t goes in the same batch. A malformed verdict gives no score for
   the round (or a clamped one), recorded.
3. **s_t** from the answer scorer (:mod:`.scorer`) on the sink's ``Final Answer:``; the run stops when
   s_t >= τ (A8).
4. **Coach** every ``coach_every`` rounds (0: only in the rounds that end with a slow step, A9), one call per
   agent, and each agent's **self-reflection** (the paper's Listing 5; ``reflect``), all in one batch; the coach's
   errors and plan and the reflection go into the agent's memory. Neither in a round that ends the run (nobody
   would read them).
5. **Slow step** when due, ``(t + 1) % K == 0`` or one round after a ``slow_again`` (A7), s_t < τ and not after
   the last round (its edits would never run): one meta call (JSON under the §5.3 schema; one re-prompt with the
   error when the reply holds no JSON object and the engine's structured layer did not already re-prompt; then a
   recorded error and no edits). Its
   operations are encoded as ``ops.team_project`` rows (:func:`.parsing.encode_plan`), projected and applied;
   its agent feedback goes into prompts and memories; ``time_control`` continues, asks for the next slow step
   after one round, or stops.

The statistics of the judged contributions (π, mean, variance, death candidates) come from ``ops.team_scores``
and the slow step's distance from ``ops.topology_distance``. Every malformed output is recorded in the round's
``tacomas.errors`` and gives its fallback; the run goes on.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from ... import ops
from ...llm.structured import strip_reasoning
from ...llm.types import Message as ChatMessage
from ...llm.types import Request, Result
from ...tasks import Task
from ...tasks.codetest import public_examples
from ...tasks.tools import ToolRun, run_tool
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
from .settings import META_KINDS, TacoMASSettings
from .team import Team, kind_tool

if TYPE_CHECKING:
    from ...runtime import EpisodeContext

__all__ = ["KINDS", "ROLE_KINDS", "TacoMAS"]

KINDS = ("code", "math", "choice")
"""The task kinds TacoMAS solves."""

ROLE_KINDS = ("agent", "judge", "coach", "meta", "verifier", "reflect")
"""The kinds of LLM call, as ``calls`` counts them per round (spec A14)."""
SCORER_KEY = "scorer:verifier"
"""The usage key of the answer scorer's verifier call (agents' calls are keyed by their ids)."""

_JUDGE_CHARS = 800  # an agent output as the judge and the coach see it (the published runtime's limit)
_TOOL_CHARS = 800  # a tool's result as the agents downstream, the judge and the agent's reflection see it
_REFLECT_CHARS = 600  # one self-reflection kept in memory


class TacoMAS(SettingsMethod[TacoMASSettings]):
    """TacoMAS for the harness (``toporoute run tacomas``), named ``name`` in the run folder.

    Episodes are independent (a fresh team and cleared memory per task, spec App. B), so they run
    concurrently and their calls batch together through the runtime. A resumed run skips the finished episodes.
    """

    meta_kinds = META_KINDS
    """The call kinds a second engine serves when ``settings.meta_model`` names one (the command line routes
    them; see :class:`~toporoute.llm.routed.RoutedEngine`)."""

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
        self.team = Team(settings.capacity, task.kind, settings.template, tools=settings.tool_calls > 0)
        self.tool = kind_tool(task.kind) if settings.tool_calls > 0 else None
        self.tool_kwargs: dict[str, Any] = {}
        self.prelude = steps.imports_of(task.prompt) if task.kind == "code" else ""
        if task.kind == "code" and task.entry_point:
            self.tool_kwargs = {
                "examples": [[e.source, e.want] for e in public_examples(task)],
                "entry_point": task.entry_point,
            }
        # agent id -> (last round's message, its completion tokens)
        self.prev: dict[str, tuple[str, int]] = {}
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
        calls = CallLog(failures=("agent", "reflect"))  # the structured calls' parsers record theirs
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
        tools: dict[int, list[dict[str, Any]]] = {}  # slot -> its tool runs this round
        evidence: dict[int, ToolRun] = {}  # slot -> the tool's run on the message it sent

        def request(v: int) -> Request:
            parts = []
            for u in team.in_neighbours(v):
                if lagged[u, v]:
                    text, n_tok = self.prev.get(names[u], ("", 0))
                    when = "previous round"
                else:
                    text, n_tok = self._message(u, outputs, evidence), tokens.get(u, 0)
                    when = "this round"
                if text.strip():
                    parts.append(f"[{names[u]}, {when}]\n{clip(text.strip(), s.message_chars)}")
                    edge_usage.append(EdgeUsage(names[u], names[v], n_tok))
            inputs[v] = "\n\n".join(parts) or "(none yet)"
            return self._agent_request(t, v, inputs[v])

        def deliver(v: int, r: Result) -> None:
            # forwarded, judged, remembered and searched for the answer without its reasoning
            outputs[v] = strip_reasoning(r.text) if r.ok else ""
            tokens[v] = r.usage.completion_tokens if r.ok else 0

        async def generate(keyed: Sequence[tuple[int, Request]]) -> list[Result]:
            results = await self._generate(rc, calls, [(names[v], "agent", r) for v, r in keyed])
            return await self._use_tools(t, keyed, results, tools, evidence, rc, calls)

        await run_waves(waves, request, generate, deliver)

        # ---- the sink's answer
        answer, answer_error = steps.sink_answer(self.task, outputs, order, team.sink)
        if answer_error is not None:
            calls.error(names[team.sink], "answer", answer_error)

        # ---- judge (and the verifier), one batch
        keyed = [
            (
                f"judge:{names[v]}",
                "judge",
                self._judge_request(t, v, outputs[v], tools.get(v, []), evidence.get(v)),
            )
            for v in slots
        ]
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

        # ---- coach and self-reflection, one batch (neither in a round that ends the run: nobody reads them);
        # no slow step after the last round either (its edits would never run)
        reached = score.score is not None and score.score >= s.tau
        ends = reached or t == s.rounds - 1
        slow = why is not None and not ends
        coach_due = (s.coach_every > 0 and (t + 1) % s.coach_every == 0) or (s.coach_every == 0 and slow)
        coaching: dict[str, dict[str, Any]] = {}
        reflections: dict[str, str] = {}
        if not ends and (coach_due or s.reflect):
            messages = {v: self._message(v, outputs, evidence) for v in slots}
            coaching, reflections = await self._coach(
                t, slots if coach_due else [], slots if s.reflect else [], messages, verdicts, rc, calls
            )

        # ---- slow step
        slow_block: dict[str, Any] | None = None
        time_control: str | None = None
        if slow:
            assert why is not None
            slow_block = await self._slow(t, why, pi, trend, death, rc, calls)
            time_control = slow_block["time_control"]

        for v in slots:
            self.prev[names[v]] = (self._message(v, outputs, evidence), tokens[v])
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
            reflections,
            tools,
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

    def _system(self, v: int) -> str:
        """Agent ``v``'s system prompt (spec §5.4): its role, goal, constraint, prompt deltas and tools."""
        a = self.team.agents[v]
        deltas = "".join(f"\nAdditional instruction: {d}" for d in a.prompt_deltas)
        tool = self.tool
        specs = (
            f"\nYou have access to the following tools:\n- {tool.spec}"
            if tool is not None and tool.name in a.tools
            else ""
        )
        return fill(
            "tacomas",
            "agent_system.txt",
            role=a.role,
            goal=a.goal,
            constraint=a.constraint,
            deltas=deltas,
            tools=specs,
        )

    def _duty(self, v: int) -> str:
        if v == self.team.sink:
            return fill("tacomas", f"duty_sink_{self.task.kind}.txt", entry_point=self.task.entry_point or "")
        return fill("tacomas", "duty_worker.txt")

    def _agent_request(self, t: int, v: int, incoming: str) -> Request:
        a = self.team.agents[v]
        memory = "\n".join(f"- {m}" for m in a.memory) or "(empty)"
        user = fill(
            "tacomas",
            "agent_user.txt",
            task=self.task_text,
            round=t + 1,
            rounds=self.s.rounds,
            incoming=incoming,
            memory=memory,
            duty=self._duty(v),
        )
        return self.request("agent", t, a.id, self._system(v), user)

    # ------------------------------------------------------------------------------------------ tools

    def _message(self, v: int, outputs: dict[int, str], evidence: dict[int, ToolRun]) -> str:
        """What agent ``v`` sends this round: its reply and, when its tool ran on that reply, the result."""
        text = outputs.get(v, "")
        run = evidence.get(v)
        if run is None or self.tool is None or not text.strip():
            return text
        return f"{text.rstrip()}\n\n[{self.tool.name} on this message] {_tool_text(run)}"

    async def _tool(self, text: str) -> ToolRun:
        assert self.tool is not None
        s = self.s
        return await asyncio.to_thread(
            run_tool,
            self.tool.source,
            text,
            kwargs=self.tool_kwargs,
            timeout_s=s.test_timeout_s,
            memory_mb=s.test_memory_mb,
            retries=0,  # the agent's own code timing out is a verdict, not a crash to retry
            trusted=True,
        )

    async def _use_tools(
        self,
        t: int,
        keyed: Sequence[tuple[int, Request]],
        results: list[Result],
        log: dict[int, list[dict[str, Any]]],
        evidence: dict[int, ToolRun],
        rc: Clock,
        calls: CallLog,
    ) -> list[Result]:
        """A wave's tool steps (a ReAct loop of at most ``tool_calls`` steps): each reply that holds its tool's
        input (:func:`.steps.tool_input`) has the tool run on it in the sandbox; while calls are left the agent
        sees the result and replies again (one batch per step, keyed ``<id>:tool<n>``). The run on the reply that
        becomes the message is its evidence (forwarded with it, shown to the judge). Every run goes into ``log``
        (the round's ``tools`` block); a failed follow-up keeps the reply before it."""
        tool, s, team = self.tool, self.s, self.team
        out = list(results)
        if tool is None:
            return out
        convo = [r for _, r in keyed]
        for step in range(s.tool_calls + 1):
            due = []
            for i, (v, _) in enumerate(keyed):
                text = strip_reasoning(out[i].text) if out[i].ok else ""
                has = tool.name in team.agents[v].tools
                given = steps.tool_input(self.task.kind, text, self.prelude) if has else None
                if given is not None:
                    due.append((i, v, text, given))
            if not due:
                break
            runs = await asyncio.gather(*(self._tool(given) for *_, given in due))
            revise = step < s.tool_calls
            for (_, v, _, _), run in zip(due, runs):
                log.setdefault(v, []).append(_tool_entry(tool.name, len(log.get(v, [])) + 1, revise, run))
                if not run.ok:
                    calls.error(team.name(v), "tool", run.error or "failed")
                evidence[v] = run
            if not revise:
                break
            follow = []
            for (i, v, text, _), run in zip(due, runs):
                evidence.pop(v, None)  # the reply it checked is not the message any more
                note = fill(
                    "tacomas",
                    "tool_result.txt",
                    tool=tool.name,
                    result=run.output if run.ok else f"(the tool failed: {run.error})",
                    duty=self._duty(v),
                )
                convo[i] = replace(
                    convo[i],
                    messages=convo[i].messages + (ChatMessage("assistant", text), ChatMessage("user", note)),
                    sampling=s.call("agent", self.ctx.episode, t, f"{team.name(v)}:tool{step + 1}"),
                )
                follow.append((i, v))
            replies = await self._generate(
                rc, calls, [(f"{team.name(v)}:tool{step + 1}", "agent", convo[i]) for i, v in follow]
            )
            for (i, _), r in zip(follow, replies):
                if r.ok:
                    out[i] = r
        return out

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

    def _judge_request(
        self, t: int, v: int, output: str, runs: Sequence[dict[str, Any]], evidence: ToolRun | None
    ) -> Request:
        """The contribution judge's call (spec §5.7) with its evidence gate: the tools the agent used this
        round, PASS when its tool returned a result on the message it sent, and that result."""
        used = f"{self.tool.name} ({len(runs)} run(s))" if self.tool is not None and runs else "none"
        user = self._about(
            "judge.txt",
            v,
            output,
            tools=used,
            gate="PASS" if evidence is not None and evidence.ok else "FAIL",
            evidence=_tool_text(evidence) if evidence is not None else "(no tool ran on this output)",
        )
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
        reflecting: list[int],
        outputs: dict[int, str],
        verdicts: dict[int, parsing.Verdict],
        rc: Clock,
        calls: CallLog,
    ) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
        """The coach's calls for ``slots`` and the self-reflections (the paper's Listing 5) of ``reflecting``,
        in one batch; each coaching and each reflection goes into the agent's memory. Returns both by agent
        id (a failed reflection: "", recorded)."""
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
        for v in reflecting:
            a, verdict = team.agents[v], verdicts[v]
            user = fill(
                "tacomas",
                "reflect.txt",
                round=t + 1,
                reward="unscored" if verdict.score is None else f"{verdict.score:.2f}",
                output=clip(outputs[v].strip(), self.s.message_chars) or "(no output)",
            )
            keyed.append(
                (f"reflect:{a.id}", "reflect", self.request("reflect", t, a.id, self._system(v), user))
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
        reflections: dict[str, str] = {}
        for v, r in zip(reflecting, results[len(slots) :]):
            a = team.agents[v]
            text = clip(" ".join(strip_reasoning(r.text).split()), _REFLECT_CHARS) if r.ok else ""
            if r.ok and not text:
                calls.error(a.id, "reflect", "empty self-reflection (no memory update)")
            team.remember(v, f"Round {t + 1} self-reflection: {text}" if text else "", self.s.memory_items)
            reflections[a.id] = text
        return out, reflections

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
        reflections: dict[str, str],
        tools: dict[int, list[dict[str, Any]]],
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
            "reflections": reflections,
            "tools": {names[v]: tools[v] for v in slots if v in tools},
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


def _tool_text(run: ToolRun) -> str:
    """A tool run as the team and the judge read it: its result, or why it failed."""
    return clip(run.output.strip(), _TOOL_CHARS) if run.ok else f"(the tool failed: {run.error})"


def _tool_entry(name: str, n: int, revised: bool, run: ToolRun) -> dict[str, Any]:
    """One tool call as the round's ``tools`` block records it: the n-th of the agent's this round, whether
    the agent replied again after it (False: it ran on the message the agent sent), and the run."""
    return {
        "tool": name,
        "call": n,
        "revised": revised,
        **run.to_json(),
        "output": clip(run.output, 2000),
    }
