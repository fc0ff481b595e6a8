"""Plain-Python graph facts the graph-op tests check results against (adjacency ``adj[src, dst]``)."""

from __future__ import annotations

import numpy as np


def edge_set(adj: np.ndarray) -> set[tuple[int, int]]:
    """The edges of one (N, N) adjacency as ``(src, dst)`` pairs."""
    return {(int(s), int(d)) for s, d in np.argwhere(adj)}


def reaches(adj: np.ndarray, src: int, dst: int) -> bool:
    """True when ``src`` reaches ``dst`` along the edges of ``adj`` (a node reaches itself)."""
    seen, stack = {src}, [src]
    while stack:
        u = stack.pop()
        if u == dst:
            return True
        for v in np.flatnonzero(adj[u]):
            if int(v) not in seen:
                seen.add(int(v))
                stack.append(int(v))
    return False
