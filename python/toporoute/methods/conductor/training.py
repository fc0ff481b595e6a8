"""Training hooks for AgentConductor (methods/agentconductor.md §4.5, §4.6, §9.15): a reward function for GRPO
trainers, a rollout collector that runs groups of full trajectories and scores them, and an SFT data builder.

Training itself happens in an existing trainer:

- TRL's ``GRPOTrainer(reward_funcs=[PlanReward()], ...)`` scores plans: the error-class penalty or, for a
  valid plan, the density term plus the execution reward when a ``verdict`` column (or ``verdict_fn``) is
  given. A later turn's plan is checked in its context, given by the ``turn`` and ``earlier_agents`` columns
  (the rows of :func:`collect_rollouts` carry them). Plans are checked in one batch in the compiled core.
- :func:`collect_rollouts` runs G trajectories per task through the real loop (orchestrator, role agents,
  sandbox) and writes ``rollouts.jsonl``: per trajectory the turns with their prompt, plan, feedback, rewards,
  the return and the group-normalised advantage, plus ``segments`` laid out as §9.15 (prompt, plan 1,
  feedback 1, plan 2) with ``train`` set on the plan tokens only.
- :func:`sft_records` filters recorded turns into chat-format SFT examples: valid, de-duplicated by canonical
  form, density within a band, and (by default) passing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import ops
from ..._atomic import write_bytes_atomic
from ...errors import InvalidArgumentError
from ...types.conductor_topology import CheckOptions, Context, Node, TurnGraph
from .reward import CAPS, RewardConfig, TurnRewards, grpo_advantages, trajectory_return, turn_rewards
from .settings import LEVELS_BY_LABEL

if TYPE_CHECKING:
    from ...llm.base import Engine
    from ...tasks import Task
    from .method import Conductor

__all__ = [
    "PlanReward",
    "PlanTerms",
    "agents_json",
    "canonical_form",
    "collect_rollouts",
    "context_of",
    "load_rollouts",
    "plan_summary",
    "sft_records",
    "write_jsonl",
]


def _completion_text(c: Any) -> str:
    """TRL passes plain strings, or conversations (lists of ``{"role", "content"}``): the last message's text."""
    if isinstance(c, str):
        return c
    if isinstance(c, Sequence) and c and isinstance(c[-1], Mapping):
        return str(c[-1].get("content", ""))
    raise InvalidArgumentError(
        f"completions must be strings or message lists; got {type(c).__name__}", "completions"
    )


def agents_json(nodes: Iterable[Node]) -> list[dict[str, Any]]:
    """Agents as the ``earlier_agents`` column holds them: ``{"id", "role", "step", "turn"}`` per agent."""
    return [{"id": n.id, "role": n.role, "step": n.step, "turn": n.turn} for n in nodes]


def context_of(turn: int, earlier_agents: Iterable[Node | Mapping[str, Any]] = ()) -> Context:
    """The :class:`~toporoute.types.conductor_topology.Context` a plan of turn ``turn`` (0-based) is checked in:
    the agents of the earlier turns' valid plans, in order, as Nodes or as :func:`agents_json` gives them."""
    if not isinstance(turn, (int, np.integer)) or isinstance(turn, bool):
        raise InvalidArgumentError(f"turn must be an int; got {type(turn).__name__}", "turn")
    nodes = []
    for i, a in enumerate(earlier_agents):
        if isinstance(a, Node):
            nodes.append(a)
            continue
        try:
            nodes.append(Node(str(a["id"]), str(a["role"]), int(a["step"]), int(a["turn"])))
        except (KeyError, TypeError, ValueError):
            raise InvalidArgumentError(
                f"earlier_agents[{i}] must be a Node or a mapping with id, role, step and turn; got {a!r}",
                "earlier_agents",
            ) from None
    return Context(int(turn), tuple(nodes))


