"""Training AgentConductor's orchestrator with GRPO (spec §4.5) on TRL's ``GRPOTrainer``, after an optional SFT
warm start on TRL's ``SFTTrainer`` (spec §4.6).

The prompts are the orchestrator's real first-turn prompts for the training tasks (what
:meth:`Conductor.orchestrator_request` sends); each step samples ``group_size`` plans per task and scores them
with :class:`~toporoute.methods.conductor.train_rewards.PlanScorer`: the check's penalty (``validity``), the
density term (``density``) and, unless ``--reward validity,density``, the hidden tests' verdict of the plan run by
the real loop with its role agents on the training task (``execution``; :class:`PlanExecutor`). Only the plan
tokens are trained (the completion); the KL to the starting model is TRL's k3 estimator.

Output folder::

    OUT/train.json              settings (a resumed run must use the same ones; more --steps may be asked for)
    OUT/orchestrator/           the trained orchestrator: a Hugging Face model folder (LoRA merged) that vLLM loads,
                                with toporoute-orchestrator.json (base model, steps, training task ids, rewards);
                                use it with 'toporoute run conductor --orchestrator OUT/orchestrator'
    OUT/trl/checkpoint-N/       TRL's resumable checkpoints (every --save-every steps and the last)
    OUT/sft/                    the SFT warm start (its data, TRL's output and the model GRPO starts from)
    OUT/exec/                   the executed plans' episodes and traces (execution reward)
    OUT/log.jsonl               one line per step: reward and its components, validity rate, KL, loss, ...
    OUT/figures/*.png           learning curves; OUT/report.html shows them with the table per step

Rerunning the command resumes from the last checkpoint (the log is cut back to it).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from ..._atomic import write_bytes_atomic, write_json_atomic
from ..._runlock import RunLock
from ...errors import InvalidArgumentError, ToporouteError
from ...llm.types import Result
from ...tasks import Task
from ..harness import check_resume, versions
from .checkpoint import OrchestratorCheckpoint
from .method import Conductor
from .settings import ConductorSettings
from .train_config import GRPOConfig
from .train_rewards import PlanScorer
from .training import PlanReward, sft_records

__all__ = ["ConductorTrainer", "PlanExecutor", "synthesise_plans"]

_KEEP = ("tasks", "task_ids", "model", "settings", "train", "engine")
_ROLES_BEFORE_CODE = ("planner", "searcher", "algorithmer")


class PlanExecutor:
    """Runs a batch of first-turn plans through the real AgentConductor loop (role agents on ``engine``, the
    tester in the sandbox) on their training tasks and returns the hidden tests' verdict of each: the
    ``execute`` of :class:`~toporoute.methods.conductor.training.PlanReward`.

    It is called from TRL's training thread; the episodes run on ``loop`` (the event loop that owns the
    engine), all plans of a batch at once, and are written to ``out_dir`` (episodes and traces), one episode
    per step, row and task.
    """

    def __init__(
        self,
        method: Conductor,
        tasks: Sequence[Task],
        engine: Any,
        loop: asyncio.AbstractEventLoop,
        out_dir: str | Path,
        *,
        concurrency: int = 16,
    ) -> None:
        self.method = _GivenPlan(replace(method.settings, max_turns=1), name="conductor-train")
        self.method._search = method._search  # the searcher's corpus is embedded once
        self.tasks = {t.id: t for t in tasks}
        self.engine = engine
        self.loop = loop
        self.out = Path(out_dir)
        self.concurrency = concurrency

    def __call__(self, indices: Sequence[int], plans: Sequence[str], columns: Mapping[str, Any]) -> list[str]:
        ids = columns.get("task_id")
        if ids is None:
            raise InvalidArgumentError("execution needs the dataset's task_id column", "task_id")
        state = columns.get("trainer_state")
        step = int(getattr(state, "global_step", 0) or 0)
        runs = []
        for i, plan in zip(indices, plans):
            task = self.tasks.get(str(ids[i]))
            if task is None:
                raise InvalidArgumentError(f"task {ids[i]!r} is not a training task", "task_id")
            runs.append((f"s{step:05d}-r{i:03d}-{task.episode_id}", task, plan))
        future = asyncio.run_coroutine_threadsafe(self._run(runs), self.loop)
        return future.result()

    async def _run(self, runs: Sequence[tuple[str, Task, str]]) -> list[str]:
        from ...runtime import Runtime
        from ...trace.writer import TraceWriter

        method = self.method
        for episode, _, plan in runs:
            method.plans[episode] = plan

        def episode_fn(task: Task) -> Any:
            async def fn(ctx: Any) -> dict[str, Any]:
                verdicts: list[str | None] = []
                with TraceWriter(self.out / "traces" / f"{ctx.episode}.jsonl") as trace:

                    def emit(record: Any) -> None:
                        verdicts.append(record.extra.get("reward_verdict"))
                        trace.write(record)

                    await method.episode(ctx, task, emit)
                return {"task": task.id, "verdict": verdicts[0] if verdicts else None}

            return fn

        summary = await Runtime(
            self.engine, concurrency=self.concurrency, out_dir=self.out, progress=False
        ).run([(episode, episode_fn(task)) for episode, task, _ in runs])
        out = []
        for outcome in summary.outcomes:
            verdict = (outcome.record or {}).get("verdict")
            if outcome.status == "error" or verdict is None:
                raise ToporouteError(
                    f"executing plan {outcome.episode} failed: {(outcome.error or 'no verdict').strip()[-400:]}"
                )
            out.append(str(verdict))
        for episode, _, _ in runs:
            method.plans.pop(episode, None)
        return out


class _GivenPlan(Conductor):
    """The loop whose first turn runs a given plan (by episode id) instead of asking the orchestrator."""

    def __init__(self, settings: ConductorSettings, *, name: str) -> None:
        super().__init__(settings, name=name)
        self.plans: dict[str, str] = {}

    async def _plan(self, ctx: Any, rc: Any, task: Task, k: int, request: Any) -> Result:
        if k == 0:
            return Result(self.plans[ctx.episode], tags=request.tags)
        return await super()._plan(ctx, rc, task, k, request)


def synthesise_plans(
    tasks: Sequence[Task], settings: ConductorSettings, per_task: int, seed: int = 0
) -> list[dict[str, Any]]:
    """SFT examples from the plan grammar: for each task ``per_task`` valid first-turn plans within its
    difficulty cap (sources from planner/searcher/algorithmer in 1-2 steps, a coder, sometimes a debugger, the
    tester last), each checked by ``ops.conductor_check``; prompt-completion rows in chat form."""
    from ... import ops
    from .reward import CAPS

    rng = np.random.default_rng(seed)
    method = Conductor(settings)
    rows = []
    for task in tasks:
        level, _ = settings.level_of(task)
        cap = CAPS[level]
        request = method.orchestrator_request(task)
        prompt = [{"role": m.role, "content": m.content} for m in request.messages]
        plans: list[str] = []
        for _ in range(per_task * 20):
            if len(plans) >= per_task:
                break
            plan = _random_plan(rng, cap)
            if plan in plans:
                continue
            chk = ops.conductor_check(plan, options=settings.check_options).item(0)
            if chk.ok and chk.graph is not None and chk.graph.n_nodes <= cap:
                plans.append(plan)
        rows += [
            {"prompt": prompt, "completion": [{"role": "assistant", "content": p}], "task_id": task.id}
            for p in plans
        ]
    return rows


def _random_plan(rng: np.random.Generator, cap: int) -> str:
    """A layered plan of at most ``cap`` agents in the prompt's layout."""
    n = int(rng.integers(2, cap + 1))
    debugger = n >= 4 and rng.random() < 0.3
    before = n - 2 - int(debugger)
    counts: dict[str, int] = {}

    def token(role: str) -> str:
        counts[role] = counts.get(role, 0) + 1
        return f"<{role}>" if counts[role] == 1 else f"<{role}_{counts[role]}>"

    pool = _ROLES_BEFORE_CODE
    roles = [str(r) for r in rng.choice(pool, size=before, replace=before > len(pool))] if before else []
    layers: list[list[str]] = []
    if roles:
        cut = int(rng.integers(1, len(roles) + 1)) if len(roles) > 1 and rng.random() < 0.5 else len(roles)
        layers = [x for x in ([token(r) for r in roles[:cut]], [token(r) for r in roles[cut:]]) if x]
    layers.append([token("coder")])
    if debugger:
        layers.append([token("debugger")])
    layers.append([token("tester")])
    out = ["```yaml"]
    for s, layer in enumerate(layers):
        out += [f"- step: {s + 1}", "  agents:"]
        for agent in layer:
            if s == 0:
                refs: list[str] = []
            elif agent.startswith("<tester"):
                refs = [layers[s - 1][-1]]
            else:
                refs = list(layers[s - 1])
            out += [f"    - agent: {agent}", f"      ref: [{', '.join(refs)}]"]
    out.append("```")
    return "\n".join(out)


