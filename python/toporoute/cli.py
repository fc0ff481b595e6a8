"""The ``toporoute`` command: ``run`` methods on a task set, ``train`` a Q-Mix policy, ``report`` a run directory.

Credentials are read here only (``--api-key-env``), never from code or logs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from pathlib import Path
from typing import Any

from .errors import ToporouteError

__all__ = ["main"]

log = logging.getLogger("toporoute")


def _parser() -> argparse.ArgumentParser:
    from .methods import METHODS

    p = argparse.ArgumentParser(prog="toporoute", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run",
        help="run one or more methods on a task set and write RUN_DIR/<method>/",
        description="Runs each METHOD over the same tasks on one engine. Rerunning with the same --out resumes: "
        "finished episodes are skipped. Methods: " + ", ".join(METHODS) + ".",
    )
    run.add_argument("methods", nargs="+", metavar="METHOD", help=f"one or more of {', '.join(METHODS)}")
    run.add_argument(
        "--tasks",
        default="humaneval",
        help="humaneval, math-demo, a .jsonl task file, or hub:<dataset id>[:split] (default humaneval)",
    )
    run.add_argument("--limit", type=int, default=None, help="first N tasks (after --offset)")
    run.add_argument("--offset", type=int, default=0, help="skip the first K tasks")
    run.add_argument("--out", required=True, type=Path, help="run directory")
    _engine_args(run)
    run.add_argument("--concurrency", type=int, default=16, help="episodes in flight (default 16)")
    run.add_argument(
        "--rounds",
        type=int,
        default=None,
        help="dytopo: T_max (10); random/fixed baselines: 5; qmix: T (code 2, math 3); conductor: K turns (2)",
    )
    run.add_argument("--tau", type=float, default=None, help="edge threshold (default: code 0.3, math 0.4)")
    run.add_argument("--k-in", type=int, default=3, help="most providers per recipient (0: no cap)")
    _sampling_args(run, "0.3; qmix and conductor 0.2")
    c = run.add_argument_group("conductor")
    c.add_argument(
        "--level",
        choices=("easy", "medium", "hard"),
        default=None,
        help="conductor: difficulty for the density cap 4/7/10 (default: the task's label, else easy)",
    )
    c.add_argument(
        "--feedback-tests",
        choices=("public", "hidden"),
        default="public",
        help="conductor: tests behind the tester's feedback: docstring examples (default) or the real tests "
        "(an oracle); the reward always uses the real tests",
    )
    c.add_argument("--no-guided", action="store_true", help="conductor: no plan grammar for the orchestrator")
    c.add_argument(
        "--density-mode", choices=("paper", "normalized"), default="paper", help="conductor: r_g form (paper)"
    )
    c.add_argument(
        "--return-mode",
        choices=("sum", "mean", "last"),
        default="sum",
        help="conductor: trajectory return (sum)",
    )
    c.add_argument(
        "--strict-tester", action="store_true", help="conductor: reject testers outside the last step"
    )
    c.add_argument(
        "--orchestrator-max-tokens", type=int, default=768, help="conductor: tokens of a plan (default 768)"
    )
    q = run.add_argument_group("qmix")
    q.add_argument(
        "--checkpoint", type=Path, default=None, help="qmix: the policy (toporoute train qmix writes it)"
    )
    _qmix_loop_args(q)
    run.add_argument("--report", action="store_true", help="write RUN_DIR/report.html when done")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")

    tr = sub.add_parser(
        "train",
        help="train an Agent Q-Mix policy on a task set (QMIX, any engine)",
        description="Trains a Q-Mix policy with QMIX: every episode runs the real method loop on the engine, is "
        "scored, and feeds the replay buffer; OUT gets policy.safetensors (use it with `toporoute run qmix "
        "--checkpoint`), best.safetensors, log.jsonl and figures/. Rerunning with the same --out resumes.",
    )
    tr.add_argument("method", choices=("qmix",), help="what to train (qmix)")
    tr.add_argument("--tasks", default="humaneval", help="training tasks (same forms as run --tasks)")
    tr.add_argument("--limit", type=int, default=15, help="first N tasks (default 15, as the paper)")
    tr.add_argument("--offset", type=int, default=0, help="skip the first K tasks")
    tr.add_argument("--out", required=True, type=Path, help="training folder")
    tr.add_argument(
        "--episodes", type=int, default=50, help="episodes (default 50; episode k uses task k mod N)"
    )
    tr.add_argument("--batch-size", type=int, default=8, help="episodes per gradient step (default 8)")
    tr.add_argument("--lr", type=float, default=5e-4)
    tr.add_argument("--gamma", type=float, default=0.99)
    tr.add_argument("--target-update", choices=("soft", "hard"), default="soft", help="target network update")
    tr.add_argument("--target-tau", type=float, default=0.01, help="soft update rate (default 0.01)")
    tr.add_argument("--target-interval", type=int, default=10, help="hard update: steps between copies")
    tr.add_argument("--w-acc", type=float, default=1.25, help="reward weight of accuracy (default 1.25)")
    tr.add_argument("--w-tok", type=float, default=0.10, help="reward weight of tokens/10k (default 0.10)")
    tr.add_argument(
        "--legacy-reward-broadcast",
        action="store_true",
        help="the original targets: R at every round, last round untrained",
    )
    tr.add_argument(
        "--task-feature",
        choices=("hash", "encoder"),
        default="hash",
        help="task feature of the observation: 32-slot byte hash (default) or the descriptor encoder's embedding",
    )
    tr.add_argument("--legacy-obs", action="store_true", help="the original observation quirks (spec §3)")
    tr.add_argument("--agents", type=int, default=3, help="team size (default 3: 2 writers + analyzer)")
    tr.add_argument(
        "--adj-mode", choices=("in", "out_rows", "sym"), default="in", help="GNN aggregation (default in)"
    )
    tr.add_argument(
        "--concurrency", type=int, default=1, help="episodes acted at once per policy (default 1)"
    )
    tr.add_argument("--rounds", type=int, default=None, help="T (default: code 2, math 3)")
    _engine_args(tr)
    _sampling_args(tr, "0.2")
    _qmix_loop_args(tr)
    tr.add_argument("--no-progress", action="store_true", help="no per-episode lines")

    rep = sub.add_parser("report", help="write RUN_DIR/report.html and RUN_DIR/figures/*.png")
    rep.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    rep.add_argument("--out", type=Path, default=None, help="HTML file (default RUN_DIR/report.html)")
    return p


def _engine_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine", choices=("vllm", "openai", "replay"), default="vllm")
    p.add_argument("--model", default=None, help="model folder or id (vllm default: the embedded SmolLM2)")
    p.add_argument(
        "--max-model-len", type=int, default=None, help="vllm context length (embedded model: 8192)"
    )
    p.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="openai: API root")
    p.add_argument("--api-key-env", default="OPENAI_API_KEY", help="openai: environment variable of the key")
    p.add_argument(
        "--guided-regex",
        action="store_true",
        help="openai: the server honours vLLM's structured_outputs regex (conductor plans under a grammar)",
    )
    p.add_argument("--replay", type=Path, default=None, help="replay: the transcript to replay")
    p.add_argument("--record", type=Path, default=None, help="record every LLM call to this transcript")
    p.add_argument("--reprompts", type=int, default=2, help="re-prompts on invalid JSON (default 2)")
    p.add_argument("--eval-timeout", type=float, default=10.0, help="seconds per code answer in the sandbox")


def _sampling_args(p: argparse.ArgumentParser, temperature: str) -> None:
    p.add_argument("--max-tokens", type=int, default=4096, help="completion tokens per call (default 4096)")
    p.add_argument(
        "--temperature", type=float, default=None, help=f"sampling temperature (default {temperature})"
    )
    p.add_argument("--seed", type=int, default=0)


def _qmix_loop_args(p: Any) -> None:
    p.add_argument(
        "--select-once",
        action="store_true",
        help="qmix: choose actions once from the first observation (the original evaluation code)",
    )
    p.add_argument(
        "--initial-adj", choices=("identity", "zeros"), default="identity", help="qmix: round-0 graph"
    )
    p.add_argument(
        "--legacy-repo-exec",
        action="store_true",
        help="qmix: reproduce the original scheduler bug (no message is delivered)",
    )
    p.add_argument("--adversary", type=int, default=None, help="qmix: index of an adversarial agent")


def _qmix_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "reselect_each_round": not args.select_once,
        "initial_adj": args.initial_adj,
        "legacy_repo_exec": args.legacy_repo_exec,
        "adversarial_agent_index": args.adversary,
    }


def _conductor_overrides(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "level": args.level,
        "feedback_tests": args.feedback_tests,
        "guided": not args.no_guided,
        "density_mode": args.density_mode,
        "return_mode": args.return_mode,
        "strict_tester": args.strict_tester,
        "orchestrator_max_tokens": args.orchestrator_max_tokens,
        "test_timeout_s": args.eval_timeout,
    }


async def _engine(args: argparse.Namespace) -> Any:
    from .llm import Structured

    if args.engine == "vllm":
        from .llm import VLLMEngine

        print(
            "starting vLLM (the first run converts the embedded model, once) ...", file=sys.stderr, flush=True
        )
        # the embedded model's own default (2048) is too short for ten rounds of memory
        max_len = args.max_model_len or (8192 if args.model is None else None)
        inner: Any = await VLLMEngine.open(args.model, max_model_len=max_len)
    elif args.engine == "openai":
        from .llm import OpenAIEngine

        if not args.model:
            raise ToporouteError("--engine openai needs --model (the server's model id)")
        inner = OpenAIEngine(
            args.model, base_url=args.base_url, api_key_env=args.api_key_env, guided_regex=args.guided_regex
        )
    else:
        from .llm import ReplayEngine

        if args.replay is None:
            raise ToporouteError("--engine replay needs --replay TRANSCRIPT")
        inner = ReplayEngine(args.replay)
    if args.record is not None:
        from .llm import ReplayEngine

        inner = ReplayEngine(args.record, inner, reuse_recorded=True)
    return Structured(inner, max_reprompts=args.reprompts)


def _print_table(rows: list[dict[str, Any]]) -> None:
    cols = [
        ("method", "method", "{}"),
        ("episodes", "ok", "{}"),
        ("accuracy", "accuracy", "{:.3f}"),
        ("tokens/task", "tokens_per_task", "{:.0f}"),
        ("calls/task", "calls_per_task", "{:.1f}"),
        ("rounds/task", "rounds_per_task", "{:.2f}"),
        ("wall s", "wall_s", "{:.1f}"),
        ("routing share", "routing_share", "{:.3%}"),
    ]
    table = [[h for h, _, _ in cols]]
    for r in rows:
        table.append([fmt.format(r.get(k, 0) if r.get(k) is not None else 0) for _, k, fmt in cols])
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for row in table:
        print(
            "  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths)))
        )


async def _run(args: argparse.Namespace) -> int:
    from .methods import METHODS, LoopConfig, make_method
    from .methods.harness import dytopo_edge_counts, run_method
    from .tasks import load_tasks

    bad = [m for m in args.methods if m not in METHODS]
    if bad:
        raise ToporouteError(f"unknown method(s) {bad}; choose from {', '.join(METHODS)}")
    methods = sorted(
        dict.fromkeys(args.methods), key=lambda m: m != "dytopo"
    )  # dytopo first: random needs it
    tasks = load_tasks(args.tasks, limit=args.limit, offset=args.offset)
    if not tasks:
        raise ToporouteError(f"--tasks {args.tasks} with --offset {args.offset} selects no task")
    if "qmix" in methods and args.checkpoint is None:
        raise ToporouteError("method qmix needs --checkpoint (a policy from `toporoute train qmix`)")
    config = LoopConfig(
        tau=args.tau,
        k_in=args.k_in,
        max_tokens=args.max_tokens,
        seed=args.seed,
        **({} if args.temperature is None else {"temperature": args.temperature}),
    )
    print(f"{len(tasks)} task(s) from {args.tasks}; methods: {', '.join(methods)}", file=sys.stderr)
    engine = await _engine(args)
    encoder = None
    rows = []
    try:
        for name in methods:
            edge_counts = None
            if name == "random":
                edge_counts = dytopo_edge_counts(args.out / "dytopo")
                if not edge_counts:
                    print(
                        f"random: no DyTopo run in {args.out / 'dytopo'}; drawing {config.random_edges} edges "
                        "per round (run dytopo first to match its edge counts)",
                        file=sys.stderr,
                    )
            if name == "dytopo" and encoder is None:
                from .embed import Encoder

                encoder = Encoder.default()
                encoder.encode(["I need a warm start.", "I provide one."])  # first ONNX run: not routing
            qmix = _qmix_overrides(args)
            conductor = _conductor_overrides(args)
            if args.temperature is None:
                qmix["temperature"] = conductor["temperature"] = 0.2
            method = make_method(
                name,
                config,
                rounds=args.rounds,
                encoder=encoder,
                edge_counts=edge_counts,
                checkpoint=args.checkpoint,
                qmix=qmix,
                conductor=conductor,
            )
            print(f"== {name}", file=sys.stderr, flush=True)
            summary = await run_method(
                method,
                tasks,
                engine,
                args.out / name,
                info={
                    "tasks": args.tasks,
                    "limit": args.limit,
                    "offset": args.offset,
                    "engine": args.engine,
                    "model": engine.name,
                },
                concurrency=args.concurrency,
                eval_timeout_s=args.eval_timeout,
                progress=not args.no_progress,
            )
            rows.append(summary)
    finally:
        await engine.aclose()
    print()
    _print_table(rows)
    errors = sum(r.get("errors", 0) for r in rows)
    if errors:
        print(f"\n{errors} episode(s) ended with an error; see episodes/*.json (rerun to retry them)")
    if args.report:
        from .trace.report import write_report

        paths = write_report(args.out)
        print(f"\nreport: {paths.html}")
    return 1 if errors else 0


async def _train(args: argparse.Namespace) -> int:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise ToporouteError(
            "toporoute train needs PyTorch: pip install 'toporoute[train]' (or '.[run]', which brings it with vLLM)"
        )
    from .methods.qmix import Features, QMixSettings
    from .methods.qmix.train import TrainConfig, Trainer
    from .ops.qmix_params import QMixConfig
    from .tasks import load_tasks

    tasks = load_tasks(args.tasks, limit=args.limit, offset=args.offset)
    if not tasks:
        raise ToporouteError(f"--tasks {args.tasks} with --offset {args.offset} selects no task")
    features = Features(task_feature=args.task_feature, legacy=args.legacy_obs)
    settings = QMixSettings(
        rounds=args.rounds,
        max_tokens=args.max_tokens,
        seed=args.seed,
        **({} if args.temperature is None else {"temperature": args.temperature}),
        **_qmix_overrides(args),
    )
    train = TrainConfig(
        episodes=args.episodes,
        batch_size=args.batch_size,
        lr=args.lr,
        gamma=args.gamma,
        target_update=args.target_update,
        target_tau=args.target_tau,
        target_interval=args.target_interval,
        w_acc=args.w_acc,
        w_tok=args.w_tok,
        legacy_reward_broadcast=args.legacy_reward_broadcast,
        concurrency=args.concurrency,
        seed=args.seed,
    )
    net = QMixConfig(n_agents=args.agents, adj_mode=args.adj_mode)
    print(f"{len(tasks)} training task(s) from {args.tasks}; {args.episodes} episodes", file=sys.stderr)
    engine = await _engine(args)
    try:
        trainer = Trainer(
            tasks,
            engine,
            args.out,
            net=net,
            features=features,
            settings=settings,
            train=train,
            info={"tasks": args.tasks, "engine": args.engine, "model": engine.name},
            eval_timeout_s=args.eval_timeout,
            progress=not args.no_progress,
        )
        result = await trainer.run()
    finally:
        await engine.aclose()
    print(f"\npolicy: {args.out / 'policy.safetensors'}  ({result.get('grad_steps', 0)} gradient steps)")
    print(f"log: {args.out / 'log.jsonl'}; figures: {args.out / 'figures'}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``toporoute`` command."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=os.environ.get("TOPOROUTE_LOG", "WARNING").upper(), format="%(message)s")
    try:
        if args.command == "run":
            return asyncio.run(_run(args))
        if args.command == "train":
            return asyncio.run(_train(args))
        from .trace.report import write_report

        paths = write_report(args.run_dir, args.out)
        print(paths.html)
        for f in paths.figures:
            print(f)
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted: finished episodes are saved; rerun the same command to resume", file=sys.stderr)
        return 130
    except (ToporouteError, ValueError, OSError) as exc:
        print(f"toporoute: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
