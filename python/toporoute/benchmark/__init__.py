"""Micro-benchmarks of the routing ops, the encoder and the Router: ``toporoute bench`` and its library form.

- :mod:`~toporoute.benchmark.inputs`: the text input builders (shared with the pytest suites under ``bench/``;
  the ops' array inputs are their samples, :mod:`toporoute.backends.samples`);
- :mod:`~toporoute.benchmark.cases`: per op, what its size means, its sizes, its calls and its alternative;
- :mod:`~toporoute.benchmark.timing`: warm-up until the call stops getting faster, rounds, median / min / IQR
  and the raw round times;
- :mod:`~toporoute.benchmark.runner`: one run over ops, sizes and backends, results checked against the
  reference;
- :mod:`~toporoute.benchmark.device`: device-resident inputs (PyTorch CUDA tensors, else CuPy), the
  synchronising clock and the PyTorch versions of the ops compared with on the GPU;
- :mod:`~toporoute.benchmark.results`: the JSON result file and the comparison of two runs;
- :mod:`~toporoute.benchmark.output`: tables and the figure; :mod:`~toporoute.benchmark.export`: Markdown and
  CSV; :mod:`~toporoute.benchmark.machine`: the machine record and the thread count.

Example::

    from toporoute.benchmark import BenchOptions, format_run, run_bench
    run = run_bench(BenchOptions(ops=("route",), sizes={"route": (1, 64)}))
    print(format_run(run))
"""

from __future__ import annotations

from .cases import OPS, OpSpec
from .export import to_csv, to_markdown
from .output import format_comparison, format_run, plot_run
from .results import SCHEMA, SCHEMA_VERSION, BenchRun, CaseChange, Comparison, Row, compare_runs, read_run
from .runner import BenchOptions, run_bench
from .timing import Timing, measure

__all__ = [
    "OPS",
    "SCHEMA",
    "SCHEMA_VERSION",
    "BenchOptions",
    "BenchRun",
    "CaseChange",
    "Comparison",
    "OpSpec",
    "Row",
    "Timing",
    "compare_runs",
    "format_comparison",
    "format_run",
    "measure",
    "plot_run",
    "read_run",
    "run_bench",
    "to_csv",
    "to_markdown",
]