class ConductorTrainer:
    """Trains the orchestrator into ``out_dir`` (resuming what is there).

    Parameters
    ----------
    tasks : sequence of Task
        The training tasks (code tasks with an entry point); their ids go into the checkpoint.
    out_dir : path
    model : str, optional
        The model to train: a Hugging Face folder or hub id (default: the embedded SmolLM2-135M-Instruct).
    settings : ConductorSettings, optional
        The loop whose prompts are trained and whose reward scores them (difficulty caps, density mode, weights);
        also the loop that executes plans.
    train : GRPOConfig, optional
    engine : Engine, optional
        The role agents' engine, needed by the ``execution`` component.
    loop : asyncio event loop, optional
        The loop ``engine`` runs on (the trainer runs in another thread).
    info : dict, optional
        Recorded in train.json (``tasks`` spec, ``engine``, ``model``).
    progress : bool
        TRL's progress bar and a line per step on stderr.
    lock : RunLock, optional
        The folder's lock when the caller took it already.
    """

    def __init__(
        self,
        tasks: Sequence[Task],
        out_dir: str | Path,
        *,
        model: str | None = None,
        settings: ConductorSettings | None = None,
        train: GRPOConfig | None = None,
        engine: Any = None,
        loop: asyncio.AbstractEventLoop | None = None,
        info: Mapping[str, Any] | None = None,
        progress: bool = True,
        lock: RunLock | None = None,
    ) -> None:
        if not tasks:
            raise InvalidArgumentError("training needs at least one task", "tasks")
        bad = next((t for t in tasks if t.kind != "code" or not t.entry_point), None)
        if bad is not None:
            raise InvalidArgumentError(
                f"task {bad.id!r}: the orchestrator trains on code tasks with an entry point", "tasks"
            )
        self.tasks = list(tasks)
        self.out = Path(out_dir)
        self.model = model
        self.settings = settings or ConductorSettings()
        if self.settings.orchestrator is not None:
            raise InvalidArgumentError(
                "training trains the model given by --model; --orchestrator is for 'toporoute run conductor'",
                "orchestrator",
            )
        self.train = train or GRPOConfig()
        if "execution" in self.train.components and (engine is None or loop is None):
            raise InvalidArgumentError(
                "the execution reward runs the role agents: it needs an engine and its event loop "
                "(or --reward validity,density)",
                "engine",
            )
        self.engine = engine
        self.loop = loop
        self.info = dict(info or {})
        self.progress = progress
        self.lock = lock or RunLock(out_dir, what="a training run")
        self.method = Conductor(self.settings, name="conductor-train")
        self.log: list[dict[str, Any]] = []
        self.precision = ""

    # ------------------------------------------------------------------ files

    def _config(self, model_dir: str) -> dict[str, Any]:
        return {
            "v": 1,
            "tasks": self.info.get("tasks"),
            "task_ids": [t.id for t in self.tasks],
            "model": self.model or "embedded",
            "model_dir": model_dir,
            "settings": self.settings.params(),
            # more steps may be asked for when resuming; every other setting must match
            "train": {k: v for k, v in asdict(self.train).items() if k != "steps"},
            "steps": self.train.steps,
            "engine": self.info.get("engine") if "execution" in self.train.components else None,
            **{k: self.info[k] for k in ("role_model", "dtype", "dtype_reason") if k in self.info},
        }

    def _write_log(self) -> None:
        write_bytes_atomic(
            self.out / "log.jsonl", "".join(json.dumps(e) + "\n" for e in self.log).encode("utf-8")
        )

    def _read_log(self, upto: int) -> list[dict[str, Any]]:
        path = self.out / "log.jsonl"
        if not path.is_file():
            return []
        rows = []
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict) and int(row.get("step", 0)) <= upto:
                rows.append(row)
        return rows

    # ------------------------------------------------------------------ data

    def prompts(self) -> list[dict[str, Any]]:
        """The GRPO rows: the orchestrator's first-turn messages, the task id and its difficulty level."""
        rows = []
        for task in self.tasks:
            request = self.method.orchestrator_request(task)
            level, _ = self.settings.level_of(task)
            rows.append(
                {
                    "prompt": [{"role": m.role, "content": m.content} for m in request.messages],
                    "task_id": task.id,
                    "level": level,
                }
            )
        return rows

    def _sft_rows(self) -> list[dict[str, Any]]:
        t = self.train
        if t.sft_data is None:
            return synthesise_plans(self.tasks, self.settings, per_task=t.sft_per_task, seed=t.seed)
        path = Path(t.sft_data).expanduser()
        if not path.is_file():
            raise InvalidArgumentError(f"--sft-data {path}: no such file", "sft_data")
        raw = []
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                raw.append(json.loads(line))
            except ValueError as exc:
                raise InvalidArgumentError(
                    f"--sft-data {path}: line {n} is not JSON ({exc})", "sft_data"
                ) from None
        if raw and "turns" in raw[0]:  # rollouts.jsonl: the well-scored turns
            raw = sft_records(
                [turn for row in raw for turn in row["turns"]], options=self.settings.check_options
            )
        rows = []
        for i, r in enumerate(raw):
            messages = r.get("messages")
            if not messages or messages[-1].get("role") != "assistant":
                raise InvalidArgumentError(
                    f"--sft-data {path}: row {i + 1} needs messages ending with the assistant's plan",
                    "sft_data",
                )
            rows.append({"prompt": messages[:-1], "completion": [messages[-1]]})
        if not rows:
            raise InvalidArgumentError(f"--sft-data {path}: no example to train on", "sft_data")
        return rows

    # ------------------------------------------------------------------ the run

    def run(self) -> dict[str, Any]:
        """Trains (SFT first when asked, then GRPO) until ``train.steps`` steps are done; writes the
        orchestrator folder, the log, the figures and the report; returns the last log entry plus totals.
        Blocking: from async code run it in a worker thread (the execution reward runs on ``loop``)."""
        with self.lock:
            return self._run()

    def _run(self) -> dict[str, Any]:
        from ...llm.models import resolve_model

        model_dir = resolve_model(self.model)
        config = self._config(model_dir)
        check_resume(self.out / "train.json", config, _KEEP, what="a training run")
        if not (self.out / "train.json").is_file():
            config.update(
                started=datetime.now(timezone.utc).isoformat(timespec="seconds"),
                versions={**versions(), **_train_versions()},
            )
            write_json_atomic(self.out / "train.json", config)
        start_dir = model_dir
        if self.train.sft:
            start_dir = self._sft(model_dir)
        t0 = time.perf_counter()
        trainer = self._grpo_trainer(start_dir)
        last = _last_checkpoint(self.out / "trl")
        done = _checkpoint_step(last) if last is not None else 0
        self.log = self._read_log(done)
        if done and self.progress:
            print(f"resuming at step {done} of {self.train.steps}", file=sys.stderr, flush=True)
        folder = self.out / "orchestrator"
        exported = OrchestratorCheckpoint.load(folder) if folder.is_dir() else None
        if done < self.train.steps or exported is None or exported.steps < done:
            # a finished run whose export is missing loads its last checkpoint and trains no step
            trainer.train(resume_from_checkpoint=str(last) if last is not None else None)
            self._write_log()
            self._export(trainer, base=model_dir)
        wall = time.perf_counter() - t0
        self._report()
        return {
            **(self.log[-1] if self.log else {}),
            "steps": self.train.steps,
            "orchestrator": str(folder),
            "wall_s": round(wall, 1),
        }

    def _sft(self, model_dir: str) -> str:
        """The SFT warm start (once: a rerun reuses its model)."""
        out = self.out / "sft"
        final = out / "model"
        if (final / "config.json").is_file():
            return str(final)
        import torch
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from trl import SFTConfig, SFTTrainer

        rows = self._sft_rows()
        write_bytes_atomic(out / "data.jsonl", "".join(json.dumps(r) + "\n" for r in rows).encode("utf-8"))
        tokenizer = AutoTokenizer.from_pretrained(model_dir)
        model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
        t = self.train
        args = SFTConfig(
            output_dir=str(out / "trl"),
            num_train_epochs=t.sft_epochs,
            per_device_train_batch_size=4,
            learning_rate=t.sft_learning_rate,
            lr_scheduler_type="cosine",
            warmup_steps=0.1,
            logging_steps=1,
            save_strategy="no",
            report_to=[],
            seed=t.seed,
            use_cpu=not torch.cuda.is_available(),
            bf16=_mixed_precision()[0],
            disable_tqdm=not self.progress,
            max_length=4096,
        )
        trainer = SFTTrainer(
            model=model,
            args=args,
            train_dataset=Dataset.from_list(rows),
            processing_class=tokenizer,
            peft_config=self._peft_config(),
        )
        trainer.train()
        merged = _merged(trainer.model)
        tmp = Path(tempfile.mkdtemp(prefix=".model.", dir=out))
        merged.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_json_atomic(
            out / "sft.json",
            {"examples": len(rows), "epochs": t.sft_epochs, "log": trainer.state.log_history},
        )
        tmp.rename(final)
        return str(final)

    def _peft_config(self) -> Any:
        if not self.train.lora:
            return None
        from peft import LoraConfig

        return LoraConfig(
            r=self.train.lora_rank,
            lora_alpha=self.train.lora_alpha,
            target_modules="all-linear",
            lora_dropout=0.0,
            task_type="CAUSAL_LM",
        )

    def _grpo_trainer(self, start_dir: str) -> Any:
        import torch
        from datasets import Dataset
        from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
        from trl import GRPOConfig as TRLConfig
        from trl import GRPOTrainer

        t = self.train
        executor = None
        if "execution" in t.components:
            assert self.loop is not None
            executor = PlanExecutor(self.method, self.tasks, self.engine, self.loop, self.out / "exec")
        reward = PlanReward(
            options=self.settings.check_options,
            reward=self.settings.reward,
            default_level=self.settings.default_level,
            execute=executor,
        )
        scorer = PlanScorer(reward, t.components)
        funcs = scorer.funcs()
        prompt_tokens = 4096
        bf16, self.precision = _mixed_precision()
        args = TRLConfig(
            output_dir=str(self.out / "trl"),
            max_steps=t.steps,
            per_device_train_batch_size=t.group_size * t.prompts_per_step,
            gradient_accumulation_steps=1,
            num_generations=t.group_size,
            max_completion_length=t.max_completion_tokens,
            learning_rate=t.learning_rate,
            lr_scheduler_type="constant",
            warmup_steps=0,
            beta=t.beta,
            epsilon=t.epsilon,
            temperature=t.temperature,
            loss_type="grpo",  # the paper's 1/|o_i| per sequence (Eq. 8)
            scale_rewards="group",
            reward_weights=[1.0] * len(funcs),
            logging_steps=1,
            save_strategy="steps",
            save_steps=t.save_every,
            save_total_limit=2,
            save_only_model=False,
            report_to=[],
            seed=t.seed,
            use_cpu=not torch.cuda.is_available(),
            bf16=bf16,
            disable_tqdm=not self.progress,
            log_completions=False,
            use_vllm=t.generation == "vllm",
            vllm_mode="colocate",
            vllm_max_model_length=prompt_tokens + t.max_completion_tokens,
            vllm_gpu_memory_utilization=0.3,
        )
        tokenizer = AutoTokenizer.from_pretrained(start_dir)
        model = AutoModelForCausalLM.from_pretrained(start_dir, dtype=torch.float32)
        trainer_self = self

        class _Progress(TrainerCallback):  # type: ignore[misc]
            def __init__(self) -> None:
                self.t0 = time.perf_counter()

            def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kw: Any) -> None:
                if not logs or "reward" not in logs:
                    return
                now = time.perf_counter()
                trainer_self._step(int(state.global_step), logs, now - self.t0)
                self.t0 = now

        try:
            return GRPOTrainer(
                model=model,
                reward_funcs=funcs,
                args=args,
                train_dataset=Dataset.from_list(self.prompts()),
                processing_class=tokenizer,
                peft_config=self._peft_config(),
                callbacks=[_Progress()],
            )
        except Exception as exc:
            if t.generation != "vllm":
                raise
            # TRL's colocated vLLM wants a vLLM it supports on a GPU; say so in one line
            raise ToporouteError(
                f"--generation vllm: TRL could not start vLLM on this machine ({type(exc).__name__}: "
                f"{str(exc).strip()[:300]}); --generation trl samples with TRL's own generate",
                "generation",
            ) from exc

    def _step(self, step: int, logs: Mapping[str, Any], wall_s: float) -> None:
        entry: dict[str, Any] = {"step": step, "reward": _num(logs.get("reward"))}
        for c in self.train.components:
            entry[c] = _num(logs.get(f"rewards/{c}/mean"))
        for key, name in (
            ("validity_rate", "validity_rate"),
            ("valid_nodes", "valid_nodes"),
            ("over_cap", "over_cap"),
            ("kl", "kl"),
            ("loss", "loss"),
            ("entropy", "entropy"),
            ("reward_std", "reward_std"),
            ("frac_reward_zero_std", "frac_reward_zero_std"),
            ("completions/mean_length", "completion_tokens"),
            ("completions/clipped_ratio", "clipped"),
            ("grad_norm", "grad_norm"),
        ):
            if key in logs:
                entry[name] = _num(logs[key])
        entry["wall_s"] = round(wall_s, 2)
        self.log = [e for e in self.log if e["step"] < step] + [entry]
        self._write_log()
        if self.progress:
            parts = [f"step {step}/{self.train.steps}: reward {entry['reward']:+.3f}"]
            parts += [f"{c} {entry[c]:+.3f}" for c in self.train.components if entry.get(c) is not None]
            if entry.get("validity_rate") is not None:
                parts.append(f"valid {entry['validity_rate']:.0%}")
            if entry.get("kl") is not None:
                parts.append(f"kl {entry['kl']:.4f}")
            parts.append(f"{wall_s:.1f} s")
            print(", ".join(parts), file=sys.stderr, flush=True)

    def _export(self, trainer: Any, *, base: str) -> Path:
        """Writes ``OUT/orchestrator`` (weights in the base model's dtype, LoRA merged, tokenizer and chat
        template, :data:`~toporoute.methods.conductor.checkpoint.METADATA`), replacing an older one."""
        folder = self.out / "orchestrator"
        steps = int(trainer.state.global_step)
        import torch

        model = _merged(trainer.model)
        saved_dtype = torch.bfloat16 if _config_dtype(base) == "bfloat16" else torch.float32
        tmp = Path(tempfile.mkdtemp(prefix=".orchestrator.", dir=self.out))
        try:
            model.to(saved_dtype).save_pretrained(tmp)
            trainer.processing_class.save_pretrained(tmp)
            digest = hashlib.sha256()
            for f in sorted(tmp.glob("*.safetensors")):
                digest.update(f.read_bytes())
            OrchestratorCheckpoint(
                tmp,
                digest.hexdigest()[:16],
                self.model or "embedded",
                steps,
                tuple(t.id for t in self.tasks),
                {
                    "base_model_dir": base,
                    "tasks": self.info.get("tasks"),
                    "reward": list(self.train.components),
                    "sft": self.train.sft,
                    "lora": self.train.lora,
                    "precision": self.precision,
                    "train": asdict(self.train),
                    "complete": steps >= self.train.steps,
                    "written": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                },
            ).save()
            if folder.exists():
                shutil.rmtree(folder)
            tmp.rename(folder)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        model.to(torch.float32)
        return folder

    def _report(self) -> None:
        try:
            from ._train_report import write_training_report
        except ImportError:  # pragma: no cover - matplotlib is part of the run extra
            print("matplotlib is not installed: no training figures", file=sys.stderr)
            return
        write_training_report(self.out, self.log, title=f"AgentConductor orchestrator GRPO: {self.out.name}")


