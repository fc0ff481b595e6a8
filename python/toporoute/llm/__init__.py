"""LLM engines behind one batch-first async interface (see :class:`toporoute.llm.base.Engine`).

The engines and the structured layer load on first use (``toporoute.llm.OpenAIEngine`` imports httpx only
then), so importing this package stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from .base import Engine, EngineClosedError
from .types import ErrorRecord, Message, Request, Result, Sampling, Tags, Usage

if TYPE_CHECKING:
    from .models import EMBEDDED_MODEL_NAME, resolve_model
    from .openai_http import OpenAIEngine
    from .replay import ReplayEngine, ReplayMissError
    from .scripted import ScriptedEngine
    from .structured import Structured, schema_of
    from .vllm_engine import VLLMEngine

_LAZY = {
    "EMBEDDED_MODEL_NAME": ".models",
    "OpenAIEngine": ".openai_http",
    "ReplayEngine": ".replay",
    "ReplayMissError": ".replay",
    "ScriptedEngine": ".scripted",
    "Structured": ".structured",
    "VLLMEngine": ".vllm_engine",
    "resolve_model": ".models",
    "schema_of": ".structured",
}

__all__ = [
    "EMBEDDED_MODEL_NAME",
    "Engine",
    "EngineClosedError",
    "ErrorRecord",
    "Message",
    "OpenAIEngine",
    "ReplayEngine",
    "ReplayMissError",
    "Request",
    "Result",
    "Sampling",
    "ScriptedEngine",
    "Structured",
    "Tags",
    "Usage",
    "VLLMEngine",
    "resolve_model",
    "schema_of",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
