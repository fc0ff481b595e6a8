"""Topology methods as async episode loops over the shared runtime.

- :mod:`.registry`: the methods by name (:data:`METHODS`, :func:`make_method`), each registered by its package's
  ``plugin`` module as a :class:`~toporoute.methods.options.MethodSpec`;
- :mod:`.options`: command-line flags declared on the settings' fields (:func:`~.options.option`);
- :mod:`.episode`: what every loop shares (the :class:`Method` protocol, :class:`EpisodeOutput`, sampling
  settings and request seeds, timed LLM calls, the routed-edge ledger, answer extraction);
- :mod:`.harness`: runs a method over a task set and writes its run folder;
- one subpackage per method: :mod:`.dytopo` (DyTopo and the worker loop of its baselines), :mod:`.qmix` (Agent
  Q-Mix), :mod:`.conductor` (AgentConductor); :mod:`.baselines` (``single``, ``parallel``, ``random``,
  ``chain``, ``star``, ``full``); :mod:`.prompting` (``cot``, ``self-consistency``, ``self-refine``, ``debate``)
  with :mod:`.selection` (majority vote and the test-based pick on visible examples).
"""

from __future__ import annotations

from .baselines import BASELINE_ROUNDS, SingleCall, baseline
from .dytopo import TAU_PRESETS, DyTopo, LoopConfig, WorkerLoop
from .episode import EpisodeOutput, Method, SamplingSettings
from .registry import METHODS, REGISTRY, MethodSpec, make_method

__all__ = [
    "BASELINE_ROUNDS",
    "METHODS",
    "REGISTRY",
    "TAU_PRESETS",
    "DyTopo",
    "EpisodeOutput",
    "LoopConfig",
    "Method",
    "MethodSpec",
    "SamplingSettings",
    "SingleCall",
    "WorkerLoop",
    "baseline",
    "make_method",
]
