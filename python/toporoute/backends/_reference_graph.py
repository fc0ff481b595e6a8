"""Graph searches the numpy reference kernels share (plain depth-first searches over one dense ``(N, N)`` bool
graph ``g[src, dst]``; the compiled kernels have their own)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["reaches"]


def reaches(g: np.ndarray, starts: Sequence[int], target: int) -> bool:
    """True when some node of ``starts`` reaches ``target`` along the edges of ``g`` (a start that is the target
    reaches it)."""
    seen = np.zeros(g.shape[0], dtype=bool)
    stack = []
    for s in starts:
        if not seen[s]:
            seen[s] = True
            stack.append(s)
    while stack:
        u = stack.pop()
        if u == target:
            return True
        for v in np.flatnonzero(g[u] & ~seen):
            seen[v] = True
            stack.append(int(v))
    return False
