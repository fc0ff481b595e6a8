"""The ``toporoute`` command: ``run`` methods on a task set, ``report`` a run directory.

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
    run.add_argument("--engine", choices=("vllm", "openai", "replay"), default="vllm")
    run.add_argument("--model", default=None, help="model folder or id (vllm default: the embedded SmolLM2)")
    run.add_argument(
        "--max-model-len", type=int, default=None, help="vllm context length (embedded model: 8192)"
    )
    run.add_argument("--base-url", default="http://127.0.0.1:8000/v1", help="openai: API root")
    run.add_argument(
        "--api-key-env", default="OPENAI_API_KEY", help="openai: environment variable of the key"
    )
    run.add_argument("--replay", type=Path, default=None, help="replay: the transcript to replay")
    run.add_argument("--record", type=Path, default=None, help="record every LLM call to this transcript")
    run.add_argument("--concurrency", type=int, default=16, help="episodes in flight (default 16)")
    run.add_argument("--rounds", type=int, default=None, help="dytopo: T_max (10); random/fixed baselines: 5")
    run.add_argument("--tau", type=float, default=None, help="edge threshold (default: code 0.3, math 0.4)")
    run.add_argument("--k-in", type=int, default=3, help="most providers per recipient (0: no cap)")
    run.add_argument("--max-tokens", type=int, default=4096, help="completion tokens per call (default 4096)")
    run.add_argument("--temperature", type=float, default=0.3)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--reprompts", type=int, default=2, help="re-prompts on invalid JSON (default 2)")
    run.add_argument(
        "--eval-timeout", type=float, default=10.0, help="seconds per code answer in the sandbox"
    )
    run.add_argument("--report", action="store_true", help="write RUN_DIR/report.html when done")
    run.add_argument("--no-progress", action="store_true", help="no progress bar")

    rep = sub.add_parser("report", help="write RUN_DIR/report.html and RUN_DIR/figures/*.png")
    rep.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    rep.add_argument("--out", type=Path, default=None, help="HTML file (default RUN_DIR/report.html)")
    return p


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
        inner = OpenAIEngine(args.model, base_url=args.base_url, api_key_env=args.api_key_env)
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
    config = LoopConfig(
        tau=args.tau,
        k_in=args.k_in,
        temperature=args.temperature,
        max_tokens=args.max_tokens,
        seed=args.seed,
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
            method = make_method(name, config, rounds=args.rounds, encoder=encoder, edge_counts=edge_counts)
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


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``toporoute`` command."""
    args = _parser().parse_args(argv)
    logging.basicConfig(level=os.environ.get("TOPOROUTE_LOG", "WARNING").upper(), format="%(message)s")
    try:
        if args.command == "run":
            return asyncio.run(_run(args))
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
