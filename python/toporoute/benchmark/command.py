"""``toporoute bench``: its options and what it does with them (the ``toporoute`` command only dispatches here).

Exit status: 0; 2 for a usage error (an unknown op, size, team size or backend, ``--agents`` for ops without a
team-size axis only, an unavailable backend named explicitly,
matplotlib missing for ``--plot``, an unreadable ``--compare`` or ``--from`` file, ``--from`` with options that
only a new run takes); 1 when ``--fail-on-regression`` is given and ``--compare`` found a regression beyond noise.

With ``--format markdown`` or ``csv``, stdout holds only the document; the lines naming the files written go to
stderr.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .._argtypes import float_at_least, int_at_least
from .cases import OPS
from .results import BUSY, BenchRun
from .runner import (
    BACKEND_CHOICES,
    BenchOptions,
    agent_ops,
    check_ops,
    parse_agents,
    parse_sizes,
    resolve_backends,
    run_bench,
)

FORMATS = ("text", "markdown", "csv")

__all__ = ["add_arguments", "run_command"]


# the timing options (argparse dests): what each sets, and its defaults (a full run's, a --quick run's)
_TIMING: dict[str, tuple[str, tuple[float, float]]] = {
    "repeats": ("timed rounds per side", (5, 3)),
    "round_time": ("least seconds per round", (0.02, 0.005)),
    "max_time": ("seconds of timed rounds per side at most, and of warm-up calls", (1.0, 0.3)),
}


def add_arguments(sub: Any) -> None:
    """Adds the ``bench`` subcommand to ``sub`` (an argparse subparsers object)."""
    width = max(len(n) for n in OPS)
    listing = "\n".join(
        f"  {n.ljust(width)}  size = {spec.meaning}; default sizes {','.join(map(str, spec.defaults))}"
        + (f"; --agents N up to {spec.max_agents}" if spec.agents else "")
        + (f"; vs {', '.join(spec.alternatives)}" if spec.alternatives else "")
        for n, spec in OPS.items()
    )
    takers = ", ".join(agent_ops(OPS))
    b = sub.add_parser(
        "bench",
        allow_abbrev=False,
        help="time the routing ops, the encoder and the Router on each backend (table on stdout)",
        description="Times each OP at each size on each backend and against its usual alternatives, in one run: "
        "warm-up calls until the call stops getting faster (a cold first call is never timed), then --repeats "
        "rounds of at least --round-time seconds (a slow call gets fewer rounds within --max-time). Each "
        "backend's results are checked against the reference's first. Progress goes "
        "to stderr, the tables to stdout (one per op and team size); 'vs ref' and 'vs alt' are the reference's "
        "and the fastest alternative's median over the row's (above 1: faster).",
        epilog=f"ops (every size is a batch B):\n{listing}\n\n--compare: a case regressed when new/old median "
        "exceeds 1 + max(10%, 3 x the larger relative IQR of the two runs).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    b.add_argument("ops", nargs="*", default=[], metavar="OP", help="ops to time (default: all; see below)")
    b.add_argument(
        "--backend",
        default="all",
        help=f"{'|'.join(BACKEND_CHOICES)} (default all: every backend available here, the others noted; a "
        "named backend that is not available is an error). With cuda, the ops with a CUDA kernel are also timed "
        "on device-resident inputs (PyTorch CUDA tensors, else CuPy; side cuda-device: back-to-back calls, one "
        "synchronisation per round) against the same computation in PyTorch on the GPU (torch-cuda: route, "
        "qmix_forward, qmix_mix) and, for route, a device-to-device copy of its inputs (d2d-copy), with GB/s",
    )
    b.add_argument(
        "--sizes",
        nargs="+",
        default=[],
        metavar="SPEC",
        help="sizes for every op named (1,64,4096) or for one op (toposort=16,256); default: each op's own",
    )
    b.add_argument(
        "--agents",
        default=None,
        metavar="N1,N2,...",
        help=f"team sizes: agents per episode (nodes per graph) of the ops with that axis ({takers}), e.g. "
        "8,64,128,256: one table per op and N; the other ops ignore it, and naming only them is an error "
        "(default: each op's own N, below)",
    )
    b.add_argument(
        "--quick", action="store_true", help="small sizes, 3 short rounds: under 15 s (default off)"
    )
    for dest, (what, (full, quick)) in _TIMING.items():
        b.add_argument(
            "--" + dest.replace("_", "-"),
            type=int_at_least(1) if isinstance(full, int) else float_at_least(0.0, strict=True),
            default=None,
            help=f"{what} (default {full}; {quick} with --quick)",
        )
    b.add_argument(
        "--threads",
        type=int_at_least(1),
        default=None,
        help="threads of the compiled core (OpenMP), PyTorch and ONNX Runtime (default: as configured)",
    )
    b.add_argument(
        "--no-alternatives",
        action="store_true",
        help="time the backends only (default: the alternatives too)",
    )
    b.add_argument(
        "--json",
        type=Path,
        default=None,
        metavar="FILE",
        help="write the results (raw round times included) and the machine (default: not written)",
    )
    b.add_argument(
        "--compare",
        type=Path,
        default=None,
        metavar="OLD.json",
        help="compare with an older --json (default: no comparison)",
    )
    b.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when --compare finds a regression beyond noise (default: exit 0)",
    )
    b.add_argument(
        "--plot",
        type=Path,
        default=None,
        metavar="FILE.png",
        help="latency against size (matplotlib; default: not drawn)",
    )
    b.add_argument(
        "--format",
        choices=FORMATS,
        default="text",
        help="how stdout shows the results and the --compare comparison (default text: aligned tables); "
        "markdown: a document with one table per op; csv: one line per op, size and side with the times in "
        "seconds and the raw round times (with --compare, its columns too). Other lines then go to stderr",
    )
    b.add_argument(
        "--from",
        dest="from_json",
        type=Path,
        default=None,
        metavar="RUN.json",
        help="show a saved --json result instead of timing (default: time a new run); with --compare, "
        "compare the two saved runs. Takes no OP and none of the options of a new run",
    )
    b.set_defaults(bench_parser=b)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_command(args: argparse.Namespace) -> int:
    """Runs ``toporoute bench``; usage errors go through the subcommand's parser (exit status 2)."""
    from ..errors import ToporouteError
    from .export import to_csv, to_markdown
    from .output import check_plotting, format_comparison, format_run, plot_run
    from .results import compare_runs, read_run

    parser: argparse.ArgumentParser = args.bench_parser
    if args.from_json is not None:
        extra = _new_run_options(args, parser)
        if extra:
            parser.error(f"--from shows a saved run; it takes no {', '.join(extra)}")
    try:
        plan = read_run(args.from_json, "from") if args.from_json is not None else _options(args)
        old = read_run(args.compare) if args.compare is not None else None
        if args.plot is not None:
            check_plotting()
    except ToporouteError as exc:
        parser.error(str(exc))
    run = plan if isinstance(plan, BenchRun) else _time_new_run(*plan)
    cmp = compare_runs(old, run) if old is not None else None
    text = args.format == "text"
    aside = sys.stdout if text else sys.stderr  # keeps a Markdown or CSV stdout a clean document
    if args.format == "markdown":
        print(to_markdown(run, cmp, str(args.compare)), end="")
    elif args.format == "csv":
        print(to_csv(run, cmp), end="")
    else:
        print(format_run(run))
    if args.json is not None:
        run.write(args.json)
        print(f"\nresults: {args.json}", file=aside)
    if args.plot is not None:
        plot_run(run, args.plot)
        print(f"plot: {args.plot}", file=aside)
    if cmp is not None and text:
        print()
        print(format_comparison(cmp, str(args.compare)))
    if args.fail_on_regression and cmp is not None and cmp.regressions:
        return 1
    return 0


