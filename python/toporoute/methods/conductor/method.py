"""The AgentConductor episode loop (methods/agentconductor.md §3).

Each turn: the orchestrator writes a YAML plan (under a regular-expression grammar where the engine supports
it); ``ops.conductor_check`` validates and decodes it into a layered DAG; the layers run in order, every
agent of a layer at once, each seeing the problem, its role prompt, the previous turn's view (plan, verdict,
logs), its own earlier outputs and the outputs of its direct refs only (replies are passed on without their
``<think>`` reasoning); the tester runs the referenced code in the sandbox. A failed turn (its plan, verdict
and logs), an unverified one (its program loads but the prompt shows no example to run) or an invalid one (the
orchestrator's own reply and the checker's error) feeds the next one, up to ``max_turns``. Every turn is scored
with the paper's reward (``reward.py``), computed from the task's difficulty cap and the verdict of the hidden
tests.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import ops
from ...errors import InvalidArgumentError
from ...llm.structured import strip_reasoning
from ...llm.types import Request, Result, Tags
from ...tasks import Task, extract_code
from ...tasks.codetest import NO_TESTS, TestReport, run_hidden_tests, run_public_tests
from ...trace.schema import CallUsage, Edge, EdgeUsage, Graph, Message, RoundRecord, Stats, Usage, clip
from ...types.conductor_topology import Context, Node, TopologyCheck, TurnGraph
from ..episode import (
    Clock,
    Emit,
    EpisodeOutput,
    SettingsMethod,
    call_error,
    record_edges,
)
from ..waves import run_waves
from . import _prompts
from .checkpoint import OrchestratorCheckpoint
from .reward import (
    CAPS,
    TurnRewards,
    trajectory_return,
    turn_rewards,
)
from .settings import ConductorSettings

if TYPE_CHECKING:
    from ...embed import Encoder
    from ...runtime import EpisodeContext
    from ._retrieval import Retriever

__all__ = ["Conductor"]

_CODE_ROLES = ("coder", "debugger")


@dataclass
class _Turn:
    """What later turns and the answer need from a finished turn; ``output`` is an invalid plan's reply as the
    next prompt shows it (spec §2.5: the history holds the output and the checker's message)."""

    yaml: str | None
    tag: str | None = None
    message: str = ""
    verdict: str | None = None
    logs: str = ""
    last_step: int = 0
    output: str = ""


class Conductor(SettingsMethod[ConductorSettings]):
    """AgentConductor for the harness (``toporoute run conductor``), named ``name`` in the run folder.

    Parameters
    ----------
    settings : ConductorSettings, optional
    retriever : Retriever, optional
        The searcher's retriever (default: the corpus ``settings.retrieval_corpus`` names, embedded with
        ``encoder``).
    encoder : Encoder, optional
        The descriptor encoder of the default retriever (default ``Encoder.default()``, loaded when a plan
        first uses a searcher).
    """

    def __init__(
        self,
        settings: ConductorSettings | None = None,
        *,
        retriever: Retriever | None = None,
        encoder: Encoder | None = None,
        name: str = "conductor",
    ) -> None:
        super().__init__(name, settings or ConductorSettings())
        self._search = _SearchSlot(retriever, encoder, self.settings.retrieval_corpus)
        self.checkpoint = _orchestrator_checkpoint(self.settings.orchestrator)

    # the orchestrator's calls go to an engine of their own when ``settings.orchestrator`` names one
    meta_kinds = ("orchestrator",)

    @property
    def meta_engine_spec(self) -> str:
        """The orchestrator's engine spec (``[ENGINE:]MODEL[@BASE_URL]``; "" when it runs on the run's engine):
        the command line opens that engine and sends the calls tagged ``orchestrator`` there."""
        return self.settings.orchestrator or ""

    def params(self) -> dict[str, Any]:
        out = super().params()
        if self.checkpoint is not None:  # which trained orchestrator ran
            out["orchestrator_checkpoint"] = self.checkpoint.summary()
        return out

    def select_tasks(self, tasks: Sequence[Task]) -> tuple[list[Task], dict[str, Any] | None]:
        """Every task, unless the orchestrator is a trained folder (:mod:`.checkpoint`): then never one it was
        trained on (refused, or left out with ``drop_trained_tasks``; see
        :func:`~toporoute.methods.harness.exclude_trained`). Nothing is recorded for an untrained orchestrator."""
        if self.checkpoint is None:
            return list(tasks), None
        from ..harness import exclude_trained

        return exclude_trained(
            tasks,
            self.checkpoint.task_ids,
            where=f"the orchestrator {self.checkpoint.path}",
            drop=self.settings.drop_trained_tasks,
        )

    def with_settings(self, **changes: Any) -> Conductor:
        """The same method with ``changes`` to its settings, sharing its retriever (the corpus is embedded once)
        unless they name another corpus."""
        other = Conductor(replace(self.settings, **changes), name=self.name)
        if other.settings.retrieval_corpus == self.settings.retrieval_corpus:
            other._search = self._search
        else:
            other._search = _SearchSlot(None, self._search.encoder, other.settings.retrieval_corpus)
        return other

    # ------------------------------------------------------------------------------------------ the episode

    async def episode(self, ctx: EpisodeContext, task: Task, emit: Emit) -> EpisodeOutput:
        """Runs one code task; ``emit`` gets one trace record per turn."""
        if task.kind != "code" or not task.entry_point:
            raise InvalidArgumentError(
                f"task {task.id!r}: AgentConductor solves code tasks with an entry point; got kind={task.kind!r}",
                "task",
            )
        s = self.settings
        level, level_source = s.level_of(task)
        n_max = CAPS[level]
        context = Context()
        outputs: dict[int, str] = {}  # global node index -> output
        everyone: list[Node] = []
        memory: dict[str, list[int]] = {}  # id -> global indices of its earlier runs
        history: list[_Turn] = []
        rewards: list[float] = []
        answer = ""
        clock = Clock()
        passed = stop = False
        for k in range(s.max_turns):
            rc = clock.round()
            request = self._orchestrator_request(ctx.episode, task, k, history, first=not context.nodes)
            got = await self._plan(ctx, rc, task, k, request)
            with rc.routing():
                chk = ops.conductor_check(
                    got.text if got.ok else "", context=context, options=s.check_options
                ).item(0)
            turn = ConductorTurn(
                level, level_source, n_max, request, got, chk, grammar=s.grammar if request.regex else None
            )
            if not chk.ok:
                r = turn_rewards([chk.error], [None], [0], [0], [0], n_max, s.reward)
                rewards.append(float(r.r[0]))
                turn = replace(turn, reward=r, return_so_far=trajectory_return(rewards, s.reward))
                output = clip(got.text if got.ok else "", s.view_chars)
                history.append(
                    _Turn(chk.yaml if chk.yaml is not None else got.text, chk.tag, chk.message, output=output)
                )
                context = context.next(None)
                emit(self._record(ctx.episode, task, k, turn, None, rc))
            else:
                g = chk.graph
                assert g is not None
                everyone.extend(g.nodes)
                view = history[-1] if history else None
                run = await self._execute(ctx, rc, task, k, g, everyone, outputs, memory, view)
                hidden = run.report
                if s.feedback_tests == "public":  # the reward's verdict: the real tests, never shown
                    hidden = await asyncio.to_thread(
                        run_hidden_tests,
                        task,
                        run.code,
                        timeout_s=s.test_timeout_s,
                        memory_mb=s.test_memory_mb,
                    )
                with rc.routing():
                    r = turn_rewards(
                        [0], [hidden.verdict], [g.n_nodes], [g.n_edges], [g.n_steps], n_max, s.reward
                    )
                    stats = _graph_stats(g)
                rewards.append(float(r.r[0]))
                turn = replace(
                    turn,
                    reward=r,
                    return_so_far=trajectory_return(rewards, s.reward),
                    verdict=run.report.verdict,
                    reward_verdict=hidden.verdict,
                )
                history.append(
                    _Turn(
                        chk.yaml,
                        None,
                        "",
                        run.report.verdict,
                        clip(run.report.logs, s.view_chars),
                        g.steps[-1],
                    )
                )
                answer = run.code
                context = context.next(g)
                passed = run.report.verdict == "PASSED"
                # an unverified program (no example to run) goes on to a repair turn, like a failure
                stop = passed or (run.report.verdict == NO_TESTS and not s.repair_unverified)
                emit(self._record(ctx.episode, task, k, turn, (g, run, stats), rc))
            if stop:
                break
        turns = len(rewards)
        return EpisodeOutput(
            answer,
            turns,
            passed,
            clock.llm_s,
            clock.routing_s,
            extra={
                "conductor": {
                    "level": level,
                    "level_source": level_source,
                    "n_max": n_max,
                    "turns": [
                        {
                            "yaml": h.yaml,
                            "error": h.tag,
                            "message": h.message,
                            "verdict": h.verdict,
                            "reward": rw,
                        }
                        for h, rw in zip(history, rewards)
                    ],
                    "rewards": [round(x, 6) for x in rewards],
                    "return": round(trajectory_return(rewards, s.reward), 6),
                    "passed_feedback": passed,
                }
            },
        )

    # ------------------------------------------------------------------------------------------ the orchestrator

    async def _plan(self, ctx: EpisodeContext, rc: Clock, task: Task, k: int, request: Request) -> Result:
        """The orchestrator's reply to ``request`` (turn ``k``); the GRPO trainer's executor answers turn 0 with
        the plan it scores instead."""
        return await rc.generate_one(ctx, request)

    def orchestrator_request(self, task: Task, k: int = 0, episode: str | None = None) -> Request:
        """The orchestrator's first-turn request for ``task`` as the loop sends it (turn ``k`` with no history):
        the prompts GRPO trains on."""
        return self._orchestrator_request(episode or task.episode_id, task, k, [], first=True)

    def _orchestrator_request(
        self, episode: str, task: Task, k: int, history: list[_Turn], *, first: bool
    ) -> Request:
        s = self.settings
        system = _prompts.text("orchestrator_system").format(
            roles=_prompts.roles_block(s.pool, s.retrieval_corpus), max_turns=s.max_turns
        )
        blocks = []
        for i, h in enumerate(history):
            if h.verdict is not None:
                blocks.append(
                    _prompts.text("history_executed").format(
                        turn=i + 1, yaml=_with_newline(h.yaml or ""), status=h.verdict, logs=h.logs
                    )
                )
            else:
                blocks.append(
                    _prompts.text("history_invalid").format(
                        turn=i + 1, output=h.output.strip() or "(empty)", tag=h.tag, message=h.message
                    )
                )
        last_step = max((h.last_step for h in history), default=0)
        hint = (
            _prompts.text("continue_hint").format(next_step=last_step + 1).rstrip("\n") if last_step else ""
        )
        user = _prompts.text("orchestrator_user").format(
            history="".join(blocks),
            question=task.prompt.strip(),
            turn=k + 1,
            max_turns=s.max_turns,
            continue_hint=hint,
        )
        return Request.chat(
            system,
            user,
            sampling=s.sampling(
                episode,
                k,
                "orchestrator",
                max_tokens=s.orchestrator_max_tokens,
                temperature=s.orchestrator_temperature,
            ),
            tags=Tags(round=k, agent="orchestrator", role="orchestrator"),
            regex=_prompts.plan_regex(s.check_options, first, s.grammar) if s.guided else None,
        )

    # ------------------------------------------------------------------------------------------ execution

    async def _execute(
        self,
        ctx: EpisodeContext,
        rc: Clock,
        task: Task,
        k: int,
        g: TurnGraph,
        everyone: list[Node],
        outputs: dict[int, str],
        memory: dict[str, list[int]],
        view: _Turn | None,
    ) -> _TurnRun:
        """Runs the layers of turn ``k`` (LLM time on ``rc``); returns what the tester and the agents did."""
        s = self.settings
        names = {gi: _name(everyone[gi], g.turn) for gi in range(len(everyone))}
        inbox: dict[int, list[int]] = {}
        tester: dict[str, Any] | None = None
        report: TestReport | None = None
        code = ""
        view_text = ""
        if view is not None and view.verdict is not None:
            view_text = _prompts.text("view").format(
                yaml=_with_newline(view.yaml or ""), status=view.verdict, logs=view.logs
            )

        async def prepare(members: Sequence[int]) -> None:
            for gi in members:
                i = gi - g.base
                seen = list(g.refs[i])
                if g.self_src[i] >= 0 and g.self_src[i] not in seen:
                    seen.append(g.self_src[i])
                inbox[gi] = seen

        def request(gi: int) -> Request | None:
            if everyone[gi].role == "tester":
                return None
            # own earlier outputs (the self edge's included) come as memory, the refs as inputs
            refs = list(g.refs[gi - g.base])
            return self._agent_request(
                ctx.episode, task, k, everyone[gi], gi, refs, outputs, memory, names, view_text
            )

        def deliver(gi: int, res: Result) -> None:
            outputs[gi] = strip_reasoning(res.text) if res.ok else ""

        async def finish(members: Sequence[int]) -> None:
            nonlocal tester, report, code
            for gi in members:
                if everyone[gi].role == "searcher":
                    outputs[gi] = await self._search_output(task, outputs[gi])
            for gi in members:
                if everyone[gi].role != "tester":
                    continue
                src, code_i = self._tested_code(task, inbox[gi], everyone, outputs)
                run = run_hidden_tests if s.feedback_tests == "hidden" else run_public_tests
                rep = await asyncio.to_thread(
                    run, task, code_i, timeout_s=s.test_timeout_s, memory_mb=s.test_memory_mb
                )
                outputs[gi] = _tester_output(rep, code_i)
                if tester is None or gi - g.base in g.layers[-1]:
                    report, code = rep, code_i
                    tester = {
                        "agent": names[gi],
                        "tested": names.get(src) if src is not None else None,
                        "code": clip(code_i),
                        "verdict": rep.verdict,
                        "tests": rep.tests,
                        "passed": rep.passed,
                        "total": rep.total,
                        "logs": clip(rep.logs, s.view_chars),
                    }
            for gi in members:
                memory.setdefault(everyone[gi].id, []).append(gi)

        async def generate(keyed: Sequence[tuple[int, Request]]) -> list[Result]:
            return await rc.generate(ctx, [r for _, r in keyed])

        layers = ([g.base + i for i in layer] for layer in g.layers)
        results = await run_waves(layers, request, generate, deliver, prepare=prepare, finish=finish)
        assert report is not None and tester is not None  # L3: the last step holds a tester
        turn_nodes = [g.base + i for i in range(g.n_nodes)]
        edges = record_edges(
            ctx,
            k,
            (
                EdgeUsage(
                    names[src], names[gi], results[src].usage.completion_tokens if src in results else 0
                )
                for gi in turn_nodes
                for src in inbox[gi]
            ),
        )
        roles = [everyone[gi].role for gi in turn_nodes]
        return _TurnRun(report, code, tester, names, turn_nodes, roles, inbox, outputs, results, edges)

    def _agent_request(
        self,
        episode: str,
        task: Task,
        k: int,
        node: Node,
        gi: int,
        inbox: list[int],
        outputs: dict[int, str],
        memory: dict[str, list[int]],
        names: dict[int, str],
        view_text: str,
    ) -> Request:
        parts = _prompts.agent_parts()
        own = [x for x in memory.get(node.id, []) if x not in inbox]
        mem = _outputs_block(parts["memory"], own, outputs, names)
        inputs = _outputs_block(parts["inputs"], inbox, outputs, names, empty="(no output)")
        if node.role in _CODE_ROLES:
            instruction = _prompts.text("code_instruction").format(entry_point=task.entry_point).strip()
        else:
            instruction = parts.get(f"instruction_{node.role}", parts["instruction"]).format(role=node.role)
        user = _prompts.text("agent_user").format(
            problem=task.prompt.strip(), view=view_text, memory=mem, inputs=inputs, instruction=instruction
        )
        return Request.chat(
            _prompts.role_system(node.role, self.settings.retrieval_corpus),
            user,
            sampling=self.settings.sampling(episode, k, names[gi]),
            tags=Tags(round=k, agent=names[gi], role=node.role),
        )

    async def _search_output(self, task: Task, query: str) -> str:
        from ._retrieval import render

        def search() -> str:
            hits = self._search.get().search(
                f"{task.prompt.strip()}\n{query}",
                exclude_id=task.id,
                problem=task.prompt,
                k=self.settings.retrieval_k,
            )
            return render(hits)

        docs = await asyncio.to_thread(search)  # the first search loads the encoder and embeds the corpus
        return f"Query: {query.strip() or '(the problem itself)'}\n\n{docs}"

    @staticmethod
    def _tested_code(
        task: Task, refs: list[int], everyone: list[Node], outputs: dict[int, str]
    ) -> tuple[int | None, str]:
        """The last python block of the highest-step coder or debugger among ``refs`` (spec §9.11; the later
        ref on a tie), or "" when there is none."""
        best: int | None = None
        for gi in refs:
            n = everyone[gi]
            if n.role in _CODE_ROLES and (
                best is None or (n.turn, n.step) >= (everyone[best].turn, everyone[best].step)
            ):
                best = gi
        if best is None:
            return None, ""
        return best, extract_code(outputs.get(best, ""), task.entry_point) or ""

    # ------------------------------------------------------------------------------------------ records

    def _record(
        self,
        episode: str,
        task: Task,
        k: int,
        turn: ConductorTurn,
        executed: tuple[TurnGraph, _TurnRun, Stats] | None,
        rc: Clock,
    ) -> RoundRecord:
        """The turn's trace record: the orchestrator, the plan and its check, and for an executed plan its
        layers, edges, messages, tester and density."""
        usage = Usage.of([("orchestrator", turn.orchestrator)])
        if executed is None:
            return RoundRecord(
                method=self.name,
                episode=episode,
                task=task.id,
                round=k,
                graph=Graph([], []),
                usage=usage,
                timing=rc.timing(),
                extra=turn.to_json(),
            )
        g, run, stats = executed
        names = run.names
        level_of = {i: li for li, layer in enumerate(g.layers) for i in layer}
        edges = g.edges()
        return RoundRecord(
            method=self.name,
            episode=episode,
            task=task.id,
            round=k,
            graph=Graph(
                agents=[names[gi] for gi in run.nodes],
                roles=list(run.roles),
                edges=[Edge(names[a], names[b], None, kind) for a, b, kind in edges],
                order=[names[g.base + i] for layer in g.layers for i in layer],
                levels=[level_of[i] for i in range(g.n_nodes)],
                is_dag=True,
                inbox={names[gi]: [names[x] for x in run.inbox[gi]] for gi in run.nodes},
            ),
            messages={
                names[gi]: Message.of(run.outputs.get(gi, ""), parse_error=call_error(run.results.get(gi)))
                for gi in run.nodes
            },
            usage=Usage(
                {**usage.agents, **{names[gi]: CallUsage.of(r) for gi, r in sorted(run.results.items())}},
                run.edges,
            ),
            stats=stats,
            timing=rc.timing(),
            extra=turn.to_json()
            | {
                "steps": list(g.steps),
                "layers": [[names[g.base + i] for i in layer] for layer in g.layers],
                "tester": run.tester,
                "density": {
                    "nodes": g.n_nodes,
                    "edges": g.n_edges,
                    "steps": g.n_steps,
                    "depth": g.depth,
                    "s_complex": round(float(turn.reward.s_complex[0]), 6) if turn.reward else None,
                },
            },
        )


@dataclass(frozen=True)
class ConductorTurn:
    """What every turn's record holds beyond the graph: the difficulty, the orchestrator's call, the plan's
    check, and (once known) the verdicts, the reward and the return so far; ``grammar`` names the plan grammar
    sent with the orchestrator's request (None: none was)."""

    level: str
    level_source: str
    n_max: int
    request: Request
    orchestrator: Result
    check: TopologyCheck
    verdict: str | None = None
    reward_verdict: str | None = None
    reward: TurnRewards | None = None
    return_so_far: float = 0.0
    grammar: str | None = None

    def to_json(self) -> dict[str, Any]:
        got, chk, r = self.orchestrator, self.check, self.reward
        out: dict[str, Any] = {
            "level": self.level,
            "level_source": self.level_source,
            "n_max": self.n_max,
            "orchestrator": {
                "text": clip(got.text),
                "usage": CallUsage.of(got).to_json(),
                "error": call_error(got),
                "guided": self.request.regex is not None,
                "grammar": self.grammar,
                "prompt": [[m.role, m.content] for m in self.request.messages],
            },
            "yaml": chk.yaml,
            "check": {
                "error": chk.tag,
                "message": chk.message,
                "warnings": list(chk.graph.warnings) if chk.graph is not None else [],
            },
        }
        if self.verdict is not None:
            out.update(verdict=self.verdict, reward_verdict=self.reward_verdict)
        if r is not None:
            out["reward"] = {
                "r_e": round(float(r.r_e[0]), 6),
                "r_g": round(float(r.r_g[0]), 6),
                "r": round(float(r.r[0]), 6),
            }
        out["return_so_far"] = round(self.return_so_far, 6)
        return out


@dataclass(frozen=True)
class _TurnRun:
    """An executed turn: the tester's report and the code it ran, its trace block, the node names (global
    index -> name), the turn's nodes and their roles, each node's inbox, every output so far, the LLM results by node and
    the routed edges."""

    report: TestReport
    code: str
    tester: dict[str, Any]
    names: dict[int, str]
    nodes: list[int]
    roles: list[str]
    inbox: dict[int, list[int]]
    outputs: dict[int, str]
    results: dict[int, Result]
    edges: list[EdgeUsage]


class _SearchSlot:
    """The searcher's retriever, made on first use (the encoder loaded, the named corpus built or read from the
    cache, its embeddings kept there) and shared by the methods :meth:`Conductor.with_settings` derives."""

    def __init__(self, retriever: Retriever | None, encoder: Encoder | None, corpus: str) -> None:
        self._retriever = retriever
        self.encoder = encoder
        self.corpus = corpus
        self._lock = threading.Lock()

    def get(self) -> Retriever:
        with self._lock:
            if self._retriever is None:
                from ..._cache import cache_root
                from ._retrieval import Retriever, corpus_named

                if self.encoder is None:
                    from ...embed import Encoder

                    self.encoder = Encoder.default()
                self._retriever = Retriever(
                    self.encoder, corpus_named(self.corpus), index_dir=cache_root() / "retrieval"
                )
            return self._retriever


def _name(node: Node, turn: int) -> str:
    """A node's name in the traces: ``coder@4`` (id and step), prefixed ``t1:`` for an earlier turn's node."""
    return f"{node.id}@{node.step}" if node.turn == turn else f"t{node.turn + 1}:{node.id}@{node.step}"


def _outputs_block(
    heading: str, nodes: list[int], outputs: dict[int, str], names: dict[int, str], empty: str = ""
) -> str:
    """Agents' outputs under ``heading``, each labelled by its node name ("" when there are none)."""
    if not nodes:
        return ""
    body = "\n\n".join(f"[{names[x]}]\n{outputs.get(x, '') or empty}" for x in nodes)
    return f"\n{heading}\n{body}\n"


def _tester_output(report: TestReport, code: str) -> str:
    counts = f" ({report.passed}/{report.total} passed)" if report.total else ""
    body = f"```python\n{code}```" if code else "(no code to test)"
    return f"Status: {report.verdict}\nTests: {report.tests}{counts}\n{report.logs}\nCode tested:\n{body}"


def _with_newline(text: str) -> str:
    return text if text.endswith("\n") else text + "\n"


def _graph_stats(g: TurnGraph) -> Stats:
    """Edge count (cross-turn refs included) and the density of the turn's intra-turn graph."""
    n = g.n_nodes
    adj = np.zeros((n, n), dtype=bool)
    for i, (refs, cross) in enumerate(zip(g.refs, g.cross)):
        for src, c in zip(refs, cross):
            if not c:
                adj[src - g.base, i] = True
    return Stats.of(ops.graph_stats(adj), edges=g.n_edges, intra=True)


def _orchestrator_checkpoint(spec: str | None) -> OrchestratorCheckpoint | None:
    """The training record of the orchestrator ``spec`` names, when it is a local folder holding one."""
    if not spec:
        return None
    from ...llm.routed import parse_engine_spec

    model = parse_engine_spec(spec, "orchestrator").model
    folder = Path(model).expanduser()
    return OrchestratorCheckpoint.load(folder) if folder.is_dir() else None