class PlanReward:
    """A reward function with TRL's ``reward_funcs`` signature: ``f(prompts, completions, **columns) ->
    list[float]``.

    Columns (TRL passes the dataset's columns as keyword arguments): ``level`` (or ``difficulty``); ``verdict``;
    ``turn`` (or ``round``), the 0-based turn each plan was written for (default 0), and ``earlier_agents``, the
    agents of the earlier turns' valid plans (see :func:`context_of`; default none). A later turn's plan is
    checked in that context, as the loop checks it: its first step may ref earlier agents (L1 holds in the
    first turn only), refs resolve across turns, and a debugger may follow an earlier turn's coder.

    Parameters
    ----------
    options : CheckOptions, optional
    reward : RewardConfig, optional
    default_level : str
        Level of rows without a ``level`` (or ``difficulty``) column.
    verdict_fn : callable, optional
        ``verdict_fn(index, graph, columns) -> verdict`` executes a valid plan (e.g. with
        :class:`~toporoute.methods.conductor.Conductor` on an engine) and returns its verdict class. Without it
        a ``verdict`` column is used when present, else valid plans get r_e = 0 (structure and density only).
    execute : callable, optional
        The batched form: ``execute(indices, plans, columns) -> verdicts`` runs the valid plans of a batch (their
        row indices and completion texts; ``columns`` as TRL passes them) together and returns one verdict per
        plan (:class:`~toporoute.methods.conductor.train.PlanExecutor` runs them through the real loop).
        Takes precedence over ``verdict_fn``.
    """

    __name__ = "conductor_plan_reward"

    def __init__(
        self,
        *,
        options: CheckOptions | None = None,
        reward: RewardConfig | None = None,
        default_level: str = "easy",
        verdict_fn: Callable[[int, TurnGraph, Mapping[str, Any]], str] | None = None,
        execute: Callable[[Sequence[int], Sequence[str], Mapping[str, Any]], Sequence[str]] | None = None,
    ) -> None:
        if default_level not in CAPS:
            raise InvalidArgumentError(
                f"default_level must be one of {tuple(CAPS)}; got {default_level!r}", "default_level"
            )
        self.options = options or CheckOptions()
        self.reward = reward or RewardConfig()
        self.default_level = default_level
        self.verdict_fn = verdict_fn
        self.execute = execute

    def __call__(self, prompts: Any = None, completions: Sequence[Any] = (), **columns: Any) -> list[float]:
        return [float(x) for x in self.terms(completions, **columns).rewards.r]

    def terms(self, completions: Sequence[Any], **columns: Any) -> PlanTerms:
        """The checks and the reward terms of a batch (``r_e``, ``r_g``, ``r`` per completion), as
        :meth:`__call__` sums them; the GRPO trainer logs them per component."""
        texts = [_completion_text(c) for c in completions]
        n = len(texts)

        def column(name: str) -> list[Any] | None:
            value = columns.get(name)
            if value is None:
                return None
            value = list(value)
            if len(value) != n:
                raise InvalidArgumentError(f"column {name!r} has {len(value)} rows for {n} completions", name)
            return value

        turns = column("turn") or column("round") or [0] * n
        earlier = column("earlier_agents") or [()] * n
        contexts = []
        for i, (t, agents) in enumerate(zip(turns, earlier)):
            try:
                contexts.append(context_of(t, agents or ()))
            except InvalidArgumentError as exc:
                raise InvalidArgumentError(f"row {i}: {exc}", exc.arg or "earlier_agents") from None
        batch = ops.conductor_check(texts, context=contexts, options=self.options)

        levels = column("level") or column("difficulty") or [self.default_level] * n
        caps = []
        for i, lv in enumerate(levels):
            key = LEVELS_BY_LABEL.get(str(lv).strip().lower())
            if key is None:
                raise InvalidArgumentError(f"row {i}: unknown level {lv!r}", "level")
            caps.append(CAPS[key])
        verdicts: list[str | None] = [None] * n
        given = column("verdict")
        valid = np.flatnonzero(batch.ok).tolist()
        if self.execute is not None and valid:
            ran = list(self.execute(valid, [texts[i] for i in valid], columns))
            if len(ran) != len(valid):
                raise InvalidArgumentError(
                    f"execute returned {len(ran)} verdicts for {len(valid)} plans", "execute"
                )
            for i, v in zip(valid, ran):
                verdicts[i] = v
            valid = []
        for i in valid:
            if self.verdict_fn is not None:
                row = {
                    k: (v[i] if isinstance(v, Sequence) and len(v) == n else v) for k, v in columns.items()
                }
                graph = batch.item(int(i)).graph
                assert graph is not None
                verdicts[i] = self.verdict_fn(int(i), graph, row)
            elif given is not None:
                verdicts[i] = given[i]
        r = turn_rewards(batch.error, verdicts, batch.nodes, batch.edges, batch.steps, caps, self.reward)
        return PlanTerms(batch, r, verdicts)


