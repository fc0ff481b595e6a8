"""Many episodes in flight over one LLM engine: round-synchronous batching, usage ledgers, resumable records."""

from __future__ import annotations

from .batcher import BatchStats, RoundBatcher
from .runner import (
    ENGINE_FAILURE_RULES,
    EngineFailureError,
    EpisodeContext,
    EpisodeFn,
    EpisodeOutcome,
    RunSummary,
    Runtime,
    write_json_atomic,
)
from .usage import CallRecord, EdgeRecord, Ledger

__all__ = [
    "ENGINE_FAILURE_RULES",
    "BatchStats",
    "CallRecord",
    "EdgeRecord",
    "EngineFailureError",
    "EpisodeContext",
    "EpisodeFn",
    "EpisodeOutcome",
    "Ledger",
    "RoundBatcher",
    "RunSummary",
    "Runtime",
    "write_json_atomic",
]
