"""Random inputs of the core ops for the parity, property and backend tests, with the special cases that catch
kernels out: exact ties, zero rows, scores of exactly 0 and +-1, self-loops, DAGs, padding and odd sizes."""

from __future__ import annotations

from typing import Any

import hypothesis.extra.numpy as hnp
import numpy as np
from hypothesis import HealthCheck
from hypothesis import strategies as st

# hypothesis settings of every property and parity test: the same examples on every run, no example database
# written into the checkout
DETERMINISTIC = {
    "deadline": None,
    "derandomize": True,
    "database": None,
    "suppress_health_check": [HealthCheck.too_slow],
}


def qk(
    rng: np.random.Generator, B: int, N: int, D: int, *, special: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    """(B, N, D) float32 needs ``q`` and offers ``k``. With ``special``: every third episode holds small integers
    (many exactly equal scores, scores of exactly 0 and +-1), about 12% zero rows, and in each episode a
    duplicated offer and need (ties for every recipient), an offer scaled by 4 (same score exactly), an agent
    offering what it needs, the last agent offering what agent 0 offers and a need equal to an offer."""
    q = rng.standard_normal((B, N, D)).astype(np.float32)
    k = rng.standard_normal((B, N, D)).astype(np.float32)
    if not special:
        return q, k
    q[::3] = rng.integers(-1, 2, q[::3].shape)
    k[::3] = rng.integers(-1, 2, k[::3].shape)
    if N >= 2:
        for b in range(B):
            s, d = rng.choice(N, size=2, replace=False)
            k[b, d] = k[b, s]
            s, d = rng.choice(N, size=2, replace=False)
            q[b, d] = q[b, s]
            if N >= 3 and rng.random() < 0.5:
                s, d = rng.choice(N, size=2, replace=False)
                k[b, d] = k[b, s] * np.float32(4)
            if rng.random() < 0.3:
                j = rng.integers(N)
                k[b, j] = q[b, j]
    if N >= 3:
        k[:, N - 1] = k[:, 0]
        q[:, N // 2] = k[:, 1]
    q[rng.random((B, N)) < 0.12] = 0
    k[rng.random((B, N)) < 0.12] = 0
    return q, k


def active(rng: np.random.Generator, B: int, N: int) -> np.ndarray:
    """A (B, N) padding mask with about 75% active agents."""
    return rng.random((B, N)) < 0.75


def graphs(rng: np.random.Generator, B: int, N: int, density: float | None = None) -> np.ndarray:
    """(B, N, N) bool graphs: about 30% DAGs (upper-triangular under a random permutation), some with every
    self-loop, the rest cyclic; each graph's density drawn from 0.03..0.9 unless given."""
    d = (
        rng.choice([0.03, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 0.9], size=B)
        if density is None
        else np.full(B, density)
    )
    adj = rng.random((B, N, N)) < d[:, None, None]
    for b in range(B):
        u = rng.random()
        if u < 0.3:
            p = rng.permutation(N)
            adj[b] = False
            adj[b][np.ix_(p, p)] = np.triu(rng.random((N, N)) < d[b], k=1)
        elif u < 0.45:
            adj[b] |= np.eye(N, dtype=bool)
    return adj


def weights(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """float32 edge weights >= 0: a third in quarter steps, a third small integers (both exact, with many
    equal sums), the rest uniform; about 10% zeros."""
    w = rng.random(shape).astype(np.float32)
    kind = rng.integers(0, 3, size=shape)
    w[kind == 0] = np.round(w[kind == 0] * 4) / 4
    w[kind == 1] = rng.integers(0, 4, size=int((kind == 1).sum()))
    w[rng.random(shape) < 0.1] = 0
    return w


def qmix_obs(
    rng: np.random.Generator, c: Any, B: int, N: int, *, hidden: bool = True, active: bool = True
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
    """Agent Q-Mix inputs for config ``c``: obs, adj (about 40% edges, some self-loops), hidden (or None) and
    active (about 75%, or None)."""
    obs = rng.standard_normal((B, N, c.obs_dim), dtype=np.float32)
    adj = rng.random((B, N, N)) < 0.4
    hid = rng.standard_normal((B, N, c.hidden), dtype=np.float32) if hidden else None
    act = rng.random((B, N)) < 0.75 if active else None
    return obs, adj, hid, act


def qmix_mix_inputs(rng: np.random.Generator, c: Any, B: int) -> tuple[np.ndarray, np.ndarray]:
    """The mixer's (B, n_agents) chosen-action values and (B, state_dim) states."""
    return (
        rng.standard_normal((B, c.n_agents), dtype=np.float32),
        rng.standard_normal((B, c.state_dim), dtype=np.float32),
    )


def hidden_states(rng: np.random.Generator, n: int, L: int, D: int) -> np.ndarray:
    """(n, L, D) float32 token states with uneven magnitudes (about 10% of the tokens scaled by 1e3)."""
    h = rng.standard_normal((n, L, D)).astype(np.float32)
    if n and L and D:
        h[rng.random((n, L)) < 0.1] *= np.float32(1e3)
    return h


def attention_mask(rng: np.random.Generator, n: int, L: int, dtype: Any) -> np.ndarray:
    """Right-padded (n, L) masks like a tokenizer's, with some arbitrary holes, an all-masked row and, for
    integer masks, non-zero values other than 1 (they count once: the mask is not a weight)."""
    lengths = rng.integers(0, L + 1, size=n)
    m = np.arange(L)[None, :] < lengths[:, None]
    m ^= rng.random((n, L)) < 0.1
    if n >= 2:
        m[1] = False
    if dtype is np.bool_:
        return m
    values = rng.choice(np.array([1, 2, -1, 7]), size=(n, L)).astype(dtype)
    return np.where(m, values, 0).astype(dtype)


def table(rng: np.random.Generator, M: int, D: int) -> np.ndarray:
    """An (M, D) float32 embedding table with about 10% zero rows and row 1 = 4 * row 0 (exact score ties)."""
    t = rng.standard_normal((M, D)).astype(np.float32)
    if M >= 3:
        t[rng.random(M) < 0.1] = 0
        t[1] = t[0] * np.float32(4)
    return t


def table_rows(rng: np.random.Generator, B: int, N: int, M: int, dtype: Any = np.int64) -> np.ndarray:
    """(B, N) rows of an (M, D) table, about 15% of them -1 (padding); all -1 when M = 0."""
    rows = rng.integers(0, max(M, 1), size=(B, N))
    rows[rng.random((B, N)) < 0.15] = -1
    if M == 0:
        rows[:] = -1
    return rows.astype(dtype)


def gather(table: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """``table[rows]`` as float32 with zero rows where ``rows`` is -1 (what route_indexed routes)."""
    out = np.zeros(rows.shape + (table.shape[1],), np.float32)
    out[rows >= 0] = table[rows[rows >= 0]]
    return out


def pool_buckets(rng: np.random.Generator, M: int, D: int) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Three length buckets (like a tokenizer's) of (hidden, mask, rows) writing distinct rows of an (M, D)
    table, with int64, bool and int32 masks."""
    sizes, lengths = (4, 3, 5), (3, 8, 17)
    targets = rng.permutation(M)[: sum(sizes)]
    out, start = [], 0
    for n, L, dtype in zip(sizes, lengths, (np.int64, np.bool_, np.int32)):
        out.append(
            (hidden_states(rng, n, L, D), attention_mask(rng, n, L, dtype), targets[start : start + n])
        )
        start += n
    return out


def pool_route(
    rng: np.random.Generator, M: int, D: int, B: int, N: int, k_dtype: Any = np.int64
) -> tuple[np.ndarray, list[tuple[np.ndarray, np.ndarray, np.ndarray]], np.ndarray, np.ndarray]:
    """route_indexed's pool= form: an (M, D) table, three pool buckets writing rows of it, and (B, N) query and
    key rows (int64, and ``k_dtype``)."""
    return (
        table(rng, M, D),
        pool_buckets(rng, M, D),
        table_rows(rng, B, N, M),
        table_rows(rng, B, N, M, k_dtype),
    )


# ------------------------------------------------------------------------------------------ hypothesis strategies

# small, exactly representable values make ties, zero rows and exact +-1 / 0 scores common
_SIMPLE = st.sampled_from([-3.0, -2.0, -1.0, -0.5, 0.0, 0.0, 0.0, 0.25, 0.5, 1.0, 2.0, 4.0])
# normal float32 magnitudes in [2^-20, 8] or 0: scaling by 2^+-8 stays exact (no overflow, no subnormals)
_WIDE = st.floats(-8, 8, width=32, allow_subnormal=False).map(lambda x: x if abs(x) >= 2.0**-20 else 0.0)
_ELEMENTS = st.one_of(_SIMPLE, _WIDE)


@st.composite
def route_cases(draw: st.DrawFn) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(q, k, {"active", "tau", "k_in"}) for route: B <= 3, N <= 9, D <= 9, exact-tie-prone values, copied
    offers, zero needs, any tau in [-1, 1] and k_in up to N + 1."""
    B = draw(st.integers(1, 3))
    N = draw(st.integers(1, 9))
    D = draw(st.integers(1, 9))
    q = draw(hnp.arrays(np.float32, (B, N, D), elements=_ELEMENTS))
    k = draw(hnp.arrays(np.float32, (B, N, D), elements=_ELEMENTS))
    # occasionally copy rows (exact ties across providers) or zero whole rows
    if draw(st.booleans()) and N >= 2:
        src, dst = draw(st.integers(0, N - 1)), draw(st.integers(0, N - 1))
        k[:, dst] = k[:, src]
    zero = draw(hnp.arrays(np.bool_, (B, N), elements=st.sampled_from([False, False, False, True])))
    q[zero] = 0
    active = draw(st.none() | hnp.arrays(np.bool_, (B, N)))
    tau = draw(st.sampled_from([-1.0, -0.5, 0.0, 0.3, 0.5, 1.0]) | st.floats(-1.0, 1.0))
    k_in = draw(st.integers(0, N + 1))
    return q, k, {"active": active, "tau": tau, "k_in": k_in}


@st.composite
def graph_cases(
    draw: st.DrawFn, *, dag: bool = False, weighted: bool | None = None
) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
    """(adj, weights, active) for toposort: a batch of random graphs from a drawn seed, density and size
    (including sizes around the 64-node bitset limit); DAGs are random upper-triangular graphs under a random
    permutation."""
    B = draw(st.integers(1, 3))
    N = draw(st.integers(1, 12) | st.sampled_from([63, 64, 65, 70]))
    density = draw(st.sampled_from([0.0, 0.05, 0.2, 0.5, 0.9, 1.0]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    if dag:
        adj = np.zeros((B, N, N), bool)
        for b in range(B):
            p = rng.permutation(N)
            adj[b][np.ix_(p, p)] = np.triu(rng.random((N, N)) < density, k=1)
    else:
        adj = rng.random((B, N, N)) < density
    if weighted is None:
        weighted = draw(st.booleans())
    w = None
    if weighted:
        w = rng.random((B, N, N)).astype(np.float32)
        if draw(st.booleans()):
            w = np.floor(w * 4) / np.float32(4)  # coarse: many equal sums, zeros
    act = rng.random((B, N)) < 0.8 if draw(st.booleans()) else None
    return adj, w, act


# one team's need and offer descriptors, where a test routes texts (the Router, the service)
NEEDS = [
    "I need the problem statement and constraints",
    "I need a draft implementation to test",
    "I need a list of failing test cases",
    "I need a review of the interface design",
]
OFFERS = [
    "I provide an analysis of the problem statement and constraints",
    "I provide a draft implementation of the function",
    "I provide failing test cases and their outputs",
    "I provide a design of the interface",
]
