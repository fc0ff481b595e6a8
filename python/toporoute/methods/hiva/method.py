"""The HiVA episode loop (spec §3): STEV iterations over an evolving agent DAG.

One iteration (one trace record):

1. **Forward** (Algorithm 2), level by level of ``ops.toposort``: every agent of a level that has an
   instruction runs its tool in the sandbox, then all of the level's agents go out in one LLM call batch; the
   bandit (``ops.bandit_select``, seeded, step = the graph's iteration) picks each executed node's top-k
   successors (``broadcast``: all of them); the routed successors' instructions (Fig. 6; several predecessors:
   concatenated in topological order under headers, §8.3) go out in one batch. The aggregator runs its tool on
   each response it integrates, then integrates the executed nodes routed to it (else those with no executed
   successor, §8.4).
2. **Environment → loss → global gradient** at the aggregator (Fig. 7). A per_instance task's last iteration
   stops after the environment: the rest would change nothing.
3. **Backward**, in reverse level order over the executed nodes only, each level in one batch: a node's local
   gradient (Fig. 8) comes from the gradients of the successors it routed to in this pass (§8.5).
4. **Updates**, each kind in one batch: prompts (Fig. 9), tools (Fig. 13, checked statically and by a trial
   run in the sandbox), parallelisability, sentiments; then the topology decisions (Fig. 10), applied in
   reverse topological order with ``ops.dag_edit`` (each checked at once; bad output → NO_CHANGE); the new
   agents' prompts and tools (Fig. 12) in one batch; the Beta and synergy updates (``ops.bandit_update``,
   ``ops.synergy_update``) with the sentiment rewards; ``ops.dag_repair``.

The ablation switches of the settings (``topology``, ``semantic``, ``broadcast``, ``tools``, ``environment``)
each leave out the steps they name and nothing else. Every reply loses its ``<think>`` blocks before anything
reads it. Every malformed output is recorded in the iteration's ``hiva.errors`` and gives its fallback (a default
instruction, the old prompt, the old tool, NO_CHANGE, the environment's success as the reward); the loop goes on.
"""

from __future__ import annotations

import asyncio
import random
import threading
from collections.abc import Awaitable, Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from ...llm.replies import strip_reasoning
from ...llm.types import Request, Result
from ...tasks import Task
from ...tasks.codetest import public_examples
from ...tasks.tools import ToolRun, check_tool_source, run_tool
from ...trace.schema import EdgeUsage, clip
from ..episode import (
    Clock,
    Emit,
    EpisodeOutput,
    KindEpisode,
    SettingsMethod,
    answer_from,
    domain_of,
    first_answer,
)
from ..episode import request_seed as _seed
from ..waves import Call, run_waves
from . import _prompts, parsing, steps
from .environment import Outcome, code_critique_outcome, code_outcome, math_outcome
from .graph import SINK, SOURCE, AgentState, HiVAGraph, Tool, word_similarity, words
from .record import Iteration, Pass, bandit_entry, broadcast_entry, iteration_record
from .settings import HiVASettings

if TYPE_CHECKING:
    from ...embed import Encoder
    from ...runtime import EpisodeContext

__all__ = ["HiVA"]

_EDIT = {
    "NO_CHANGE": 0,
    "ADD_PARALLEL": 1,
    "ADD_SERIAL": 2,
    "REMOVE_SUCCESSOR": 3,
    "CONNECT_TO_AGGREGATOR": 4,
}
_SHOWN = 1500  # characters of one text inside another prompt
# characters of an agent's own output that its gradient prompt shows (a whole program, as a rule)
_OWN_OUTPUT = 4000


def fresh_graph(settings: HiVASettings, domain: str) -> HiVAGraph:
    """The initial graph of a domain: the source agent wired to the aggregator and to
    ``settings.initial_workers`` worker agents (the roles of ``workers_<domain>.txt``, in order) that each feed
    the aggregator, every agent with the built-in tool. The source's routing then has more candidates than the
    default top-k from the first iteration on; with no workers it is Algorithm 1's ``v_s → v_a``."""
    tool = Tool(f"default_{domain}_tool", _prompts.default_tool_source(domain))
    g = HiVAGraph.initial(
        settings.max_agents,
        AgentState("source", "source", _prompts.text(f"source_{domain}"), tool),
        AgentState("aggregator", "aggregator", _prompts.text(f"aggregator_{domain}"), tool),
        c0=settings.c0,
    )
    roles = _prompts.text(f"workers_{domain}").splitlines()
    n = min(settings.initial_workers, settings.max_agents - 2, settings.max_out - 1, len(roles))
    for role, (ok, reason, slot) in zip(
        roles, g.apply_edits([(_EDIT["ADD_PARALLEL"], SOURCE, -1)] * n, max_out=settings.max_out)
    ):
        if not ok:  # the capacity and the out-degree were checked above
            raise AssertionError(f"the initial fan-out was refused: {reason}")
        g.add_agent(slot, AgentState(g.new_name(), "worker", role, tool, description=role))
    return g