@dataclass(frozen=True)
class PlanTerms:
    """A batch of plans as :meth:`PlanReward.terms` scores them: ``check`` (``ops.conductor_check``'s batch:
    ``ok``, ``error``, ``nodes``, ...), ``rewards`` (``r_e``, ``r_g``, ``r``, ``s_complex`` per plan) and the
    ``verdicts`` of the plans that ran (None elsewhere)."""

    check: Any
    rewards: TurnRewards
    verdicts: list[str | None]


def canonical_form(graph: TurnGraph, context: Context | None = None) -> str:
    """A text that two plans share exactly when they are the same layered DAG up to step numbering and the order
    of agents within a step (de-duplication of SFT data)."""
    context = context or Context(graph.turn)
    everyone = list(context.nodes) + list(graph.nodes)
    rank = {g: li for li, layer in enumerate(graph.layers) for g in (graph.base + i for i in layer)}

    def ref(src: int) -> str:
        n = everyone[src] if src < len(everyone) else None
        where = f"L{rank[src]}" if src in rank else "prev"
        return f"{n.id if n else src}@{where}"

    layers = []
    for layer in graph.layers:
        agents = sorted(
            f"{graph.nodes[i].id}<-[{','.join(sorted(ref(s) for s in graph.refs[i]))}]" for i in layer
        )
        layers.append(";".join(agents))
    return " | ".join(layers)


