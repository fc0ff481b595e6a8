"""The ``toporoute`` command: run, train, report, export-otel, serve, bench and info.

``run`` methods on a task set, ``train`` a Q-Mix policy, ``report`` a run directory, ``export-otel`` a run directory
as OpenTelemetry traces, ``serve`` the ops over HTTP, ``bench`` the ops, ``info`` on the installation.

Every check that needs no model (options, task set, method settings, checkpoint files, a run folder's earlier
settings and its lock) runs before the LLM engine starts. Credentials are read here only (``--api-key-env``),
never from code or logs.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ._argtypes import float_at_least, int_at_least
from .errors import ToporouteError

if TYPE_CHECKING:
    from ._runlock import RunLock
    from .methods.episode import Method
    from .methods.registry import MethodSpec, OptionGroup
    from .tasks import Task

__all__ = ["main"]

log = logging.getLogger("toporoute")

_DESCRIPTION = (
    "Routing engine for LLM multi-agent systems: run, train, report, export-otel, serve, bench and info."
)
_ENVIRONMENT = """environment:
  TOPOROUTE_LOG       log level of toporoute's messages: DEBUG, INFO, WARNING (default) or ERROR
  TOPOROUTE_CACHE     cache folder of the converted models and the encoder graph (default ~/.cache/toporoute)
  TOPOROUTE_DTYPE     vllm dtype when --dtype is not given (auto, bfloat16, float32)
  TOPOROUTE_VERBOSE   1: show vLLM's and PyTorch's start-up logs (as --verbose)

