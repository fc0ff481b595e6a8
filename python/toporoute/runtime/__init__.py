"""Many episodes in flight over one LLM engine: round-synchronous batching, usage ledgers, resumable records."""

from __future__ import annotations

from .batcher import BatchStats, RoundBatcher
from .runner import EpisodeContext, EpisodeFn, EpisodeOutcome, RunSummary, Runtime, write_json_atomic
from .usage import CallRecord, EdgeRecord, Ledger

__all__ = [
    "BatchStats",
    "CallRecord",
    "EdgeRecord",
    "EpisodeContext",
    "EpisodeFn",
    "EpisodeOutcome",
    "Ledger",
    "RoundBatcher",
    "RunSummary",
    "Runtime",
    "write_json_atomic",
]