class HiVA(SettingsMethod[HiVASettings]):
    """HiVA for the harness (``toporoute run hiva``), named ``name`` in the run folder; ``encoder`` is the
    embedding similarity's (default ``Encoder.default()``, loaded on first use).

    In ``stream`` mode one graph per domain carries over from episode to episode, so episodes must run one at a
    time in task order: :attr:`sequential` is then True, and :func:`~toporoute.methods.harness.run_method` runs
    the episodes with concurrency 1 (the runtime starts them in task order). Called concurrently anyway, the
    episodes still take turns on a lock, in the order they reach it. A resumed run skips the finished episodes;
    their changes to the graph are not replayed.
    """

    def __init__(
        self, settings: HiVASettings | None = None, *, name: str = "hiva", encoder: Encoder | None = None
    ) -> None:
        super().__init__(name, settings or HiVASettings())
        self._encoder = encoder
        self._encoder_lock = threading.Lock()
        self._stream: dict[str, HiVAGraph] = {}
        self._lock: tuple[asyncio.AbstractEventLoop, asyncio.Lock] | None = None

    @property
    def sequential(self) -> bool:
        """Whether episodes must run one at a time, in task order (stream mode)."""
        return self.settings.mode == "stream"

    def stream_graph(self, domain: str) -> HiVAGraph | None:
        """The graph ``stream`` mode carries for a domain (None before its first episode)."""
        return self._stream.get(domain)

    def encoder(self) -> Encoder:
        """The encoder of the embedding similarity (``Encoder.default()``, loaded on first use)."""
        with self._encoder_lock:
            if self._encoder is None:
                from ...embed import Encoder

                self._encoder = Encoder.default()
            return self._encoder

    def _stream_lock(self) -> asyncio.Lock:
        loop = asyncio.get_running_loop()
        if self._lock is None or self._lock[0] is not loop:
            self._lock = (loop, asyncio.Lock())
        return self._lock[1]

    def _embed(self, texts: list[str]) -> np.ndarray:
        """Unit embeddings of ``texts`` (blocking: call it in a worker thread)."""
        return np.asarray(self.encoder().encode(texts), dtype=np.float32)

    async def episode(self, ctx: EpisodeContext, task: Task, emit: Emit) -> EpisodeOutput:
        """Runs T iterations on one task; ``emit`` gets one record per iteration."""
        domain = domain_of(task)
        s = self.settings
        if s.mode == "per_instance":
            return await _Episode(
                self.name, s, ctx, task, domain, fresh_graph(s, domain), emit, self._embed
            ).run()
        async with self._stream_lock():
            graph = self._stream.get(domain) or fresh_graph(s, domain)
            out = await _Episode(self.name, s, ctx, task, domain, graph, emit, self._embed).run()
            self._stream[domain] = graph
            return out


