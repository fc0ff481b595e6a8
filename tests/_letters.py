"""A bag-of-letters text encoder for the tests of code that embeds texts (AgentConductor's retrieval): each text
is its 26 letter counts, scaled to unit length. Deterministic, instant, no model; it records its calls."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class LetterEncoder:
    """``encode(texts)`` as :class:`toporoute.embed.Encoder` has it; ``calls`` are the batch sizes it was asked
    for, ``embedded`` their sum. ``name`` (when given) is the model name that caches key on."""

    def __init__(self, name: str | None = None) -> None:
        if name is not None:
            self.name = name
        self.calls: list[int] = []

    @property
    def embedded(self) -> int:
        return sum(self.calls)

    def encode(self, texts: Sequence[str], use_cache: bool = True) -> np.ndarray:
        self.calls.append(len(texts))
        out = np.zeros((len(texts), 26), np.float32)
        for i, t in enumerate(texts):
            for ch in t.lower():
                if "a" <= ch <= "z":
                    out[i, ord(ch) - 97] += 1
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)
