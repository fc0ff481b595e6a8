"""Public, typed core ops, the facade over :mod:`toporoute.backends`. Array conventions are the same everywhere:

- graphs are dense boolean adjacency ``adj[b, src, dst]`` (row = sender, column = receiver), batch-first,
  padded to N with an ``active[b, n]`` mask; scores use the same layout;
- every op also accepts a single graph (no batch axis) and then returns results without it;
- ``backend=`` is ``"reference"`` (numpy), ``"cpu"`` (compiled core) or ``"cuda"``; ``None`` uses the
  ``TOPOROUTE_BACKEND`` environment variable, else CUDA for device arrays, else the compiled core when built,
  else the reference;
- bad input raises a :class:`ValueError` subclass from :mod:`toporoute.errors` naming the argument.

See ``backends/reference.py`` for the exact semantics of each op.

Layout: every op is declared once in :data:`toporoute.types.op_table.OPS` (its arguments in the order every
backend's kernel takes them, which carry the batch axis, its result); :mod:`._dispatch` builds from that
declaration the one recipe of every op (check, pick the backend's kernel, add and drop the batch axis of a single
graph). The public functions live by family: :mod:`._facade` (routing, pooling, graphs, AgentConductor, Q-Mix),
:mod:`._bandit` (the HiVA bandit ops: Thompson selection, Beta and synergy updates), :mod:`.dag` (the HiVA DAG
evolution ops ``dag_edit`` / ``dag_repair``), :mod:`.team` (the team edit projection ``team_project``) and
:mod:`.schedule` (graphs with cycles: execution waves, score statistics, topology distance); each holds the
checks of its ops (:mod:`._validate` the shared ones) and lists its ops in its ``__all__``, which this package
re-exports whole (a new op in a family touches no line here). Where each backend's kernel is:
``backends/reference.py`` and ``backends/_reference_*.py`` (numpy, the semantics), ``backends/cpu.py`` (over
``toporoute._core``, built from ``cpp/``), ``backends/cuda.py`` (over the CUDA kernels in ``kernels/``);
``toporoute info`` lists which backend registers which op. The types they return and take live below ``ops``
and ``backends`` alike, in :mod:`toporoute.types` (result types, Q-Mix weights, the AgentConductor plan
language, the DAG and team code tables), and are re-exported here.
"""

from __future__ import annotations

from ..types import results as _results
from ..types.conductor_topology import CheckOptions, Context, TopologyBatch
from ..types.dag_codes import (
    EDIT_ADD_PARALLEL,
    EDIT_ADD_SERIAL,
    EDIT_CONNECT_TO_AGGREGATOR,
    EDIT_KINDS,
    EDIT_NO_CHANGE,
    EDIT_PADDING,
    EDIT_REASONS,
    EDIT_REMOVE_SUCCESSOR,
)
from ..types.qmix_params import QMixParams
from ..types.results import *  # the result types: their __all__ is added to ours below
from ..types.team_codes import (
    TEAM_BIRTH,
    TEAM_DEATH,
    TEAM_EDGE_ADD,
    TEAM_EDGE_REMOVE,
    TEAM_KINDS,
    TEAM_PADDING,
    TEAM_REASONS,
    TEAM_REPLACE,
)
from . import _bandit, _facade
from . import dag as _dag
from . import schedule as _schedule
from . import team as _team
from ._bandit import *  # the ops of each family module: their __all__ lists are added to ours below
from ._facade import *
from .dag import *
from .schedule import *
from .team import *

__all__ = [
    "EDIT_ADD_PARALLEL",
    "EDIT_ADD_SERIAL",
    "EDIT_CONNECT_TO_AGGREGATOR",
    "EDIT_KINDS",
    "EDIT_NO_CHANGE",
    "EDIT_PADDING",
    "EDIT_REASONS",
    "EDIT_REMOVE_SUCCESSOR",
    "TEAM_BIRTH",
    "TEAM_DEATH",
    "TEAM_EDGE_ADD",
    "TEAM_EDGE_REMOVE",
    "TEAM_KINDS",
    "TEAM_PADDING",
    "TEAM_REASONS",
    "TEAM_REPLACE",
    "CheckOptions",
    "Context",
    "QMixParams",
    "TopologyBatch",
]
__all__ += _results.__all__
__all__ += _facade.__all__
__all__ += _bandit.__all__
__all__ += _dag.__all__
__all__ += _team.__all__
__all__ += _schedule.__all__
