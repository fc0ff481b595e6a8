"""What AgentConductor's searcher retrieves from: by default the Python standard library's documentation, which
holds no benchmark's solution (built once and cached); HumanEval's canonical solutions only when asked for
(``--retrieval-corpus humaneval``), recorded in run.json and labelled in the report."""

from __future__ import annotations

import json
from pathlib import Path

import _humaneval
import pytest
from _letters import LetterEncoder
from test_conductor_method import PLAN_PCT, Team, run_episodes, traces

from toporoute.errors import InvalidArgumentError
from toporoute.llm.scripted import ScriptedEngine
from toporoute.methods import make_method
from toporoute.methods.conductor import Conductor, ConductorSettings
from toporoute.methods.conductor._prompts import role_system
from toporoute.methods.conductor._retrieval import (
    CORPORA,
    Document,
    Hit,
    Retriever,
    _stdlib_corpus,
    corpus_named,
    humaneval_corpus,
    render,
    stdlib_corpus,
)
from toporoute.tasks import Task
from toporoute.trace.badges import oracle_badge

he = _humaneval.tasks_fixture(1)
solutions = _humaneval.solutions

SEARCH_PLAN = PLAN_PCT.replace("<algorithmer>", "<searcher>").replace(
    "ref: [<planner>]", "ref: [<planner>, <searcher>]"
)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("TOPOROUTE_CACHE", str(root))
    return root


def searched(method: Conductor, task: Task, sols: dict[str, str], out: Path) -> tuple[str, str, dict]:
    """The searcher's output on ``task``, the orchestrator's system prompt and the run's run.json."""
    run_episodes(method, [task], ScriptedEngine(Team([task], sols, [SEARCH_PLAN], coder_ok=True)), out)
    (r0,) = traces(out, task.episode_id)
    system = r0["orchestrator"]["prompt"][0][1]
    return r0["messages"]["searcher@1"]["public"], system, json.loads((out / "run.json").read_text())


def test_default_corpus_holds_no_benchmark_solution(
    tmp_path: Path, cache: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    assert ConductorSettings().retrieval_corpus == "stdlib"
    found, system, config = searched(Conductor(encoder=LetterEncoder()), he[0], solutions, tmp_path / "run")
    assert found.startswith("Query: ") and ("[1] py:" in found or "[1] topic:" in found)
    assert "HumanEval/" not in found and "Solution:" not in found
    assert config["params"]["retrieval_corpus"] == "stdlib"
    # the orchestrator and the searcher are told what the searcher looks things up in
    assert "<searcher>: looks up the Python standard library's documentation" in system
    searcher = role_system("searcher", "stdlib")
    assert "standard library" in searcher and "solved" not in searcher
    # no HumanEval solution is anywhere in the corpus: every canonical body of more than a line
    corpus = "\n".join(d.text for d in stdlib_corpus())
    bodies = [s.strip() for s in solutions.values() if s.strip().count("\n") >= 1]
    assert len(bodies) > 100 and not [b for b in bodies if b in corpus]


def test_humaneval_corpus_is_opt_in_and_labelled(
    tmp_path: Path, cache: Path, he: list[Task], solutions: dict[str, str]
) -> None:
    method = make_method("conductor", retrieval_corpus="humaneval", encoder=LetterEncoder())
    found, system, config = searched(method, he[0], solutions, tmp_path / "run")
    assert "<searcher>: retrieves similar solved problems" in system
    assert "solved programming problems" in role_system("searcher", "humaneval")
    assert (
        "[1] HumanEval/" in found and "Solution:" in found and f"] {he[0].id} " not in found
    )  # leave-one-out
    assert config["params"]["retrieval_corpus"] == "humaneval"
    assert "HumanEval solutions retrievable</span>" in oracle_badge(config["params"])
    assert oracle_badge({"retrieval_corpus": "stdlib"}) == ""
    with pytest.raises(InvalidArgumentError, match="retrieval_corpus"):
        ConductorSettings(retrieval_corpus="apps")
    # a derived method with another corpus gets its own retriever; with the same one it shares it
    assert method.with_settings(retrieval_k=2)._search is method._search
    other = method.with_settings(retrieval_corpus="stdlib")
    assert other._search is not method._search and other._search.corpus == "stdlib"


def test_stdlib_corpus_is_built_once_and_cached(cache: Path) -> None:
    docs = stdlib_corpus()
    ids = [d.id for d in docs]
    assert len(ids) == len(set(ids)) > 500
    assert {"py:sorted", "py:str.split", "py:itertools.groupby", "py:collections.Counter.most_common"} <= set(
        ids
    )
    assert any(i.startswith("topic:") for i in ids)
    assert all(not d.solution and len(d.problem) < 1400 for d in docs)  # passages about the encoder's window
    (path,) = (cache / "retrieval").glob("stdlib-py*.jsonl")
    assert len(path.read_text().splitlines()) == len(docs)
    assert (
        stdlib_corpus() is docs
        and corpus_named("stdlib") is docs
        and corpus_named("humaneval") is (humaneval_corpus())
    )
    # a later process reads the file rather than building it again; a damaged file is built again
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:10]))
    _stdlib_corpus.cache_clear()
    assert [d.id for d in stdlib_corpus()] == ids[:10]
    path.write_text("not json\n")
    _stdlib_corpus.cache_clear()
    assert [d.id for d in stdlib_corpus()] == ids and len(path.read_text().splitlines()) == len(ids)
    with pytest.raises(InvalidArgumentError, match="corpus must be one of"):
        corpus_named("mbpp")
    assert CORPORA == ("stdlib", "humaneval")


def test_embedded_corpus_is_kept_between_processes(tmp_path: Path) -> None:
    docs = (
        Document("a", "Sort a list of numbers.", "def f(x):\n    return sorted(x)\n"),
        Document("b", "sorted(iterable, /, *, key=None, reverse=False)\n\nReturn a new sorted list.", ""),
    )
    first = LetterEncoder(name="letters")
    hits = Retriever(first, docs, index_dir=tmp_path).search("sort numbers")
    assert first.embedded == 2 + 1 + 1  # both texts, the one problem with a solution, the query
    assert len(list(tmp_path.glob("index-*.npy"))) == 1
    again = LetterEncoder(name="letters")
    assert [h.document.id for h in Retriever(again, docs, index_dir=tmp_path).search("sort numbers")] == [
        h.document.id for h in hits
    ]
    assert again.embedded == 1  # the query only
    renamed = LetterEncoder(name="another model")
    Retriever(renamed, docs, index_dir=tmp_path).search("sort numbers")
    assert renamed.embedded == 4 and len(list(tmp_path.glob("index-*.npy"))) == 2


def test_a_document_without_a_solution_renders_as_its_text() -> None:
    doc = Document(
        "py:sorted", "sorted(iterable, /, *, key=None, reverse=False)\n\nReturn a new sorted list.", ""
    )
    text = render([Hit(doc, 0.5)])
    assert text == "[1] py:sorted (similarity 0.50)\n" + doc.problem