exit status: 0 done; 1 some task ended with an error (rerun the command to retry it); 2 bad usage or input;
130 interrupted."""

_VERBOSE_HELP = (
    "vllm: show vLLM's and PyTorch's start-up logs and warnings (default: errors only; "
    "or set TOPOROUTE_VERBOSE=1)"
)


def _parser(methods: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The command's parser; ``run`` gets the option groups of ``methods`` (the methods named on the command
    line), one group per set of options, so ``toporoute run METHOD --help`` shows that method's own options."""
    from .methods.registry import REGISTRY

    p, sub = _root_parser()

    width = max(len(n) for n in REGISTRY)
    listing = "\n".join(f"  {n.ljust(width)}  {spec.summary}" for n, spec in REGISTRY.items())
    run = sub.add_parser(
        "run",
        help="run one or more methods on a task set and write RUN_DIR/<method>/",
        description="Runs each METHOD over the same tasks on one engine. Rerunning with the same --out resumes: "
        "finished episodes are skipped, episodes that ended with an error run again. One run at a time holds "
        "a run folder.",
        epilog=f"methods:\n{listing}\n\n'toporoute run METHOD --help' lists a method's own options.\n\n"
        f"{_ENVIRONMENT}",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    run.add_argument("methods", nargs="+", metavar="METHOD", help=f"one or more of {', '.join(REGISTRY)}")
    run.add_argument(
        "--tasks",
        default="humaneval",
        help="humaneval, math-demo, a .jsonl task file, or hub:<dataset id>[:split] (default humaneval)",
    )
    run.add_argument(
        "--limit", type=int_at_least(1), default=None, help="first N tasks after --offset (default: all)"
    )
    run.add_argument("--offset", type=int_at_least(0), default=0, help="skip the first K tasks (default 0)")
    run.add_argument("--out", required=True, type=Path, help="run directory (required)")
    _engine_args(run)
    run.add_argument(
        "--concurrency", type=int_at_least(1), default=16, help="episodes in flight (default 16)"
    )
    run.add_argument(
        "--rounds",
        type=int_at_least(1),
        default=None,
        help="dytopo: T_max (10); random/fixed baselines: 5; qmix: T (code 2, math 3, choice 2); "
        "conductor: K turns (2); hiva: T iterations (10) unless --iterations is given; tacomas: R rounds (10; "
        "fewer when s_t reaches --tau or the meta-LLM says stop); self-refine: "
        "iterations (3); debate: rounds (3)",
    )
    _sampling_args(run, "each method's own: dytopo and its baselines 0.3, qmix and conductor 0.2")
    run.add_argument("--report", action="store_true", help="write RUN_DIR/report.html when done")
    run.add_argument("--no-progress", action="store_true", help="no progress bar (default: a bar on stderr)")
    run.add_argument("--verbose", action="store_true", help=_VERBOSE_HELP)
    _ray_args(run)
    for group in _option_groups(methods):
        group.add(run.add_argument_group(f"options of {group.title}"))
    run.set_defaults(command_parser=run)  # for errors about run's options, with run's usage line

    tr = sub.add_parser(
        "train",
        help="train an Agent Q-Mix policy (QMIX) or an AgentConductor orchestrator (GRPO on TRL)",
        description="Trains what 'toporoute run' then uses: 'train qmix' a Q-Mix policy (--checkpoint), "
        "'train conductor' an orchestrator model (--orchestrator). Rerunning with the same --out resumes.",
        epilog=_ENVIRONMENT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    tr.set_defaults(command_parser=tr)
    what = tr.add_subparsers(dest="method", required=True, metavar="METHOD")
    _train_qmix_args(what)
    _train_conductor_args(what)

    rep = sub.add_parser(
        "report", help="write RUN_DIR/report.html and RUN_DIR/figures/*.png", allow_abbrev=False
    )
    rep.set_defaults(command_parser=rep)
    rep.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory (or one method folder)")
    rep.add_argument("--out", type=Path, default=None, help="HTML file (default RUN_DIR/report.html)")
    _serve_args(sub)
    _light_args(sub)
    _export_otel_args(sub)
    return p


def _ray_args(run: argparse.ArgumentParser) -> None:
    g = run.add_argument_group(
        "scale-out on Ray (extra ray)",
        "The episodes run on Ray actors, each with its own engine (--engine as above: in-process vLLM on the "
        "actor's GPU, the openai engine, a replay); this process writes the run folder as a local run does, so a "
        "rerun skips finished episodes wherever they ran. --concurrency is per actor.",
    )
    g.add_argument(
        "--ray",
        nargs="?",
        const="local",
        default=None,
        metavar="ADDRESS",
        help="run on the Ray cluster at ADDRESS (ray://HOST:10001, HOST:6379 or auto); without ADDRESS on a "
        "local cluster started for the run (default: no Ray)",
    )
    g.add_argument(
        "--ray-actors",
        type=int_at_least(1),
        default=None,
        help="actors (default: one per GPU when they take GPUs, else 2)",
    )
    g.add_argument(
        "--ray-gpus-per-actor",
        type=float_at_least(0.0),
        default=None,
        help="GPUs per actor (default: 1 with --engine vllm on a cluster with GPUs, else 0)",
    )
    g.add_argument(
        "--ray-cpus-per-actor", type=float_at_least(0.0), default=1.0, help="CPUs per actor (default 1)"
    )


def _train_parser(
    what: Any, name: str, help: str, description: str, *, limit: int, limit_help: str
) -> argparse.ArgumentParser:
    """A ``toporoute train NAME`` parser with what every trainer takes first: the training tasks (``--tasks``,
    ``--limit``, ``--offset``) and the training folder (``--out``)."""
    tr = what.add_parser(
        name,
        help=help,
        description=description,
        epilog=_ENVIRONMENT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    tr.set_defaults(command_parser=tr)
    tr.add_argument(
        "--tasks", default="humaneval", help="training tasks, same forms as run --tasks (default humaneval)"
    )
    tr.add_argument("--limit", type=int_at_least(1), default=limit, help=limit_help)
    tr.add_argument("--offset", type=int_at_least(0), default=0, help="skip the first K tasks (default 0)")
    tr.add_argument("--out", required=True, type=Path, help="training folder (required)")
    return tr


def _train_qmix_args(what: Any) -> None:
    """``toporoute train qmix``."""
    from .methods.qmix.plugin import LOOP_OPTIONS, add_qmix_network_options
    from .methods.qmix.train_config import TRAIN_OPTIONS

    tr = _train_parser(
        what,
        "qmix",
        "train an Agent Q-Mix policy on a task set (QMIX, any engine)",
        "Trains a Q-Mix policy with QMIX: every episode runs the real method loop on the engine, is "
        "scored, and feeds the replay buffer; OUT gets policy.safetensors (use it with 'toporoute run qmix "
        "--checkpoint'), best.safetensors, log.jsonl and figures/. Rerunning with the same --out resumes.",
        limit=15,
        limit_help="first N tasks (default 15, as the paper)",
    )
    TRAIN_OPTIONS.add(tr)
    tr.add_argument(
        "--task-feature",
        choices=("hash", "encoder"),
        default="hash",
        help="task feature of the observation: 32-slot byte hash (default) or the descriptor encoder's embedding",
    )
    tr.add_argument(
        "--legacy-obs",
        action="store_true",
        help="the original observation quirks, spec section 3 (default: real token counts, normalised "
        "graph statistics)",
    )
    tr.add_argument(
        "--rounds", type=int_at_least(1), default=None, help="T (default: code 2, math 3, choice 2)"
    )
    _engine_args(tr)
    _sampling_args(tr, "0.2")
    add_qmix_network_options(tr.add_argument_group("options of the Q-Mix network"))
    LOOP_OPTIONS.add(tr.add_argument_group("options of the Q-Mix episode loop"))
    tr.add_argument(
        "--no-progress", action="store_true", help="no per-episode lines (default: one line per episode)"
    )
    tr.add_argument("--verbose", action="store_true", help=_VERBOSE_HELP)


def _train_conductor_args(what: Any) -> None:
    """``toporoute train conductor``."""
    from .methods.conductor.plugin import OPTIONS
    from .methods.conductor.train_config import TRAIN_OPTIONS

    tr = _train_parser(
        what,
        "conductor",
        "train AgentConductor's orchestrator with GRPO (TRL), optionally after SFT",
        "Trains the orchestrator model (default: the embedded SmolLM2-135M; --model: any local "
        "Hugging Face folder) with TRL's GRPOTrainer on its real first-turn prompts for the training tasks. "
        "The reward is the plan check's penalty, the density term and (unless --reward validity,density) the "
        "hidden tests' verdict of the plan run by the real loop with its role agents on the training task (the "
        "engine options choose their engine). OUT gets orchestrator/ (use it with 'toporoute run conductor "
        "--orchestrator OUT/orchestrator', which refuses its training tasks), log.jsonl, figures/ and "
        "report.html. Rerunning with the same --out resumes from the last checkpoint.",
        limit=40,
        limit_help="first N tasks (default 40: HumanEval 0-39; evaluate with --offset 40)",
    )
    tr.add_argument(
        "--model",
        default=None,
        help="the orchestrator to train: a Hugging Face model folder or hub id (default: the embedded "
        "SmolLM2-135M-Instruct)",
    )
    TRAIN_OPTIONS.add(tr.add_argument_group("options of GRPO training"))
    _engine_args(
        tr,
        model_flag="--role-model",
        title="engine options (the role agents of the execution reward)",
        model_help="the role agents' model folder or id (default for vllm: the embedded SmolLM2-135M)",
    )
    _sampling_args(tr, "0.2")
    OPTIONS.add(tr.add_argument_group("options of the AgentConductor episode loop (prompts, reward, agents)"))
    tr.add_argument("--no-progress", action="store_true", help="no progress bar or per-step lines")
    tr.add_argument("--verbose", action="store_true", help=_VERBOSE_HELP)


def _root_parser() -> tuple[argparse.ArgumentParser, Any]:
    """The ``toporoute`` parser with ``--version`` and its subcommand table (no subcommand added yet)."""
    from ._info import package_version

    p = argparse.ArgumentParser(
        prog="toporoute",
        description=_DESCRIPTION,
        epilog=_ENVIRONMENT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        allow_abbrev=False,
    )
    p.add_argument(
        "--version",
        action="version",
        version=f"toporoute {package_version('toporoute') or 'unknown'}",
        help="print the version and exit",
    )
    return p, p.add_subparsers(dest="command", required=True, metavar="COMMAND")


def _light_args(sub: Any) -> None:
    """``toporoute bench`` (toporoute/benchmark/command.py) and ``toporoute info`` (toporoute/_installation.py)."""
    from .benchmark.command import add_arguments

    add_arguments(sub)
    info = sub.add_parser(
        "info",
        help="how toporoute was built, the optional packages and model files found, the cache directory",
        allow_abbrev=False,
    )
    info.add_argument("--json", action="store_true", help="print the same as JSON")


def _serve_args(sub: Any) -> None:
    """``toporoute serve``: the HTTP service (extra ``serve``; see toporoute/serve/server.py). Its settings' flags
    come from :class:`~toporoute.serve.ServeConfig`'s fields (toporoute/serve/config.py loads without the extra)."""
    from .serve.config import SERVE_OPTIONS

    s = sub.add_parser(
        "serve",
        help="serve the routing ops and the text Router over HTTP (FastAPI + uvicorn)",
        description="Serves /v1/route, /v1/embed, /v1/embeddings (OpenAI-compatible), /v1/toposort, "
        "/v1/conductor/check, /v1/qmix/act, /health, /metrics, /openapi.json and /docs. SIGTERM shuts down "
        "gracefully: new connections are refused, requests in flight finish (at most --graceful-timeout "
        "seconds), then the command exits 0.",
        allow_abbrev=False,
    )
    SERVE_OPTIONS.add(s)
    s.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help="file whose first line is the bearer token (else $TOPOROUTE_TOKEN; none: no auth)",
    )
    s.add_argument(
        "--graceful-timeout",
        type=float_at_least(0.0),
        default=30.0,
        help="seconds in-flight requests get at shutdown (default 30)",
    )
    s.add_argument(
        "--log-level",
        default="info",
        choices=("critical", "error", "warning", "info", "debug"),
        help="uvicorn's log level (default info)",
    )


def _export_otel_args(sub: Any) -> None:
    """``toporoute export-otel``: a run directory as OpenTelemetry traces over OTLP (extra ``otel``; see
    toporoute/trace/otel.py)."""
    e = sub.add_parser(
        "export-otel",
        help="send a run directory's episodes, rounds and LLM calls as OpenTelemetry traces (OTLP)",
        description="Sends each episode of RUN_DIR as one trace, named as the OpenTelemetry GenAI semantic "
        "conventions name spans (an invoke_workflow span per episode, a span per round with its routed edges, a "
        "chat span per LLM call with its token usage), so Jaeger, Phoenix, Langfuse or any OTLP backend shows the "
        "run. Model text stays out unless --include-content. Headers (an API key) come from "
        "OTEL_EXPORTER_OTLP_HEADERS.",
        allow_abbrev=False,
    )
    e.set_defaults(command_parser=e)
    e.add_argument("run_dir", type=Path, metavar="RUN_DIR", help="a run directory (or one method folder)")
    e.add_argument(
        "--endpoint",
        default=None,
        help="collector URL: http://localhost:4318 (http; /v1/traces is appended unless the URL ends with it) or "
        "http://localhost:4317 (grpc) (default: $OTEL_EXPORTER_OTLP_TRACES_ENDPOINT, "
        "$OTEL_EXPORTER_OTLP_ENDPOINT, else localhost on the protocol's port)",
    )
    e.add_argument(
        "--protocol",
        choices=("http", "grpc"),
        default="http",
        help="http: OTLP/HTTP with protobuf (default); grpc: OTLP/gRPC (needs opentelemetry-exporter-otlp-proto-grpc)",
    )
    e.add_argument(
        "--service-name",
        default=None,
        help="the traces' service.name (default $OTEL_SERVICE_NAME, else toporoute)",
    )
    e.add_argument(
        "--include-content",
        action="store_true",
        help="also send model text: each call's reply (gen_ai.output.messages), descriptors, goals, answers and "
        "error messages (default: names, counts, edges, scores and times only)",
    )
    e.add_argument(
        "--timeout",
        type=float_at_least(0.0, strict=True),
        default=10.0,
        help="seconds per OTLP request, retries included (default 10)",
    )
    e.add_argument(
        "--console", action="store_true", help="print the spans as JSON on stdout instead of sending them"
    )


def _engine_args(
    parser: argparse.ArgumentParser,
    *,
    model_flag: str = "--model",
    title: str = "engine options",
    model_help: str = "model folder or id (default for vllm: the embedded SmolLM2-135M)",
) -> None:
    p = parser.add_argument_group(title)
    p.add_argument(
        "--engine",
        choices=("vllm", "openai", "replay"),
        default="vllm",
        help="vllm: in-process vLLM; openai: an OpenAI-compatible server at --base-url; replay: a recorded "
        "transcript (default vllm)",
    )
    p.add_argument(model_flag, default=None, help=model_help)
    p.add_argument(
        "--max-model-len",
        type=int_at_least(1),
        default=None,
        help="vllm context length (default: 8192 for the embedded model, else the model's own)",
    )
    p.add_argument(
        "--dtype",
        choices=("auto", "bfloat16", "float32"),
        default=None,
        help="vllm dtype (default $TOPOROUTE_DTYPE, else auto: on CPU bf16 where the processor has native bf16 "
        "(avx512_bf16/amx_bf16), else float32; on GPU the model's own); recorded in run.json",
    )
    p.add_argument(
        "--base-url",
        action="append",
        default=None,
        help="openai: API root; several servers of the model (the flag repeated, or URLs separated by commas) "
        "share the requests, each to the least busy, a failed one left until it answers again "
        "(default http://127.0.0.1:8000/v1)",
    )
    p.add_argument(
        "--api-key-env",
        default="OPENAI_API_KEY",
        help="openai: environment variable holding the key (default OPENAI_API_KEY)",
    )
    p.add_argument(
        "--guided-regex",
        action="store_true",
        help="openai: the server honours vLLM's structured_outputs regex, e.g. conductor plans under a grammar "
        "(default: off, as hosted APIs reject the field)",
    )
    p.add_argument(
        "--replay", type=Path, default=None, help="replay: the transcript to replay (required there)"
    )
    p.add_argument(
        "--record", type=Path, default=None, help="record every LLM call to this transcript (default: none)"
    )
    p.add_argument(
        "--reprompts", type=int_at_least(0), default=2, help="re-prompts on invalid JSON (default 2)"
    )
    parser.add_argument(
        "--eval-timeout",
        type=float_at_least(0.0, strict=True),
        default=10.0,
        help="seconds per code answer in the sandbox (default 10)",
    )


def _sampling_args(p: argparse.ArgumentParser, temperature: str) -> None:
    p.add_argument(
        "--max-tokens", type=int_at_least(1), default=4096, help="completion tokens per call (default 4096)"
    )
    p.add_argument(
        "--temperature",
        type=float_at_least(0.0),
        default=None,
        help=f"sampling temperature (default {temperature})",
    )
    p.add_argument(
        "--seed",
        type=int_at_least(0),
        default=0,
        help="root of every request seed and random choice (default 0)",
    )


def _option_groups(methods: Sequence[str]) -> list[OptionGroup]:
    """The option groups of ``methods`` in registry order, each set of options once (methods that take the same
    options share them)."""
    from .methods.registry import REGISTRY

    groups: dict[str, OptionGroup] = {}
    for name, spec in REGISTRY.items():
        if name in methods and spec.options is not None:
            groups.setdefault(spec.options.title, spec.options)
    return list(groups.values())


def _parse(argv: Sequence[str]) -> argparse.Namespace:
    """Parses ``argv`` (no abbreviations: ``--k`` is not ``--k-in``). An unknown option is an error that names
    the method it belongs to, or the options it may have meant (``--iter``: hiva's ``--iterations``)."""
    if argv and argv[0] in ("serve", "bench", "info", "export-otel"):  # need neither methods nor LLM extras
        light, sub = _root_parser()
        _serve_args(sub)
        _light_args(sub)
        _export_otel_args(sub)
        return light.parse_args(argv)
    from .methods.registry import REGISTRY

    named = [a for a in argv[1:] if a in REGISTRY] if argv and argv[0] == "run" else []
    parser = _parser(named)
    args, extra = parser.parse_known_args(argv)
    if extra:
        sub = args.command_parser  # errors with the subcommand's usage line
        owners = _method_flags() if args.command == "run" else {}
        mine = sorted(sub._option_string_actions)
        problems = []
        for flag in (a.split("=", 1)[0] for a in extra if a.startswith("-")):
            if flag in owners:
                problems.append(
                    f"{flag} is an option of {', '.join(owners[flag])}, which this command does not run"
                    + _suggestion(flag, mine, {})
                )
            else:
                problems.append(f"unrecognized option {flag}{_suggestion(flag, mine, owners)}")
        sub.error("; ".join(problems) or f"unrecognized arguments: {' '.join(extra)}")
    return args


def _method_flags() -> dict[str, list[str]]:
    """Every method option's flag and the methods that take it."""
    from .methods.registry import REGISTRY

    owners: dict[str, list[str]] = {}
    for name, spec in REGISTRY.items():
        if spec.options is None:
            continue
        probe = argparse.ArgumentParser(add_help=False)
        spec.options.add(probe.add_argument_group())
        for action in probe._actions:
            for flag in action.option_strings:
                owners.setdefault(flag, []).append(name)
    return owners


def _suggestion(flag: str, mine: Sequence[str], owners: dict[str, list[str]]) -> str:
    """``; did you mean ...?`` for an unknown ``flag``: the command's options and the methods' options that
    start with it or look like it, each method option naming its methods."""
    import difflib

    candidates = list(dict.fromkeys([*mine, *owners]))
    close = [c for c in candidates if c.startswith(flag) and c != flag]
    close += [c for c in difflib.get_close_matches(flag, candidates, n=3, cutoff=0.75) if c not in close]
    if not close:
        return ""
    shown = [
        c if c in mine else f"{c} (an option of {', '.join(owners[c])}, which this command does not run)"
        for c in close[:3]
    ]
    return f"; did you mean {' or '.join(shown)}?"


async def _engine(args: argparse.Namespace) -> Any:
    from .llm import Structured

    if args.engine == "vllm":
        from .llm import VLLMEngine

        # the engine logs its start and ready lines (and a first run's model conversion); see main()
        # the embedded model's own default (2048) is too short for ten rounds of memory
        max_len = args.max_model_len or (8192 if args.model is None else None)
        # only what the command line sets: the engine itself reads TOPOROUTE_DTYPE and TOPOROUTE_VERBOSE
        given = {"dtype": args.dtype, "verbose": True if args.verbose else None}
        inner: Any = await VLLMEngine.open(
            args.model, max_model_len=max_len, **{k: v for k, v in given.items() if v is not None}
        )
        # what vLLM runs in and why, for run.json
        chosen = {k: getattr(inner, k, None) for k in ("dtype", "dtype_reason")}
        args.engine_info = {k: v for k, v in chosen.items() if v is not None}
    elif args.engine == "openai":
        from .llm import OpenAIEngine

        if not args.model:
            raise ToporouteError("--engine openai needs --model (the server's model id)")
        # --base-url's list (each entry maybe comma-separated), or a meta spec's one URL
        entries = [args.base_url] if isinstance(args.base_url, str) else args.base_url or []
        urls = [u.strip() for entry in entries for u in entry.split(",") if u.strip()]
        inner = OpenAIEngine(
            args.model,
            base_url=urls or "http://127.0.0.1:8000/v1",
            api_key_env=args.api_key_env,
            guided_regex=args.guided_regex,
        )
        args.engine_info = {"base_urls": list(inner.base_urls)}  # for run.json
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
        ("finished", "ok", "{}"),  # scored episodes; accuracy is over them
        ("errors", "errors", "{}"),  # not scored (an engine failure, a crash): a rerun retries them
        ("accuracy", "accuracy", "{:.1%}"),  # as the report shows it: 50.0%
        ("tokens/task", "tokens_per_task", "{:.0f}"),
        ("calls/task", "calls_per_task", "{:.1f}"),
        ("rounds/task", "rounds_per_task", "{:.2f}"),
        ("wall s", "wall_s", "{:.1f}"),
        ("routing share", "routing_share", "{:.3%}"),
    ]
    table = [[h for h, _, _ in cols]]
    for r in rows:
        cells = [fmt.format(r.get(k, 0) if r.get(k) is not None else 0) for _, k, fmt in cols]
        if not r.get("ok"):
            cells[3] = "—"  # no finished episode has no accuracy (the report's "—", not 0.0%)
        table.append(cells)
    widths = [max(len(row[i]) for row in table) for i in range(len(cols))]
    for row in table:
        print(
            "  ".join(cell.rjust(w) if i else cell.ljust(w) for i, (cell, w) in enumerate(zip(row, widths)))
        )


async def _run(args: argparse.Namespace) -> int:
    from ._runlock import RunLock
    from .methods.harness import tasks_for
    from .methods.registry import REGISTRY, check_shared_options

    bad = [m for m in args.methods if m not in REGISTRY]
    if bad:
        raise ToporouteError(f"unknown method(s) {bad}; choose from {', '.join(REGISTRY)}")
    # a method runs after those it reads (the random baseline reads DyTopo's edge counts)
    named = list(dict.fromkeys(args.methods))
    methods = sorted(named, key=lambda m: any(dep in named for dep in REGISTRY[m].after))
    specs = [REGISTRY[m] for m in methods]
    check_shared_options(args, methods)
    # bad options fail before anything starts (the methods' settings are checked below); a method that reads
    # another's results (the random baseline) reads its options once that one has run
    options = {s.name: s.options.read(args, args.out) for s in specs if s.options is not None and not s.after}
    tasks = _load_tasks(args)
    for spec in specs:
        other = next((t for t in tasks if t.kind not in spec.kinds), None)
        if other is not None:
            raise ToporouteError(
                f"method {spec.name} solves {' and '.join(spec.kinds)} tasks; --tasks {args.tasks} holds "
                f"task {other.id!r} of kind {other.kind!r}"
            )
    with RunLock(args.out):
        print(f"{len(tasks)} task(s) from {args.tasks}; methods: {', '.join(methods)}", file=sys.stderr)
        encoder = None
        if any(spec.uses_encoder for spec in specs):
            from .embed import Encoder

            encoder = Encoder.default()
            encoder.encode(["I need a warm start.", "I provide one."])  # first ONNX run: not routing
        # every method that does not read another's results is built, and its folder checked, before the
        # engine starts: a bad setting, a missing checkpoint or a folder of other settings costs no model start
        built = {
            spec.name: _build(spec, args, encoder, options.get(spec.name)) for spec in specs if not spec.after
        }
        # a method that refuses some of the tasks (qmix: its checkpoint's training tasks) says so now
        for method in built.values():
            tasks_for(method, tasks)
        engine = await _engine(args) if args.engine != "vllm" else None
        try:
            for method in built.values():
                _check_folder(args, method, tasks, engine)
            if args.ray is not None:
                rows = await _run_on_ray(args, specs, built, options, tasks, encoder, engine)
            else:
                if engine is None:
                    engine = await _engine(args)
                rows = [
                    await _run_one(args, built.get(spec.name) or _build(spec, args, encoder), tasks, engine)
                    for spec in specs
                ]
        finally:
            if engine is not None:
                await engine.aclose()
        print()
        _print_table(rows)
        errors = sum(r.get("errors", 0) for r in rows)
        if errors:
            print(
                f"\n{errors} episode(s) ended with an error (the engine's failures among them); see the cause in "
                "episodes/*.json, and rerun the same command to retry them"
            )
        if args.report:
            from .methods.registry import report_sections
            from .trace.report import write_report

            paths = write_report(args.out, sections=report_sections())
            print(f"\nreport: {paths.html}")
    return 1 if errors else 0


def _load_tasks(args: argparse.Namespace) -> list[Task]:
    from .errors import InvalidArgumentError
    from .tasks import load_tasks

    try:
        tasks = load_tasks(args.tasks, limit=args.limit, offset=args.offset)
    except InvalidArgumentError as exc:  # said in the command's own words: the flag and what it was given
        flag = {"spec": "tasks", "limit": "limit", "offset": "offset"}.get(exc.arg or "")
        if flag is None:
            raise
        raise ToporouteError(f"--{flag} {getattr(args, flag)}: {exc}", exc.arg) from exc
    if not tasks:
        raise ToporouteError(f"--tasks {args.tasks} with --offset {args.offset} selects no task")
    return tasks


def _build(
    spec: MethodSpec, args: argparse.Namespace, encoder: Any, options: dict[str, Any] | None = None
) -> Method:
    """The method of ``spec`` with the command's settings (its settings classes check them); ``options`` are
    its options as read already (None: read them now)."""
    from .methods.registry import make_method

    return make_method(spec.name, rounds=args.rounds, encoder=encoder, **_settings(spec, args, options))


def _settings(spec: MethodSpec, args: argparse.Namespace, options: dict[str, Any] | None) -> dict[str, Any]:
    """The settings :func:`_build` gives the method of ``spec``: the command's sampling and the method's
    options (``options`` as read already; None: read them now)."""
    settings: dict[str, Any] = {"max_tokens": args.max_tokens, "seed": args.seed}
    if args.temperature is not None:  # else the method's own default (its settings class)
        settings["temperature"] = args.temperature
    if spec.options is not None:
        settings.update(spec.options.read(args, args.out) if options is None else options)
    return settings


def _run_info(args: argparse.Namespace, model: str) -> dict[str, Any]:
    """What run.json records of the command besides the method (the engine's dtype once it started)."""
    return {
        "tasks": args.tasks,
        "limit": args.limit,
        "offset": args.offset,
        "engine": args.engine,
        "model": model,
        **getattr(args, "engine_info", {}),
    }


def _check_folder(args: argparse.Namespace, method: Method, tasks: Sequence[Task], engine: Any) -> None:
    """Refuses a method folder that holds a run with other settings, before the engine starts (the model's
    name is known beforehand: vllm's from --model, the other engines' from the engine, which starts at once)."""
    from .llm.vllm_engine import engine_name
    from .methods.harness import check_resume, run_config, tasks_for

    model = engine.name if engine is not None else engine_name(args.model)
    config = run_config(method, tasks_for(method, tasks)[0], model, args.engine, _run_info(args, model))
    check_resume(args.out / method.name / "run.json", config)


async def _run_one(
    args: argparse.Namespace, method: Method, tasks: Sequence[Task], engine: Any
) -> dict[str, Any]:
    from .methods.harness import run_method

    print(f"== {method.name}", file=sys.stderr, flush=True)
    info = _run_info(args, engine.name)
    spec = _meta_spec(method)
    meta = None
    if spec:
        from .llm.routed import RoutedEngine

        meta, info["meta_engine"] = await _meta_engine(args, spec)
        engine = RoutedEngine(engine, meta, getattr(method, "meta_kinds", ()))
    try:
        return await run_method(
            method,
            tasks,
            engine,
            args.out / method.name,
            info=info,
            concurrency=args.concurrency,
            eval_timeout_s=args.eval_timeout,
            progress=not args.no_progress,
        )
    finally:
        if meta is not None:
            await meta.aclose()


def _meta_spec(method: Method) -> str:
    """The second engine a method names (TacoMAS's --meta-model, AgentConductor's --orchestrator), which gets
    the calls of its ``meta_kinds``; "" for none."""
    return getattr(method, "meta_engine_spec", "") or getattr(
        getattr(method, "settings", None), "meta_model", ""
    )


def _meta_args(args: argparse.Namespace, spec: str) -> argparse.Namespace:
    """The engine options of a ``[ENGINE:]MODEL[@BASE_URL]`` spec: the run's own for what the spec leaves out
    (a recording goes to ``<record>.meta<suffix>``)."""
    from .llm.routed import parse_engine_spec

    es = parse_engine_spec(spec)
    kind = es.engine or args.engine
    given = dict(vars(args), engine=kind, engine_info={}, base_url=es.base_url or args.base_url)
    given.update(
        model=None if kind == "replay" else es.model,
        replay=Path(es.model) if kind == "replay" else args.replay,
        max_model_len=None,
        record=None if args.record is None else args.record.with_suffix(".meta" + args.record.suffix),
    )
    return argparse.Namespace(**given)


async def _meta_engine(args: argparse.Namespace, spec: str) -> tuple[Any, dict[str, Any]]:
    """The engine of a ``[ENGINE:]MODEL[@BASE_URL]`` spec, opened (:func:`_meta_args`), and what run.json
    records of it."""
    meta_args = _meta_args(args, spec)
    meta = await _engine(meta_args)
    return meta, {"spec": spec, "engine": meta_args.engine, "model": meta.name, **meta_args.engine_info}


_ENGINE_OPTIONS = (
    "engine",
    "model",
    "max_model_len",
    "dtype",
    "verbose",
    "base_url",
    "api_key_env",
    "guided_regex",
    "replay",
    "record",
    "reprompts",
)
"""What :func:`_engine` reads of the command's options: all a Ray actor gets to open its engine."""


def _engine_factory(args: argparse.Namespace) -> Any:
    """:func:`_engine` with the engine options of ``args`` only, to send to Ray actors."""
    from functools import partial

    return partial(_engine, argparse.Namespace(**{k: getattr(args, k) for k in _ENGINE_OPTIONS}))


async def _engine_label(args: argparse.Namespace) -> str:
    """The model name an engine of ``args`` reports, without starting vLLM (the other engines open at once)."""
    if args.engine == "vllm":
        from .llm.vllm_engine import engine_name

        return engine_name(args.model)
    engine = await _engine(args)
    try:
        return str(engine.name)
    finally:
        await engine.aclose()


async def _run_on_ray(
    args: argparse.Namespace,
    specs: Sequence[MethodSpec],
    built: dict[str, Method],
    options: dict[str, dict[str, Any]],
    tasks: Sequence[Task],
    encoder: Any,
    engine: Any,
) -> list[dict[str, Any]]:
    """The methods of ``specs`` in order, their episodes on Ray actors (``--ray``); this process keeps the run
    folder (:mod:`toporoute.distributed.ray_run`)."""
    from dataclasses import replace
    from functools import partial

    from .distributed.ray_run import MethodJob, RayCluster, RayOptions
    from .methods.registry import make_method

    if args.record is not None:
        raise ToporouteError(
            "--record cannot be used with --ray: each actor would record its own calls; record a local run",
            "ray",
        )
    ray = RayOptions(
        address=None if args.ray == "local" else args.ray,
        actors=args.ray_actors,
        gpus_per_actor=args.ray_gpus_per_actor,
        cpus_per_actor=args.ray_cpus_per_actor,
        concurrency=args.concurrency,
        verbose=args.verbose,
    )
    model = engine.name if engine is not None else await _engine_label(args)
    rows = []
    async with RayCluster(ray, _engine_factory(args), gpu_engine=args.engine == "vllm") as cluster:
        for spec in specs:
            method = built.get(spec.name) or _build(spec, args, encoder)
            print(f"== {method.name}", file=sys.stderr, flush=True)
            settings = _settings(spec, args, options.get(spec.name))
            job = MethodJob(
                make_method=partial(make_method, spec.name, rounds=args.rounds, **settings),
                eval_timeout_s=args.eval_timeout,
            )
            info = {**_run_info(args, model), "ray": cluster.describe()}
            meta = _meta_spec(method)
            if meta:
                meta_args = _meta_args(args, meta)
                job = replace(
                    job,
                    meta_engine=_engine_factory(meta_args),
                    meta_kinds=tuple(getattr(method, "meta_kinds", ())),
                )
                label = await _engine_label(meta_args)
                info["meta_engine"] = {"spec": meta, "engine": meta_args.engine, "model": label}
            rows.append(
                await cluster.run_method(
                    method,
                    job,
                    tasks,
                    args.out / method.name,
                    model=model,
                    engine="Structured",
                    info=info,
                    progress=not args.no_progress,
                )
            )
    return rows


async def _train(args: argparse.Namespace) -> int:
    import importlib.util

    if importlib.util.find_spec("torch") is None:
        raise ToporouteError(
            "toporoute train needs PyTorch: pip install 'toporoute[train]' (or '.[run]', which brings it with vLLM)"
        )
    from ._runlock import RunLock

    lock = RunLock(args.out, what="a training run").acquire()  # held by the trainer until it ends
    try:
        if args.method == "conductor":
            return await _train_conductor(args, lock)
        return await _train_locked(args, lock)
    finally:
        lock.release()


async def _train_conductor(args: argparse.Namespace, lock: RunLock) -> int:
    from .methods.conductor import ConductorSettings
    from .methods.conductor.plugin import OPTIONS
    from .methods.conductor.train import ConductorTrainer
    from .methods.conductor.train_config import TRAIN_OPTIONS, GRPOConfig
    from .methods.options import settings_of

    tasks = _load_tasks(args)
    given: dict[str, Any] = {"max_tokens": args.max_tokens, "seed": args.seed, **OPTIONS.read(args, args.out)}
    if args.temperature is not None:
        given["temperature"] = args.temperature
    if given.get("orchestrator") is not None:
        raise ToporouteError(
            "train conductor trains --model; --orchestrator belongs to 'toporoute run conductor'"
        )
    settings = settings_of(ConductorSettings, given, "conductor")
    train = GRPOConfig(**TRAIN_OPTIONS.read(args, args.out), seed=args.seed)
    import importlib.util

    missing = [m for m in ("trl", "peft", "datasets") if importlib.util.find_spec(m) is None]
    if missing:
        raise ToporouteError(
            f"toporoute train conductor needs {', '.join(missing)}: pip install 'toporoute[train]'"
        )
    print(
        f"{len(tasks)} training task(s) from {args.tasks}; {train.steps} GRPO steps of "
        f"{train.prompts_per_step} x {train.group_size} plans; reward {train.reward}",
        file=sys.stderr,
    )
    info: dict[str, Any] = {"tasks": args.tasks, "engine": args.engine}
    engine = None
    if "execution" in train.components:  # the role agents of the executed plans
        role_args = argparse.Namespace(**{**vars(args), "model": args.role_model})
        engine = await _engine(role_args)
        info.update(role_model=engine.name, **getattr(role_args, "engine_info", {}))
    try:
        trainer = ConductorTrainer(
            tasks,
            args.out,
            model=args.model,
            settings=settings,
            train=train,
            engine=engine,
            loop=asyncio.get_running_loop(),
            info=info,
            progress=not args.no_progress,
            lock=lock,
        )
        result = await asyncio.to_thread(trainer.run)
    finally:
        if engine is not None:
            await engine.aclose()
    print(
        f"\norchestrator: {result['orchestrator']}  ({result.get('step', 0)} GRPO steps, {result['wall_s']} s)"
    )
    print(
        f"log: {args.out / 'log.jsonl'}; figures: {args.out / 'figures'}; report: {args.out / 'report.html'}"
    )
    print(
        f"evaluate: toporoute run conductor --orchestrator {result['orchestrator']} --offset "
        f"{args.offset + len(tasks)} ...  (its training tasks are refused)"
    )
    return 0


async def _train_locked(args: argparse.Namespace, lock: RunLock) -> int:
    from .methods.qmix import Features, QMixSettings
    from .methods.qmix.plugin import LOOP_OPTIONS, read_qmix_network_options
    from .methods.qmix.train import Trainer
    from .methods.qmix.train_config import TRAIN_OPTIONS, TrainConfig

    tasks = _load_tasks(args)
    features = Features(task_feature=args.task_feature, legacy=args.legacy_obs)
    network = read_qmix_network_options(args)
    settings = QMixSettings(
        rounds=args.rounds,
        max_tokens=args.max_tokens,
        seed=args.seed,
        **({} if args.temperature is None else {"temperature": args.temperature}),
        **LOOP_OPTIONS.read(args, args.out),
    )
    train = TrainConfig(**TRAIN_OPTIONS.read(args, args.out), dropout=network.dropout, seed=args.seed)
    print(f"{len(tasks)} training task(s) from {args.tasks}; {args.episodes} episodes", file=sys.stderr)
    engine = await _engine(args)
    try:
        trainer = Trainer(
            tasks,
            engine,
            args.out,
            net=network.config,
            features=features,
            settings=settings,
            train=train,
            info={
                "tasks": args.tasks,
                "engine": args.engine,
                "model": engine.name,
                **getattr(args, "engine_info", {}),
            },
            eval_timeout_s=args.eval_timeout,
            progress=not args.no_progress,
            lock=lock,
        )
        result = await trainer.run()
    finally:
        await engine.aclose()
    print(f"\npolicy: {args.out / 'policy.safetensors'}  ({result.get('grad_steps', 0)} gradient steps)")
    print(f"log: {args.out / 'log.jsonl'}; figures: {args.out / 'figures'}")
    return 0


def _serve_config(args: argparse.Namespace) -> Any:
    """The :class:`~toporoute.serve.ServeConfig` of a parsed ``toporoute serve``: its fields' flags, and the
    token from ``--token-file`` (else ``$TOPOROUTE_TOKEN``)."""
    from .serve.config import SERVE_OPTIONS, ServeConfig
    from .serve.server import read_token

    return ServeConfig(**SERVE_OPTIONS.read(args), token=read_token(args.token_file))


def _serve(args: argparse.Namespace) -> int:
    from .serve.server import serve

    return serve(_serve_config(args), log_level=args.log_level, graceful_timeout=args.graceful_timeout)


def _export_otel(args: argparse.Namespace) -> int:
    from .trace.reader import load_run

    run = load_run(args.run_dir)  # a wrong RUN_DIR is named first, with or without the extra
    try:
        from .trace.otel import ExportError, export_run, make_exporter
    except ImportError as exc:  # its message names the extra to install
        raise ToporouteError(f"toporoute export-otel: {exc}") from exc
    for problem in run.problems:
        print(f"toporoute: warning: {problem}", file=sys.stderr)
    exporter, where = make_exporter(
        args.endpoint, protocol=args.protocol, timeout_s=args.timeout, console=args.console
    )
    try:
        counts = export_run(
            run, exporter, service_name=args.service_name, include_content=args.include_content
        )
    except ExportError as exc:
        raise ToporouteError(f"could not send the spans to {where}: {exc}") from exc
    print(
        f"sent {counts.spans} spans ({counts.episodes} episodes, {counts.rounds} rounds, {counts.calls} LLM calls) "
        f"to {where}",
        file=sys.stderr if args.console else sys.stdout,
    )
    return 0


def _info(args: argparse.Namespace) -> int:
    import json

    from ._installation import format_installation, installation_info

    info = installation_info()
    print(json.dumps(info, indent=1) if args.json else format_installation(info))
    return 0


_LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``toporoute`` command."""
    args = _parse(sys.argv[1:] if argv is None else argv)
    level = os.environ.get("TOPOROUTE_LOG", "WARNING")
    if level.strip().upper() not in _LOG_LEVELS:
        print(
            f"toporoute: error: TOPOROUTE_LOG must be one of {', '.join(_LOG_LEVELS)}; got {level!r}",
            file=sys.stderr,
        )
        return 2
    logging.basicConfig(level=level.strip().upper(), format="%(message)s")
    engine_log = logging.getLogger("toporoute.llm")
    if engine_log.getEffectiveLevel() > logging.INFO:  # the engine's start line, ready line, model conversion
        engine_log.setLevel(logging.INFO)
    try:
        status = _dispatch(args)
        sys.stdout.flush()  # here, where a reader that went away is caught below, not at interpreter exit
        return status
    except KeyboardInterrupt:
        print("\ninterrupted: finished episodes are saved; rerun the same command to resume", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # the reader went away (toporoute info --json | head): quiet, and nothing more to write at exit
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 141  # 128 + SIGPIPE, as a process the signal ended
    except (ToporouteError, ValueError, OSError) as exc:
        print(f"toporoute: error: {exc}", file=sys.stderr)
        return 2


def _dispatch(args: argparse.Namespace) -> int:
    if args.command == "run":
        return asyncio.run(_run(args))
    if args.command == "train":
        return asyncio.run(_train(args))
    if args.command == "serve":
        return _serve(args)
    if args.command == "bench":
        from .benchmark.command import run_command

        return run_command(args)
    if args.command == "info":
        return _info(args)
    if args.command == "export-otel":
        return _export_otel(args)
    from .methods.registry import report_sections
    from .trace.report import write_report

    paths = write_report(args.run_dir, args.out, sections=report_sections())
    print(paths.html)
    for f in paths.figures:
        print(f)
    return 0


if __name__ == "__main__":
    sys.exit(main())
