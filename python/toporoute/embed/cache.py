"""An LRU cache of text embeddings stored as rows of one float32 table.

Keeping the embeddings in one contiguous ``(capacity + 1, dim)`` table lets the Router route straight from it by
row index (``ops.route_indexed``) and lets the compiled pooling write new embeddings into their rows in place.
Row 0 is a permanent zero vector: the embedding of an empty descriptor.

The cache is not thread-safe on its own; its owner (the Encoder) holds ``lock`` around every use, including
reads of ``table``. Rows handed out by :meth:`EmbeddingCache.acquire` are pinned (never evicted) until
:meth:`EmbeddingCache.release`, so work done outside the lock cannot lose them.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from ..errors import OutOfRangeError

ZERO_ROW = 0


@dataclass(frozen=True)
class CacheInfo:
    """Counters of an :class:`EmbeddingCache` (cumulative since creation or the last ``clear``)."""

    hits: int
    misses: int
    evictions: int
    size: int
    capacity: int


class EmbeddingCache:
    """LRU map from exact text to a row of ``table``.

    Parameters
    ----------
    capacity : int >= 0
        Most texts kept; 0 disables caching (every lookup misses, nothing is stored).
    dim : int
        Embedding width.
    """

    def __init__(self, capacity: int, dim: int) -> None:
        if capacity < 0:
            raise OutOfRangeError(f"cache_size must be >= 0; got {capacity}", "cache_size")
        self.capacity = capacity
        self.table = np.zeros((capacity + 1, dim), dtype=np.float32)
        self.lock = threading.Lock()
        self._rows: OrderedDict[str, int] = OrderedDict()  # oldest first
        self._free = list(range(capacity, 0, -1))
        self._owner: dict[int, str] = {}  # row -> text, for rows that hold an entry
        self._pins: dict[int, int] = {}
        self._hits = self._misses = self._evictions = 0

    def info(self) -> CacheInfo:
        return CacheInfo(self._hits, self._misses, self._evictions, len(self._rows), self.capacity)

    def clear(self) -> None:
        """Forgets every entry and resets the counters (pinned rows stay reserved until released)."""
        self._rows.clear()
        self._owner.clear()
        self._free = [r for r in range(self.capacity, 0, -1) if r not in self._pins]
        self._hits = self._misses = self._evictions = 0

    def acquire(self, texts: Iterable[str]) -> tuple[dict[str, int], list[str]]:
        """Looks up distinct, non-empty ``texts``: returns the rows of the hits (now pinned and most recent)
        and the misses in first-seen order. Counts one hit or miss per text."""
        hits: dict[str, int] = {}
        misses: list[str] = []
        for text in texts:
            row = self._rows.get(text)
            if row is None:
                misses.append(text)
                continue
            self._rows.move_to_end(text)
            self._pins[row] = self._pins.get(row, 0) + 1
            hits[text] = row
        self._hits += len(hits)
        self._misses += len(misses)
        return hits, misses

    def release(self, rows: Iterable[int]) -> None:
        """Unpins rows from :meth:`acquire` or :meth:`allocate`; a row that holds no entry when its last pin
        goes (its computation failed, or another caller stored the same text first) becomes free again."""
        for row in rows:
            left = self._pins[row] - 1
            if left:
                self._pins[row] = left
                continue
            del self._pins[row]
            if row not in self._owner:
                self._free.append(row)

    def allocate(self, n: int) -> list[int] | None:
        """Reserves ``n`` rows (pinned), evicting the least recently used unpinned entries; None when there
        are not enough unpinned rows (the caller then computes without caching)."""
        if n == 0:
            return []
        if n > len(self._free):
            need = n - len(self._free)
            evictable = [t for t, r in self._rows.items() if r not in self._pins][:need]
            if len(evictable) < need:
                return None
            for text in evictable:
                row = self._rows.pop(text)
                del self._owner[row]
                self._free.append(row)
            self._evictions += need
        rows = [self._free.pop() for _ in range(n)]
        for row in rows:
            self._pins[row] = 1
        return rows

    def insert(self, texts: list[str], rows: list[int]) -> None:
        """Records that ``rows`` (from :meth:`allocate`, still pinned) now hold the embeddings of ``texts``.
        A text stored meanwhile by another caller keeps its row; ours is freed on release."""
        for text, row in zip(texts, rows):
            if text in self._rows:
                continue
            self._rows[text] = row
            self._owner[row] = text