def _mixed_precision() -> tuple[bool, str]:
    """Whether to train under bf16 autocast (weights and optimizer stay float32), and why: on a GPU that supports
    it, and on a CPU with native bf16 (AVX512-BF16 / AMX, about 2x faster than float32 there; the rule and
    ``$TOPOROUTE_DTYPE`` of :func:`toporoute.llm.cpu.resolve_dtype`, as the engines)."""
    import torch

    if torch.cuda.is_available():
        ok = bool(torch.cuda.is_bf16_supported())
        return ok, "bf16 autocast: the GPU supports it" if ok else "float32: the GPU has no bf16"
    from ...llm.cpu import resolve_dtype

    choice = resolve_dtype(None)
    return choice.dtype == "bfloat16", choice.reason


def _merged(model: Any) -> Any:
    """A peft model's LoRA merged into its base (a copy when the adapter is still training); a plain model as
    it is."""
    if hasattr(model, "merge_and_unload"):
        import copy

        return copy.deepcopy(model).merge_and_unload()
    return model


def _config_dtype(model_dir: str) -> str | None:
    """The dtype a model folder's config.json declares (None for a hub id or no declaration)."""
    path = Path(model_dir) / "config.json"
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    value = config.get("dtype") or config.get("torch_dtype")
    return str(value) if value else None


def _last_checkpoint(folder: Path) -> Path | None:
    if not folder.is_dir():
        return None
    found = [p for p in folder.glob("checkpoint-*") if p.is_dir() and (p / "trainer_state.json").is_file()]
    return max(found, key=_checkpoint_step) if found else None


def _checkpoint_step(path: Path) -> int:
    try:
        return int(path.name.rsplit("-", 1)[1])
    except (IndexError, ValueError):
        return -1


def _num(value: Any) -> float | None:
    try:
        x = float(value)
    except (TypeError, ValueError):
        return None
    return round(x, 6) if np.isfinite(x) else None


def _train_versions() -> dict[str, str]:
    from ..._info import package_version

    out = {}
    for dist in ("torch", "transformers", "trl", "peft", "datasets"):
        v = package_version(dist)
        if v is not None:
            out[dist] = v
    return out