def write_jsonl(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Writes ``rows`` as JSON lines, atomically."""
    path = Path(path)
    write_bytes_atomic(path, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows).encode("utf-8"))
    return path


def load_rollouts(run_dir: str | Path) -> list[dict[str, Any]]:
    """Trajectories of a conductor method folder (``RUN_DIR/conductor`` or one group member's folder): one dict
    per episode with its turns (from the trace) and its episode record."""
    from ...trace.reader import load_run

    run = load_run(run_dir).methods[0]
    out = []
    for ep in run.episodes:
        if ep.status != "ok":
            continue
        rec = ep.record
        info = rec.extra.get("conductor") if rec is not None else None
        if rec is None or not info:
            raise InvalidArgumentError(
                f"{run_dir}: episode {ep.episode} is not a conductor episode", "run_dir"
            )
        out.append(
            {
                "episode": ep.episode,
                "task": rec.task,
                "level": info["level"],
                "n_max": info["n_max"],
                "passed": rec.passed,
                "turns": [r.to_json() for r in run.traces.get(ep.episode, [])],
                "rewards": info["rewards"],
                "return": info["return"],
            }
        )
    return out


def plan_summary(run_dir: str | Path) -> dict[str, Any]:
    """How the orchestrator of a conductor run did: ``episodes``; ``valid_first`` and ``valid_turns``, the share
    of valid plans among first turns and among all turns (the paper's "valid topology" rate, over-cap plans
    counted valid here; ``over_cap`` gives their share of the valid ones); ``mean_return`` (the episodes'
    return under the run's ``return_mode``) and ``mean_first_reward`` (r of the first turn); ``passed`` (the
    share of episodes whose answer passed the hidden tests)."""
    rows = load_rollouts(run_dir)
    if not rows:
        raise InvalidArgumentError(f"{run_dir}: no finished conductor episode", "run_dir")
    first, every, over = [], [], []
    for row in rows:
        for t in row["turns"]:
            ok = (t.get("check") or {}).get("error") is None
            every.append(ok)
            if t.get("round", 0) == 0:
                first.append(ok)
            if ok:
                over.append(((t.get("reward") or {}).get("r_g") or 0.0) < 0)
    return {
        "episodes": len(rows),
        "valid_first": float(np.mean(first)) if first else 0.0,
        "valid_turns": float(np.mean(every)) if every else 0.0,
        "over_cap": float(np.mean(over)) if over else 0.0,
        "mean_return": float(np.mean([r["return"] for r in rows])),
        "mean_first_reward": float(np.mean([r["rewards"][0] for r in rows if r["rewards"]])),
        "passed": float(np.mean([bool(r["passed"]) for r in rows])),
    }


def _segments(turns: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """§9.15: the first prompt, then per turn the plan (trained) and the feedback the next prompt adds."""
    segs: list[dict[str, Any]] = []
    for k, t in enumerate(turns):
        orch = t.get("orchestrator") or {}
        if k == 0:
            segs.append({"text": _prompt_text(orch.get("prompt")), "train": False})
        segs.append({"text": orch.get("text", ""), "train": True})
        if k + 1 < len(turns):
            check = t.get("check") or {}
            feedback = check.get("error") or t.get("verdict") or ""
            logs = check.get("message") or (t.get("tester") or {}).get("logs") or ""
            segs.append({"text": f"{feedback}\n{logs}".strip(), "train": False})
    return segs


def _prompt_text(messages: Any) -> str:
    if not messages:
        return ""
    return "\n\n".join(
        str(m[1]) if isinstance(m, (list, tuple)) else str(m.get("content", "")) for m in messages
    )


async def collect_rollouts(
    method: Conductor,
    tasks: Sequence[Task],
    engine: Engine,
    out_dir: str | Path,
    *,
    group_size: int = 8,
    concurrency: int = 16,
    progress: bool = True,
) -> list[dict[str, Any]]:
    """Runs ``group_size`` trajectories per task (member g uses seed ``settings.seed + g``) and writes
    ``out_dir/rollouts.jsonl``; returns its rows.

    Each member is an ordinary harness run in ``out_dir/g<g>`` (traces, episodes, resumable). A row holds the
    task, the member, the turns (prompt, plan, error class, verdict, r_e, r_g, r), the return under the method's
    ``return_mode``, the GRPO advantage within the task's group and the §9.15 ``segments``. Each turn also holds
    ``earlier_agents``: with its ``round`` the context :class:`PlanReward` checks its plan in.
    """
    from ..harness import run_method

    if group_size < 2:
        raise InvalidArgumentError(
            f"group_size must be >= 2 (GRPO normalises within a group); got {group_size}", "group_size"
        )
    out = Path(out_dir)
    by_task: dict[str, list[dict[str, Any] | None]] = {t.id: [None] * group_size for t in tasks}
    for g in range(group_size):
        member = method.with_settings(seed=method.settings.seed + g)
        folder = out / f"g{g}"
        await run_method(
            member,
            tasks,
            engine,
            folder,
            info={"group_member": g},
            concurrency=concurrency,
            progress=progress,
        )
        for row in load_rollouts(folder):
            if row["task"] in by_task:
                by_task[row["task"]][g] = row
    rows = []
    config = method.settings.reward
    for task_id, members in by_task.items():
        done = [m for m in members if m is not None]
        if len(done) < 2:
            continue
        returns = np.array([[trajectory_return(m["rewards"], config) for m in done]])
        adv = grpo_advantages(returns)[0]
        for g, (m, a) in enumerate(zip(done, adv)):
            rows.append(
                {
                    "task": task_id,
                    "member": g,
                    "level": m["level"],
                    "turns": _turn_rows(m["turns"]),
                    "return": float(returns[0, g]),
                    "advantage": float(a),
                    "passed": m["passed"],
                    "segments": _segments(m["turns"]),
                }
            )
    write_jsonl(out / "rollouts.jsonl", rows)
    return rows


def _turn_rows(turns: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A trajectory's turns as rollout rows, each with the ``earlier_agents`` its plan was checked against."""
    rows = []
    earlier: list[Node] = []
    for t in turns:
        rows.append(_turn_row(t) | {"earlier_agents": agents_json(earlier)})
        if (t.get("check") or {}).get("error") is None:  # a valid plan's agents (named <id>@<step>) join
            for name, role in zip(t.get("agents") or (), t.get("roles") or ()):
                aid, _, step = str(name).rpartition("@")
                earlier.append(Node(aid, str(role), int(step), int(t.get("round", 0))))
    return rows


def _turn_row(t: Mapping[str, Any]) -> dict[str, Any]:
    orch = t.get("orchestrator") or {}
    check = t.get("check") or {}
    return {
        "round": t.get("round", 0),
        "prompt": orch.get("prompt"),
        "plan": orch.get("text", ""),
        "yaml": t.get("yaml"),
        "error": check.get("error"),
        "verdict": t.get("reward_verdict"),
        "feedback": t.get("verdict"),
        "density": t.get("density"),
        "reward": t.get("reward"),
    }


def sft_records(
    turns: Iterable[Mapping[str, Any]],
    *,
    options: CheckOptions | None = None,
    require_pass: bool = True,
    density_band: tuple[float, float] | None = None,
    first_turn_only: bool = False,
) -> list[dict[str, Any]]:
    """Chat-format SFT examples (``{"messages": [...], "meta": {...}}``) from recorded turns.

    ``turns`` are trace records of conductor runs (or the ``turns`` of :func:`collect_rollouts` rows, which carry
    ``prompt``/``plan``). A turn is kept when its plan re-checks valid (the compiled core, in one batch; only
    first turns re-check, later ones are kept when their recorded check was valid), its S_complex lies within
    ``density_band`` (when given), its verdict is PASSED (``require_pass``), and its canonical form was not seen
    before.
    """
    options = options or CheckOptions()
    rows = []
    for t in turns:
        orch = t.get("orchestrator") or {}
        prompt = t.get("prompt", orch.get("prompt"))
        plan = t.get("plan", orch.get("text"))
        if not prompt or plan is None:
            continue
        turn = int(t.get("round", 0))
        if first_turn_only and turn > 0:
            continue
        verdict = t.get("verdict") if "plan" in t else t.get("reward_verdict")
        error = t["error"] if "error" in t else (t.get("check") or {}).get("error")
        rows.append((prompt, plan, turn, verdict, (t.get("density") or {}).get("s_complex"), error))
    if not rows:
        return []
    first = [i for i, r in enumerate(rows) if r[2] == 0]
    batch = ops.conductor_check([rows[i][1] for i in first], options=options)
    recheck = {i: batch.item(j) for j, i in enumerate(first)}
    seen: set[str] = set()
    out = []
    for i, (prompt, plan, turn, verdict, s_complex, error) in enumerate(rows):
        if i in recheck:
            chk = recheck[i]
            if not chk.ok:
                continue
            assert chk.graph is not None
            key = canonical_form(chk.graph)
            yaml_text = chk.yaml
        else:
            if error is not None:
                continue
            key = f"turn{turn}:{plan}"
            yaml_text = plan
        if require_pass and verdict != "PASSED":
            continue
        if density_band is not None and (
            s_complex is None or not density_band[0] <= s_complex <= density_band[1]
        ):
            continue
        if key in seen:
            continue
        seen.add(key)
        messages = [
            {"role": m[0], "content": m[1]} if isinstance(m, (list, tuple)) else dict(m) for m in prompt
        ]
        messages.append(
            {
                "role": "assistant",
                "content": f"```yaml\n{yaml_text.rstrip()}\n```"
                if yaml_text and not yaml_text.startswith("```")
                else plan,
            }
        )
        out.append({"messages": messages, "meta": {"turn": turn, "verdict": verdict, "s_complex": s_complex}})
    return out
