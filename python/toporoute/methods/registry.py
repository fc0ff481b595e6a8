"""The methods ``toporoute run`` knows: each method package registers a
:class:`~toporoute.methods.options.MethodSpec` (its name, summary, builder and the option group its settings'
fields declare) in its ``plugin`` module, and this module lists them.

The CLI lists the registry, shows a method's options in their own group of ``toporoute run METHOD --help``,
and turns the parsed options into settings with the group's ``read``; :func:`make_method` is the same path from
Python.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError, ToporouteError
from . import baselines
from .conductor import plugin as conductor
from .dytopo import LoopConfig
from .dytopo import plugin as dytopo
from .hiva import plugin as hiva
from .options import MethodSpec, OptionGroup
from .prompting import plugin as prompting
from .qmix import plugin as qmix
from .tacomas import plugin as tacomas

if TYPE_CHECKING:
    from ..embed import Encoder
    from ..trace.report import Section
    from .episode import Method

__all__ = [
    "METHODS",
    "REGISTRY",
    "MethodSpec",
    "OptionGroup",
    "check_shared_options",
    "make_method",
    "report_sections",
]

REGISTRY: dict[str, MethodSpec] = {
    spec.name: spec
    for spec in (
        dytopo.SPEC,
        qmix.SPEC,
        conductor.SPEC,
        hiva.SPEC,
        tacomas.SPEC,
        *prompting.SPECS,
        *baselines.SPECS,
    )
}
METHODS = tuple(REGISTRY)


def report_sections() -> dict[str, Section]:
    """Each registered method's own part of the report's episode views, by method name
    (:func:`toporoute.trace.report.write_report`'s ``sections``)."""
    return {name: spec.report for name, spec in REGISTRY.items() if spec.report is not None}


def check_shared_options(args: argparse.Namespace, methods: Sequence[str]) -> None:
    """Refuses a flag two methods of one run read with different meanings: ``--tau`` is DyTopo's edge threshold
    (and its baselines') and TacoMAS's stop threshold, so a run of both kinds must leave it at their defaults.
    (``--max-agents`` means a team's capacity for HiVA and TacoMAS alike and goes to both.)"""
    if getattr(args, "tau", None) is None or "tacomas" not in methods:
        return
    loop = [m for m in methods if (g := REGISTRY[m].options) is not None and g.settings is LoopConfig]
    if loop:
        raise ToporouteError(
            f"--tau is the edge threshold of {', '.join(loop)} and the stop threshold of tacomas; "
            "run them separately to set it"
        )


def make_method(
    name: str, *, rounds: int | None = None, encoder: Encoder | None = None, **settings: Any
) -> Method:
    """The method ``name`` with ``settings``.

    Parameters
    ----------
    name : str
        One of :data:`METHODS`.
    rounds : int, optional
        The number of rounds: DyTopo's T_max (default 10), the multi-round baselines' fixed count (default 5),
        Q-Mix's T (default code 2, math 3, choice 2), AgentConductor's K turns (default 2), HiVA's T iterations
        (default 10), TacoMAS's R rounds (default 10), self-refine's iterations (default 3) and debate's rounds
        (default 3), each unless its own setting is given (``max_rounds``, ``max_turns``, ``iterations``,
        ``rounds``, ``debate_rounds``); ``cot`` and ``self-consistency`` have one round.
    encoder : Encoder, optional
        The descriptor encoder (DyTopo and its baselines, Q-Mix's encoder task feature, the conductor's
        searcher); default ``Encoder.default()``, loaded on first use.
    **settings
        Fields of the method's settings: :class:`~toporoute.methods.dytopo.LoopConfig` (DyTopo and its
        baselines; ``random`` also takes ``edge_counts``), :class:`~toporoute.methods.qmix.QMixSettings` plus
        ``checkpoint`` (required), :class:`~toporoute.methods.conductor.ConductorSettings`,
        :class:`~toporoute.methods.hiva.HiVASettings`, :class:`~toporoute.methods.tacomas.TacoMASSettings`,
        and the prompting baselines' :class:`~toporoute.methods.prompting.CotSettings`,
        ``SelfConsistencySettings``, ``SelfRefineSettings``, ``DebateSettings`` (debate's rounds as
        ``debate_rounds``). Sampling settings left out take the method's defaults.
    """
    spec = REGISTRY.get(name)
    if spec is None:
        raise InvalidArgumentError(f"method must be one of {METHODS}; got {name!r}", "method")
    return spec.build(dict(settings), rounds, encoder)
