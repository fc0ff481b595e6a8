"""A run's episodes spread over a Ray cluster (``toporoute run ... --ray [ADDRESS]``; extra ``ray``).

Only :mod:`toporoute.distributed.ray_run` imports Ray, and only once a cluster is used: a local run never does.
"""

from __future__ import annotations

from .ray_run import EpisodeActor, MethodJob, RayCluster, RayOptions, run_method_on_ray

__all__ = ["EpisodeActor", "MethodJob", "RayCluster", "RayOptions", "run_method_on_ray"]
