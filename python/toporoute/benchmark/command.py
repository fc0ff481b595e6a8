"""``toporoute bench``: its options and what it does with them (the ``toporoute`` command only dispatches here).

Exit status: 0; 2 for a usage error (an unknown op, size or backend, an unavailable backend named explicitly,
matplotlib missing for ``--plot``, an unreadable ``--compare`` file); 1 when ``--fail-on-regression`` is given
and ``--compare`` found a regression beyond noise.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .cases import OPS
from .results import BUSY
from .runner import BACKEND_CHOICES, BenchOptions, check_ops, parse_sizes, resolve_backends, run_bench

__all__ = ["add_arguments", "run_command"]


def _positive_int(value: str) -> int:
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {n}")
    return n


def _positive_float(value: str) -> float:
    try:
        x = float(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {value!r}") from None
    if not x > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number, got {x}")
    return x


def add_arguments(sub: Any) -> None:
    """Adds the ``bench`` subcommand to ``sub`` (an argparse subparsers object)."""
    width = max(len(n) for n in OPS)
    listing = "\n".join(
        f"  {n.ljust(width)}  size = {spec.meaning}; default sizes {','.join(map(str, spec.defaults))}"
        + (f"; vs {spec.alternative}" if spec.alternative else "")
        for n, spec in OPS.items()
    )
    b = sub.add_parser(
        "bench",
        help="time the routing ops, the encoder and the Router on each backend (table on stdout)",
        description="Times each OP at each size on each backend and against its usual alternative, in one run: "
        "a warm-up call, then --repeats rounds of at least --round-time seconds (a slow call gets fewer rounds "
        "within --max-time). Each backend's results are checked against the reference's first. Progress goes "
        "to stderr, the tables to stdout; 'vs ref' and 'vs alt' are the reference's and the alternative's "
        "median over the row's (above 1: faster).",
        epilog=f"ops (every size is a batch B):\n{listing}\n\n--compare: a case regressed when new/old median "
        "exceeds 1 + max(10%, 3 x the larger relative IQR of the two runs).",
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    b.add_argument("ops", nargs="*", metavar="OP", help="ops to time (default: all; see below)")
    b.add_argument(
        "--backend",
        default="all",
        help=f"{'|'.join(BACKEND_CHOICES)} (default all: every backend available here, the others noted; a "
        "named backend that is not available is an error)",
    )
    b.add_argument(
        "--sizes",
        nargs="+",
        default=[],
        metavar="SPEC",
        help="sizes for every op named (1,64,4096) or for one op (toposort=16,256); default: each op's own",
    )
    b.add_argument("--quick", action="store_true", help="small sizes, 3 short rounds: under 15 s")
    b.add_argument("--repeats", type=_positive_int, default=None, help="timed rounds per side (default 5)")
    b.add_argument(
        "--round-time", type=_positive_float, default=None, help="least seconds per round (default 0.02)"
    )
    b.add_argument(
        "--max-time",
        type=_positive_float,
        default=None,
        help="seconds of timed rounds per side at most (1.0)",
    )
    b.add_argument(
        "--threads",
        type=_positive_int,
        default=None,
        help="threads of the compiled core (OpenMP), PyTorch and ONNX Runtime (default: as configured)",
    )
    b.add_argument("--no-alternatives", action="store_true", help="time the backends only")
    b.add_argument(
        "--json", type=Path, default=None, metavar="FILE", help="write the results and the machine"
    )
    b.add_argument(
        "--compare", type=Path, default=None, metavar="OLD.json", help="compare with an older --json"
    )
    b.add_argument(
        "--fail-on-regression",
        action="store_true",
        help="exit 1 when --compare finds a regression beyond noise",
    )
    b.add_argument(
        "--plot", type=Path, default=None, metavar="FILE.png", help="latency against size (matplotlib)"
    )
    b.set_defaults(bench_parser=b)


def _progress(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run_command(args: argparse.Namespace) -> int:
    """Runs ``toporoute bench``; usage errors go through the subcommand's parser (exit status 2)."""
    from ..errors import ToporouteError
    from .output import check_plotting, format_comparison, format_run, plot_run
    from .results import compare_runs, read_run

    parser: argparse.ArgumentParser = args.bench_parser
    try:
        ops = check_ops(args.ops)
        sizes = parse_sizes(args.sizes, ops)
        backends, notes = resolve_backends(args.backend)
        old = read_run(args.compare) if args.compare is not None else None
        if args.plot is not None:
            check_plotting()
    except ToporouteError as exc:
        parser.error(str(exc))
    quick = args.quick
    opts = BenchOptions(
        ops=ops,
        backends=backends,
        sizes=sizes,
        quick=quick,
        repeats=args.repeats or (3 if quick else 5),
        round_time=args.round_time or (0.005 if quick else 0.02),
        max_time=args.max_time or (0.3 if quick else 1.0),
        threads=args.threads,
        alternatives=not args.no_alternatives,
    )
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
    print(format_run(run))
    if args.json is not None:
        run.write(args.json)
        print(f"\nresults: {args.json}")
    if args.plot is not None:
        plot_run(run, args.plot)
        print(f"plot: {args.plot}")
    if old is not None:
        cmp = compare_runs(old, run)
        print()
        print(format_comparison(cmp, str(args.compare)))
        if args.fail_on_regression and cmp.regressions:
            return 1
    return 0
