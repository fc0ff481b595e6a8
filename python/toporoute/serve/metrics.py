"""Prometheus metrics of one app, in its own registry (no process-global state)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
_BATCH_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class _CacheCollector(Collector):
    """The encoder cache's cumulative hits and misses, read at scrape time."""

    def __init__(self, encoder: Any) -> None:
        self.encoder = encoder

    def collect(self) -> Iterator[Metric]:
        info = self.encoder.cache_info()
        yield CounterMetricFamily(
            "toporoute_encoder_cache_hits", "Texts found in the encoder's embedding cache", value=info.hits
        )
        yield CounterMetricFamily(
            "toporoute_encoder_cache_misses", "Texts the encoder had to embed", value=info.misses
        )


class Metrics:
    """``toporoute_requests_total{endpoint,status}``, ``toporoute_request_seconds{endpoint}``,
    ``toporoute_batch_size`` (episodes per coalesced text batch) and the encoder cache counters."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "toporoute_requests",
            "HTTP requests by endpoint and status code",
            ["endpoint", "status"],
            registry=self.registry,
        )
        self.latency = Histogram(
            "toporoute_request_seconds",
            "Request latency in seconds, by endpoint",
            ["endpoint"],
            buckets=_LATENCY_BUCKETS,
            registry=self.registry,
        )
        self.batch_size = Histogram(
            "toporoute_batch_size",
            "Episodes per coalesced encoder batch of /v1/route text requests",
            buckets=_BATCH_BUCKETS,
            registry=self.registry,
        )

    def watch_cache(self, encoder: Any) -> None:
        """Exports ``encoder``'s cache counters."""
        self.registry.register(_CacheCollector(encoder))

    def observe(self, endpoint: str, status: int, seconds: float) -> None:
        self.requests.labels(endpoint=endpoint, status=str(status)).inc()
        self.latency.labels(endpoint=endpoint).observe(seconds)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