# the options only a new run takes (argparse dests, in the order a usage error names them); each one's flag and
# default are its declaration's in add_arguments
_NEW_RUN_OPTIONS = (
    "ops",
    "sizes",
    "agents",
    "backend",
    "quick",
    "repeats",
    "round_time",
    "max_time",
    "threads",
    "no_alternatives",
    "json",
)


def _new_run_options(args: argparse.Namespace, parser: argparse.ArgumentParser) -> list[str]:
    """The options given that only a new run takes, by flag (a positional by its metavar)."""
    actions = {a.dest: a for a in parser._actions}
    given = [actions[dest] for dest in _NEW_RUN_OPTIONS if getattr(args, dest) != actions[dest].default]
    return [a.option_strings[0] if a.option_strings else str(a.metavar) for a in given]


def _options(args: argparse.Namespace) -> tuple[BenchOptions, tuple[str, ...]]:
    """The new run's options from the command line, and the notes on the backends left out."""
    ops = check_ops(args.ops)
    sizes = parse_sizes(args.sizes, ops)
    backends, notes = resolve_backends(args.backend)
    timing = {dest: getattr(args, dest) or defaults[args.quick] for dest, (_, defaults) in _TIMING.items()}
    opts = BenchOptions(
        ops=ops,
        backends=backends,
        sizes=sizes,
        quick=args.quick,
        repeats=int(timing["repeats"]),
        round_time=timing["round_time"],
        max_time=timing["max_time"],
        threads=args.threads,
        alternatives=not args.no_alternatives,
        agents=parse_agents(args.agents),
    )
    return opts, notes


def _time_new_run(opts: BenchOptions, notes: tuple[str, ...]) -> BenchRun:
    for note in notes:
        print(f"note: {note}", file=sys.stderr)
    run = run_bench(opts, _progress, notes)
    other = run.machine["during_run"]["other_cpu_share"]
    if other is not None and other > BUSY:
        print(
            f"warning: other processes used {other:.0%} of the CPUs during the run: the parallel (OpenMP) paths "
            "wait for descheduled threads, so their timings are unreliable; rerun on a quiet machine or with "
            "--threads 1",
            file=sys.stderr,
        )
    return run