class _Episode(KindEpisode[HiVASettings]):
    """One task's iterations over ``graph`` (a fresh one, or the stream's)."""

    def __init__(
        self,
        method: str,
        settings: HiVASettings,
        ctx: EpisodeContext,
        task: Task,
        domain: str,
        graph: HiVAGraph,
        emit: Emit,
        embed: Callable[[list[str]], np.ndarray],
    ) -> None:
        super().__init__(method, settings, ctx, task, emit)
        self.embed, self.domain, self.g = embed, domain, graph
        self.x0 = _prompts.fill(f"task_{domain}", prompt=task.prompt.strip())
        self.task_words = words(task.prompt)
        self.task_vec: np.ndarray | None = None  # the task's embedding, on first use
        self.bandit_seed = _seed(
            settings.seed, "bandit", ctx.episode if settings.mode == "per_instance" else ""
        )
        self.rng = random.Random(_seed(settings.seed, "updates", ctx.episode))
        self.tool_kwargs: dict[str, Any] = {}
        if domain == "code" and task.entry_point:
            self.tool_kwargs = {
                "examples": [[e.source, e.want] for e in public_examples(task)],
                "entry_point": task.entry_point,
            }
        self.gate = asyncio.Semaphore(settings.tool_workers)

    # ------------------------------------------------------------------------------------------ episode

    async def run(self) -> EpisodeOutput:
        s = self.s
        clock = Clock()
        history: list[dict[str, Any]] = []
        best: tuple[float, int, str] | None = None
        stopped = False
        for t in range(s.iterations):
            answer, outcome = await self.iteration(t, clock)
            history.append(
                {
                    "iteration": t,
                    "signal": round(outcome.signal, 4),
                    "success": outcome.success,
                    "signal_ok": outcome.signal_ok,
                    "answer_found": bool(answer),
                }
            )
            key = (outcome.signal if answer else -1.0, t, answer)
            if best is None or key[:2] >= best[:2]:
                best = key
            if s.early_stop and s.mode == "per_instance" and outcome.signal_ok:
                stopped = True
                break
        assert best is not None
        return EpisodeOutput(
            best[2],
            len(history),
            stopped,
            clock.llm_s,
            clock.routing_s,
            extra={
                "hiva": {
                    "mode": s.mode,
                    "oracle_feedback": s.oracle_feedback,
                    "environment": s.environment_of(self.domain),
                    "ablations": s.ablations(self.domain),
                    "iterations": history,
                    "best_iteration": best[1],
                    "early_stopped": stopped,
                    "final_graph": self.g.snapshot(),
                    "graph_step": self.g.iteration,
                }
            },
        )

    # ------------------------------------------------------------------------------------------ iteration

    async def iteration(self, t: int, clock: Clock) -> tuple[str, Outcome]:
        s, g = self.s, self.g
        rc = clock.round()
        g.iteration += 1
        p = Pass()
        with rc.routing():
            sigma, level = g.levels()
        it = Iteration.begin(t, g, sigma, level)
        it.ablations = s.ablations(self.domain)
        p.instructions[SOURCE] = [(-1, self.x0)]

        # ---- forward, level by level: a level runs the nodes that earlier levels routed instructions to
        def levels() -> Iterator[list[int]]:
            for lv in sorted(set(level.values())):
                nodes = [i for i in sigma if level[i] == lv and i != SINK and i in p.instructions]
                if nodes:
                    yield nodes

        async def route(wave: Sequence[int]) -> None:
            nodes = list(wave)
            if s.broadcast:  # w/o KABB: every successor, no bandit
                chosen = {i: g.successors(i) for i in nodes}
                p.bandit.append(broadcast_entry(g, nodes, level[nodes[0]], chosen))
            else:
                with rc.routing():
                    similarity = await self._similarity(g.nodes())
                    weights, psi = g.weights(
                        set(p.executed), similarity, s.lam, s.eta, s.omega, s.distance_threshold
                    )
                    sel = g.select(
                        nodes, weights, k=s.top_k, seed=self.bandit_seed, step=it.step, mode=s.bandit_mode
                    )
                chosen = sel.chosen
                p.bandit.append(
                    bandit_entry(g, nodes, level[nodes[0]], sel.theta, weights, psi, chosen, k=s.top_k)
                )
            for i in nodes:
                for j in chosen[i]:
                    it.routed[i, j] += 1
            await self._instructions(t, nodes, chosen, p, rc)

        await self._forward(t, levels(), sigma, p, rc, route)

        # ---- aggregation
        it.contributors = steps.contributors(p.executed, it.routed)
        it.answer = await self._aggregate(t, it.contributors, p, rc)
        for i in it.contributors:
            p.edge_tokens.append(EdgeUsage(g.name(i), g.name(SINK), p.forward_tokens.get(i, 0)))

        # ---- environment; the rest of the iteration learns for the next one, so a per_instance task's last
        # iteration (the last of T, or the one an early stop ends on) stops here: it would change nothing
        outcome = it.outcome = await self._environment(t, it.answer, p, rc)
        if s.mode == "per_instance" and (t == s.iterations - 1 or (s.early_stop and outcome.signal_ok)):
            it.backward = "skipped: the task's last iteration"
            graph, messages, block = iteration_record(it, p, g.snapshot())
            self.emit(
                self.record(
                    t, graph, messages, p.usage(self.ctx, t, p.edge_tokens), rc.timing(), {"hiva": block}
                )
            )
            return it.answer, outcome

        # ---- loss, global gradient
        it.loss, it.global_grad = await self._loss(t, it.answer, outcome, it.contributors, p, rc)

        # ---- backward over the executed nodes, reverse level order
        it.grads = {SINK: parsing.Gradient(it.global_grad, "", it.global_grad)}
        workers = [i for i in p.executed if i != SINK]
        for lv in sorted({level[i] for i in workers}, reverse=True):
            nodes = [i for i in workers if level[i] == lv]
            await self._gradients(t, nodes, it.routed, it.grads, p, rc)

        # ---- semantic updates, parallelisability, sentiment (one batch), then tools checked in the sandbox
        it.prompt_updates, it.tool_updates, it.parallel, it.sentiment = await self._updates(
            t, workers, it.grads, outcome, p, rc
        )

        # ---- topology decisions and edits (reverse topological order)
        if s.topology:
            order = [i for i in reversed(sigma) if i in workers]
            it.decisions = await self._decide(t, order, it.grads, it.parallel, p, rc)

        # ---- beliefs and synergy (on the slots of this pass, before new nodes reuse freed slots)
        rewards = {i: it.sentiment[i]["reward"] for i in it.sentiment}
        km = np.zeros(g.capacity, np.float64)
        with rc.routing():
            # KM = ρ_overlap · cos(agent, task), ρ = 1 without a knowledge graph (spec §3.3)
            for i, (_, cos) in (await self._similarity([i for i in p.executed if i in g.agents])).items():
                km[i] = cos
            g.update_beliefs(p.executed, rewards, km, gamma=s.gamma, delta=s.delta)
            g.update_synergy(it.routed, rewards, lr=s.synergy_lr)
            edits = steps.apply_decisions(g, it.decisions, max_out=s.max_out, domain=self.domain, errors=p)
        it.synthesised = await self._new_agents(t, edits, p, rc)
        if s.topology:
            with rc.routing():
                it.repair = g.repair(threshold=s.prune_threshold, min_obs=s.min_obs, max_out=s.max_out)

        graph, messages, block = iteration_record(it, p, g.snapshot())
        usage = p.usage(self.ctx, t, p.edge_tokens)
        self.emit(self.record(t, graph, messages, usage, rc.timing(), {"hiva": block}))
        return it.answer, outcome

    # ------------------------------------------------------------------------------------------ forward

    async def _generate(self, rc: Clock, p: Pass, keyed: Sequence[tuple[str, Request]]) -> list[Result]:
        """One LLM batch; each call logged under its key ``<agent>:<step>``, a failure recorded as an error.
        The replies come back without their reasoning (``<think>`` blocks), so that no reply is forwarded,
        aggregated, or read for a sentiment, a decision or an answer with it."""
        results = await p.generate(self.ctx, rc, [(Call(k, *k.split(":", 1)), r) for k, r in keyed])
        return [replace(r, text=strip_reasoning(r.text)) if "think>" in r.text else r for r in results]

    async def _tool(self, tool: Tool, input_data: str) -> ToolRun:
        async with self.gate:
            return await asyncio.to_thread(
                run_tool,
                tool.source,
                input_data,
                kwargs=self.tool_kwargs,
                timeout_s=self.s.tool_timeout_s,
                memory_mb=self.s.tool_memory_mb,
                retries=self.s.tool_retries,
                trusted=tool.trusted,
            )

    async def _similarity(self, nodes: Sequence[int]) -> dict[int, tuple[float, float]]:
        """(Jaccard of words, cosine) of each node's prompt to the task: the cosine of their embeddings
        (``similarity="embedding"``, embedded in a worker thread) or of their word sets (``"lexical"``)."""
        g = self.g
        live = [i for i in nodes if i in g.agents]
        lexical = {i: word_similarity(self.task_words, words(g.agents[i].prompt)) for i in live}
        if self.s.similarity == "lexical" or not live:
            return lexical
        if self.task_vec is None:
            self.task_vec = (await asyncio.to_thread(self.embed, [self.task.prompt]))[0]
        vecs = await asyncio.to_thread(self.embed, [g.agents[i].prompt for i in live])
        cos = np.clip(vecs @ self.task_vec, -1.0, 1.0)
        return {i: (lexical[i][0], float(c)) for i, c in zip(live, cos)}

    async def _forward(
        self,
        t: int,
        levels: Iterable[list[int]],
        sigma: list[int],
        p: Pass,
        rc: Clock,
        route: Callable[[Sequence[int]], Awaitable[None]],
    ) -> None:
        """The forward pass on the shared wave executor: a level's nodes get their inputs from the instructions
        routed to them (in sigma order), run their tools (all at once), then make their agent calls as one batch;
        ``route`` picks each node's successors after its level."""
        g = self.g
        pos = {n: k for k, n in enumerate(sigma)}
        users: dict[int, str] = {}

        async def prepare(nodes: Sequence[int]) -> None:
            for i in nodes:
                parts = sorted(p.instructions[i], key=lambda item: pos.get(item[0], -1))
                if len(parts) == 1:
                    p.inputs[i] = parts[0][1]
                else:
                    p.inputs[i] = "\n\n".join(
                        f"## Instruction from {g.name(src)}\n{text}" for src, text in parts
                    )
            if not self.s.tools:  # w/o Tool: the agents answer the instruction alone
                for i in nodes:
                    users[i] = _prompts.fill("agent_user_plain", instruction=p.inputs[i])
                return
            runs = await asyncio.gather(*(self._tool(g.agents[i].tool, p.inputs[i]) for i in nodes))
            for i, run in zip(nodes, runs):
                a = g.agents[i]
                p.tools[i] = run
                p.tool_used[i] = (a.tool.name, a.tool.version)
                if run.ok:
                    users[i] = _prompts.fill(
                        "agent_user", instruction=p.inputs[i], tool=a.tool.name, tool_result=run.output
                    )
                else:
                    p.error(a.name, "tool", run.error or "failed")
                    users[i] = _prompts.fill(
                        "agent_user_no_tool",
                        instruction=p.inputs[i],
                        tool=a.tool.name,
                        tool_error=run.error or "failed",
                    )

        def request(i: int) -> Request:
            a = g.agents[i]
            return self.request("agent", t, a.name, a.prompt, users[i])

        async def generate(keyed: Sequence[tuple[int, Request]]) -> list[Result]:
            return await self._generate(rc, p, [(f"{g.agents[i].name}:forward", r) for i, r in keyed])

        def deliver(i: int, r: Result) -> None:
            p.outputs[i] = r.text if r.ok else ""
            p.forward_tokens[i] = r.usage.completion_tokens if r.ok else 0
            p.executed.append(i)
            g.agents[i].visits += 1

        await run_waves(levels, request, generate, deliver, prepare=prepare, finish=route)

    async def _instructions(
        self, t: int, nodes: list[int], chosen: dict[int, list[int]], p: Pass, rc: Clock
    ) -> None:
        g = self.g
        pairs = [(i, j) for i in nodes for j in chosen[i] if j != SINK]
        keyed = []
        for i, j in pairs:
            run = p.tools.get(i)
            user = _prompts.fill(
                "instruction_user",
                input=clip(p.inputs[i], _SHOWN),
                output=clip(p.outputs.get(i, ""), _SHOWN),
                tool_result=clip(run.output if run is not None and run.ok else "(none)", 600),
                successor_prompt=g.agents[j].prompt,
                successor_id=g.name(j),
            )
            keyed.append(
                (
                    f"{g.name(i)}:instruction>{g.name(j)}",
                    self.request("instruction", t, g.name(i), _prompts.text("instruction_system"), user),
                )
            )
        results = await self._generate(rc, p, keyed)
        for (i, j), r in zip(pairs, results):
            text = r.text.strip() if r.ok else ""
            if not text:
                p.error(
                    g.name(i),
                    "instruction",
                    f"empty instruction for {g.name(j)}: passing the input and output on",
                )
                text = f"{p.inputs[i]}\n\nThe previous agent ({g.name(i)}) answered:\n{p.outputs.get(i, '')}"
            p.instructions.setdefault(j, []).append((i, text))
            p.edge_tokens.append(EdgeUsage(g.name(i), g.name(j), r.usage.completion_tokens if r.ok else 0))

    async def _aggregate(self, t: int, contributors: list[int], p: Pass, rc: Clock) -> str:
        """The aggregator's answer: its tool runs on each contributor's response (all at once, in the sandbox;
        for code, the response's program on the visible examples), and it integrates the responses with their
        tool results."""
        g = self.g
        a = g.agents[SINK]
        checks: dict[int, str] = {}
        if self.s.tools and contributors:
            runs = await asyncio.gather(*(self._tool(a.tool, p.outputs.get(i, "")) for i in contributors))
            p.tool_used[SINK] = (a.tool.name, a.tool.version)
            for i, run in zip(contributors, runs):
                p.aggregator_tools.append((i, run))
                if run.ok:
                    checks[i] = f"\ntool {a.tool.name} on this response: {clip(run.output, 600)}"
                else:
                    p.error(a.name, "tool", f"on {g.name(i)}'s response: {run.error or 'failed'}")
        responses = "\n\n".join(
            f"[{g.name(i)}] role: {clip(g.agents[i].prompt, 300)}\nresponse:\n{p.outputs.get(i, '')}"
            + checks.get(i, "")
            for i in contributors
        )
        user = _prompts.fill("aggregate_user", task=self.x0, responses=responses or "(no responses)")
        (r,) = await self._generate(
            rc, p, [(f"{a.name}:aggregate", self.request("aggregator", t, a.name, a.prompt, user))]
        )
        p.inputs[SINK] = user
        p.outputs[SINK] = r.text if r.ok else ""
        p.executed.append(SINK)
        a.visits += 1
        answer = answer_from(self.task, p.outputs[SINK])
        if not answer:  # the aggregator's own reply holds none: the latest contributor's that does
            answer = first_answer(self.task, [p.outputs.get(i, "") for i in reversed(contributors)])
            if answer:
                p.error(
                    a.name, "aggregate", "no answer in the aggregator's reply: a contributor's answer taken"
                )
        return answer

    # ------------------------------------------------------------------------------------------ loss

    async def _environment(self, t: int, answer: str, p: Pass, rc: Clock) -> Outcome:
        s = self.s
        if s.environment_of(self.domain) == "public-tests":
            return await code_outcome(
                self.task,
                answer,
                oracle=s.oracle_feedback,
                timeout_s=s.test_timeout_s,
                memory_mb=s.test_memory_mb,
            )
        user = _prompts.fill("self_critique", task=self.x0, answer=p.outputs.get(SINK, "") or "(no answer)")
        (r,) = await self._generate(
            rc,
            p,
            [
                (
                    "environment:critique",
                    self.request("critique", t, "environment", None, user, regex=parsing.VERDICT_REGEX),
                )
            ],
        )
        verdict, err = parsing.parse_verdict(r.text if r.ok else "")
        if err is not None:
            p.error("environment", "critique", err)
        if self.domain == "code":
            return await code_critique_outcome(
                self.task,
                answer,
                r.text if r.ok else "",
                verdict,
                oracle=s.oracle_feedback,
                timeout_s=s.test_timeout_s,
                memory_mb=s.test_memory_mb,
            )
        return math_outcome(self.task, answer, r.text if r.ok else "", verdict, oracle=s.oracle_feedback)

    async def _loss(
        self, t: int, answer: str, outcome: Outcome, contributors: list[int], p: Pass, rc: Clock
    ) -> tuple[str, str]:
        g = self.g
        criteria = (
            "the program must be correct on every input the problem allows"
            if self.domain == "code"
            else "the final answer must be correct and justified"
        )
        final = p.outputs.get(SINK, "")
        user = _prompts.fill(
            "loss_user",
            task=self.x0,
            answer=clip(final or answer or "(no answer)", 4000),
            criteria=criteria,
            outcome=outcome.text,
        )
        (r,) = await self._generate(
            rc,
            p,
            [
                (
                    "environment:loss",
                    self.request("loss", t, "environment", _prompts.text("loss_system"), user),
                )
            ],
        )
        loss, err = parsing.feedback_text(r.text if r.ok else "")
        if err is not None:
            p.error("environment", "loss", err)
        if not loss:
            loss = outcome.text
        user = _prompts.fill(
            "global_gradient",
            predecessors=", ".join(g.name(i) for i in contributors) or "none",
            aggregator=g.name(SINK),
            loss=loss,
            context=final[:200],
        )
        (r,) = await self._generate(
            rc,
            p,
            [
                (
                    f"{g.name(SINK)}:global_gradient",
                    self.request("global_gradient", t, g.name(SINK), None, user),
                )
            ],
        )
        grad, err = parsing.feedback_text(r.text if r.ok else "")
        if err is not None:
            p.error(g.name(SINK), "global_gradient", err)
        return loss, grad or loss

    # ------------------------------------------------------------------------------------------ backward

    async def _gradients(
        self,
        t: int,
        nodes: list[int],
        routed: np.ndarray,
        grads: dict[int, parsing.Gradient],
        p: Pass,
        rc: Clock,
    ) -> None:
        g = self.g
        keyed = []
        for i in nodes:
            fed = [j for j in np.flatnonzero(routed[i]) if int(j) in grads]
            lines = [
                f"Agent {g.name(int(j))} (visited {g.agents[int(j)].visits} times): {grads[int(j)].overall}"
                for j in fed
            ] or [f"Agent {g.name(SINK)}: {grads[SINK].overall}"]
            run = p.tools.get(i)
            user = _prompts.fill(
                "agent_gradient",
                role=g.agents[i].prompt[:300],
                output=clip(p.outputs.get(i, ""), _OWN_OUTPUT),
                tool=g.agents[i].tool.name if self.s.tools else "none",
                tool_result=clip(
                    run.output if run and run.ok else (run.error if run else "not run") or "", 600
                ),
                feedback="\n".join(lines),
            )
            keyed.append(
                (
                    f"{g.name(i)}:gradient",
                    self.request("gradient", t, g.name(i), None, user, regex=parsing.GRADIENT_REGEX),
                )
            )
        results = await self._generate(rc, p, keyed)
        for i, r in zip(nodes, results):
            grad = parsing.parse_gradient(r.text if r.ok else "")
            if grad.error is not None:
                p.error(g.name(i), "gradient", grad.error)
                if not grad.overall:  # nothing usable: pass the successors' feedback on
                    passed_on = [grads[int(j)].overall for j in np.flatnonzero(routed[i]) if int(j) in grads]
                    grad = parsing.Gradient("", "", " ".join(passed_on)[:600], grad.error)
            grads[i] = grad

    async def _updates(
        self,
        t: int,
        workers: list[int],
        grads: dict[int, parsing.Gradient],
        outcome: Outcome,
        p: Pass,
        rc: Clock,
    ) -> tuple[
        list[dict[str, Any]], list[dict[str, Any]], dict[int, parsing.Parallelism], dict[int, dict[str, Any]]
    ]:
        s, g = self.s, self.g
        keyed: list[tuple[str, Request]] = []
        kinds: list[tuple[str, int]] = []
        for i in [*workers, SINK]:
            a, grad = g.agents[i], grads[i]
            want_prompt = bool(grad.system_prompt) and s.semantic
            want_tool = bool(grad.tool) and i != SINK and s.semantic and s.tools
            if want_prompt and want_tool and not s.apply_both:
                want_tool = self.rng.random() < s.w_tool / s.w_prompt
            if want_prompt:
                user = _prompts.fill("prompt_update", variable=a.prompt, gradients=grad.system_prompt)
                keyed.append(
                    (f"{a.name}:prompt_update", self.request("prompt_update", t, a.name, None, user))
                )
                kinds.append(("prompt", i))
            if want_tool:
                user = _prompts.fill("tool_refine", source=a.tool.source, feedback=grad.tool)
                keyed.append((f"{a.name}:tool_refine", self.request("tool_refine", t, a.name, None, user)))
                kinds.append(("tool", i))
            if i != SINK and s.topology:
                user = _prompts.fill(
                    "parallel_analysis", role=a.prompt[:300], task=clip(self.x0, 800), feedback=grad.overall
                )
                keyed.append(
                    (
                        f"{a.name}:parallel",
                        self.request("parallel", t, a.name, None, user, regex=parsing.PARALLEL_REGEX),
                    )
                )
                kinds.append(("parallel", i))
            user = _prompts.fill("sentiment", feedback=grad.overall or "(none)")
            keyed.append(
                (
                    f"{a.name}:sentiment",
                    self.request("sentiment", t, a.name, None, user, regex=parsing.SENTIMENT_REGEX),
                )
            )
            kinds.append(("sentiment", i))
        results = await self._generate(rc, p, keyed)
        prompt_updates: list[dict[str, Any]] = []
        tool_jobs: list[tuple[int, str]] = []
        parallel: dict[int, parsing.Parallelism] = {}
        sentiment: dict[int, dict[str, Any]] = {}
        for (kind, i), r in zip(kinds, results):
            a, text = g.agents[i], (r.text if r.ok else "")
            if kind == "prompt":
                new, err = parsing.improved_variable(text)
                entry: dict[str, Any] = {
                    "agent": a.name,
                    "old": a.prompt,
                    "new": new or a.prompt,
                    "error": err,
                }
                if err is not None:
                    p.error(a.name, "prompt_update", err)
                entry["changed"] = bool(new) and new != a.prompt
                if entry["changed"]:
                    a.prompt = new
                prompt_updates.append(entry)
            elif kind == "tool":
                tool_jobs.append((i, text))
            elif kind == "parallel":
                par = parsing.parse_parallelism(text)
                if par.error is not None:
                    p.error(a.name, "parallel", par.error)
                parallel[i] = par
            else:
                label, err = parsing.parse_sentiment(text)
                if err is not None:
                    p.error(a.name, "sentiment", f"{err}: the environment's success as the reward")
                reward = float(outcome.success) if label is None else (0.0 if label == "CRITICAL" else 1.0)
                sentiment[i] = {"label": label, "reward": reward, "error": err}
        tool_updates = list(
            await asyncio.gather(
                *(self._new_tool(i, text, "refine", p.inputs.get(i, self.x0), p) for i, text in tool_jobs)
            )
        )
        return prompt_updates, tool_updates, parallel, sentiment

    async def _new_tool(self, i: int, text: str, kind: str, trial_input: str, p: Pass) -> dict[str, Any]:
        """A tool from an LLM output, kept only when it passes the static check and a trial run in the sandbox
        on ``trial_input``; else the agent keeps its tool (recorded)."""
        a = self.g.agents[i]
        source, err = parsing.extract_tool_code(text)
        entry: dict[str, Any] = {
            "agent": a.name,
            "kind": kind,
            "old_version": a.tool.version,
            "source": clip(source, 4000),
        }
        problem = err or check_tool_source(source)
        trial: ToolRun | None = None
        if problem is None:
            trial = await self._tool(Tool("candidate", source, trusted=False), trial_input)
            if not trial.ok:
                problem = f"trial run failed: {trial.error}"
        entry["trial"] = None if trial is None else trial.to_json()
        if problem is not None:
            p.error(a.name, f"tool_{kind}", f"{problem}: the agent keeps {a.tool.name} v{a.tool.version}")
            entry.update(accepted=False, error=problem)
            return entry
        version = a.tool.version + 1
        a.tool = Tool(f"{a.name}_tool", source, version, trusted=False, origin=kind)
        entry.update(accepted=True, error=None, version=version)
        return entry

    # ------------------------------------------------------------------------------------------ topology

    async def _decide(
        self,
        t: int,
        order: list[int],
        grads: dict[int, parsing.Gradient],
        parallel: dict[int, parsing.Parallelism],
        p: Pass,
        rc: Clock,
    ) -> list[dict[str, Any]]:
        g = self.g
        keyed = []
        for i in order:
            a = g.agents[i]
            succ = [g.name(j) for j in g.successors(i)]
            user = _prompts.fill(
                "decision_user",
                agent=a.name,
                role=a.prompt[:300],
                feedback=grads[i].overall or "(none)",
                count=len(succ),
                successors=", ".join(succ) or "none",
                parallel=parallel[i].describe() if i in parallel else "unknown",
            )
            keyed.append(
                (
                    f"{a.name}:decision",
                    self.request(
                        "decision",
                        t,
                        a.name,
                        _prompts.text("decision_system"),
                        user,
                        regex=parsing.decision_regex(succ),
                    ),
                )
            )
        results = await self._generate(rc, p, keyed)
        decisions = []
        for i, r in zip(order, results):
            a = g.agents[i]
            text = r.text if r.ok else ""
            d = parsing.parse_decision(text)
            entry: dict[str, Any] = {
                "agent": a.name,
                "raw": clip(text.strip(), 400),
                "action": d.action,
                "arg": d.arg,
                "error": d.error,
                "node": i,
            }
            if d.error is not None:
                p.error(a.name, "decision", f"{d.error}: NO_CHANGE")
            action, target = d.action, -1
            par = parallel.get(i)
            if action == "ADD_PARALLEL" and (par is None or par.score < self.s.parallel_threshold):
                action = "ADD_SERIAL"
                entry["converted"] = (
                    f"parallelisability {0.0 if par is None else par.score:g} < {self.s.parallel_threshold:g}"
                )
            if action == "REMOVE_SUCCESSOR":
                target, why = steps.remove_target(self.g, i, d.arg)
                if why is not None:
                    p.error(a.name, "decision", f"{why}: NO_CHANGE")
                    entry["error"] = why
                    action = "NO_CHANGE"
            if action == "CONNECT_TO_AGGREGATOR":
                target = SINK
            entry["applied_action"] = action
            entry["edit"] = [_EDIT[action], i, target]
            entry["description"] = d.arg if action in ("ADD_PARALLEL", "ADD_SERIAL") else ""
            decisions.append(entry)
        return decisions

    async def _new_agents(
        self, t: int, made: list[tuple[int, dict[str, Any]]], p: Pass, rc: Clock
    ) -> list[dict[str, Any]]:
        """The new agents' prompts and (``synthesize_tools``) tools, in one batch; returns the tool records."""
        g = self.g
        keyed: list[tuple[str, Request]] = []
        kinds: list[tuple[str, int]] = []
        for slot, d in made:
            a = g.agents[slot]
            parent = g.agents.get(d["node"])
            user = _prompts.fill(
                "new_agent",
                task_kind=self.domain,
                description=a.description,
                parent_role=(parent.prompt if parent else "")[:300],
            )
            keyed.append((f"{a.name}:new_agent", self.request("new_agent", t, a.name, None, user)))
            kinds.append(("prompt", slot))
            if self.s.synthesize_tools and self.s.tools:
                examples = ""
                if self.tool_kwargs.get("examples"):
                    examples = "- kwargs may hold `examples` (pairs of a call and its expected result) and `entry_point`.\n"
                user = _prompts.fill("tool_synthesis", description=a.description, examples=examples)
                keyed.append(
                    (f"{a.name}:tool_synthesis", self.request("tool_synthesis", t, a.name, None, user))
                )
                kinds.append(("tool", slot))
        results = await self._generate(rc, p, keyed)
        jobs = []
        for (kind, slot), r in zip(kinds, results):
            a = g.agents[slot]
            text = r.text.strip() if r.ok else ""
            if kind == "prompt":
                if text:
                    a.prompt = text
                else:
                    p.error(a.name, "new_agent", "empty prompt: the description as the prompt")
            else:
                jobs.append(self._new_tool(slot, text, "synthesis", self.x0, p))
        return list(await asyncio.gather(*jobs))

    # ------------------------------------------------------------------------------------------ record
