"""README.md's code blocks run as pasted.

Every fenced block is accounted for: a ```python or ```bash block runs here unless the line right above its
opening fence is ``<!-- excerpt -->`` (it needs a GPU, a network, a model run of minutes, or a file the README
makes elsewhere) or one of the Quick start's markers ``<!-- main-command -->`` / ``<!-- test-command -->``
(those two are run by ``.ci/run`` itself and skipped here); ```text and ```nginx blocks are output and
configuration, never run. Any other fence, an unlabelled one, or an HTML comment above a fence that is none of
these markers fails :func:`test_every_fence_is_accounted_for`.

A python block runs with this interpreter (the venv's) as a script, a bash block with ``bash -euo pipefail``
with the venv's ``bin`` first on ``PATH``; each in a fresh temporary directory, with ``PORT`` set to a free
loopback port (the serving blocks default to 8080) and a ``TOPOROUTE_CACHE`` shared by this module's blocks.
A bash block's ``# {...}`` comment lines are the answers it documents: each must be a line of its output.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from _paths import ROOT
from _procs import free_port

README = ROOT / "README.md"
RUNNABLE = ("python", "bash")
NOT_CODE = ("text", "nginx")
EXCERPT = "<!-- excerpt -->"
CI_MARKERS = ("<!-- main-command -->", "<!-- test-command -->")
BLOCK_TIMEOUT_S = 120

_FENCE = re.compile(r"^(?P<indent> *)(?P<fence>`{3,}|~{3,})(?P<info>.*)$")


@dataclass(frozen=True)
class Block:
    """One fenced block: ``line`` is the 1-based line of its opening fence, ``marker`` the HTML comment right
    above it (or None)."""

    line: int
    lang: str
    marker: str | None
    code: str

    @property
    def id(self) -> str:
        return f"README.md:{self.line}-{self.lang or 'unlabelled'}"


def parse_blocks(text: str) -> tuple[list[Block], list[str]]:
    """The fenced blocks of a Markdown text and the problems found while reading them (an unclosed fence)."""
    lines = text.splitlines()
    blocks: list[Block] = []
    problems: list[str] = []
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            i += 1
            continue
        indent, fence, info = len(m["indent"]), m["fence"], m["info"].strip()
        above = lines[i - 1].strip() if i > 0 else ""
        marker = above if above.startswith("<!--") else None
        body: list[str] = []
        j = i + 1
        while j < len(lines):
            close = lines[j].strip()
            if close.startswith(fence[0] * len(fence)) and not close.strip(fence[0]):
                break
            line = lines[j]
            body.append(line[min(indent, len(line) - len(line.lstrip(" "))) :])
            j += 1
        else:
            problems.append(f"README.md:{i + 1}: the fence {fence}{info} is never closed")
        blocks.append(Block(i + 1, info, marker, "\n".join(body) + "\n"))
        i = j + 1
    return blocks, problems


def documented_output(block: Block) -> list[str]:
    """The output a bash block shows as comments: each ``# {...}`` or ``# [...]`` line (a JSON answer)."""
    if block.lang != "bash":
        return []
    return [line[2:] for line in block.code.splitlines() if line.startswith(("# {", "# ["))]


def _readme_blocks() -> list[Block]:
    return parse_blocks(README.read_text(encoding="utf-8"))[0]


def _runnable(blocks: list[Block]) -> list[Block]:
    return [b for b in blocks if b.lang in RUNNABLE and b.marker is None]


def unaccounted(text: str, *, name: str = "README.md") -> list[str]:
    """What in a Markdown text this module cannot classify: fences neither runnable, nor excerpts, nor the Quick
    start's, nor output; markers it cannot read or that mark nothing."""
    blocks, problems = parse_blocks(text)
    fence_lines = {b.line for b in blocks}
    for b in blocks:
        if b.lang not in RUNNABLE + NOT_CODE:
            problems.append(
                f"{b.id}: a fence must be one of {RUNNABLE + NOT_CODE} (an unlabelled one may hide a command); "
                f"got {b.lang!r}"
            )
        if b.marker is not None and b.marker not in (EXCERPT, *CI_MARKERS):
            problems.append(
                f"{b.id}: the comment above the fence must be {EXCERPT!r} or a Quick start marker; "
                f"got {b.marker!r}"
            )
        if b.marker in CI_MARKERS and b.lang != "bash":
            problems.append(f"{b.id}: {b.marker} marks a bash block; got {b.lang!r}")
    # a marker that does not sit right above a fence marks nothing (a blank line in between, a typo)
    for n, line in enumerate(text.splitlines(), start=1):
        stripped = line.strip()
        if stripped.startswith("<!--") and re.search(r"excerpt|main-command|test-command", stripped):
            if n + 1 not in fence_lines:
                problems.append(f"{name}:{n}: {stripped!r} is not right above a fence")
            elif stripped not in (EXCERPT, *CI_MARKERS):
                problems.append(f"{name}:{n}: {stripped!r} is not a marker this test reads")
    for marker in CI_MARKERS:
        if sum(b.marker == marker for b in blocks) != 1:
            problems.append(f"{marker} must mark exactly one block (.ci/run reads it)")
    return problems


def test_every_fence_is_accounted_for() -> None:
    text = README.read_text(encoding="utf-8")
    problems = unaccounted(text)
    assert not problems, "\n".join(problems)
    blocks = parse_blocks(text)[0]
    assert {b.lang for b in _runnable(blocks)} == set(RUNNABLE), "README.md has no runnable block of a kind"


def test_unaccounted_names_what_it_cannot_classify() -> None:
    quick_start = "".join(f"{m}\n```bash\ntrue\n```\n" for m in CI_MARKERS)
    assert (
        unaccounted(quick_start + "```python\nprint(1)\n```\n<!-- excerpt -->\n```bash\nvllm serve\n```\n")
        == []
    )
    bad = quick_start + (
        "```\ntoporoute run dytopo\n```\n"  # line 9: unlabelled
        "```sh\nls\n```\n"  # 12: a language this module does not run
        "<!-- excerpt: slow -->\n```bash\nsleep 600\n```\n"  # 15-16: a marker it cannot read
        "<!-- excerpt -->\n\n```bash\nsleep 600\n```\n"  # 19: a marker that marks nothing
    )
    problems = unaccounted(bad)
    assert [int(re.split(r"[:-]", p)[1]) for p in problems] == [9, 12, 16, 15, 19], problems


def test_parse_blocks_reads_markers_and_indented_fences() -> None:
    text = (
        "<!-- excerpt -->\n```bash\nexit 1\n```\n"
        "- item:\n  ```python\n  print(1)\n  ```\n"
        "An inline ```` ```yaml ```` is no fence.\n"
        "````text\n```\n````\n"
        "```bash\necho never closed"
    )
    blocks, problems = parse_blocks(text)
    assert [(b.line, b.lang, b.marker) for b in blocks] == [
        (2, "bash", EXCERPT),
        (6, "python", None),
        (10, "text", None),
        (13, "bash", None),
    ]
    assert blocks[1].code == "print(1)\n" and blocks[2].code == "```\n"
    assert problems == ["README.md:13: the fence ```bash is never closed"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One toporoute cache for every block (the encoder's ONNX graph is built once, not once per block)."""
    return tmp_path_factory.mktemp("toporoute-cache")


def _block_params() -> list[object]:
    """Every python and bash block; the excerpts and the Quick start's two skip, saying why."""
    reasons = {
        EXCERPT: "marked <!-- excerpt -->",
        **dict.fromkeys(CI_MARKERS, "the Quick start's: .ci/run runs it"),
    }
    return [
        pytest.param(
            b, id=b.id, marks=[pytest.mark.skip(reason=reasons[b.marker])] if b.marker in reasons else []
        )
        for b in _readme_blocks()
        if b.lang in RUNNABLE
    ]


@pytest.mark.parametrize("block", _block_params())
def test_block_runs(block: Block, tmp_path: Path, cache_dir: Path) -> None:
    if block.lang == "bash" and re.search(r"\bcurl\b", block.code) and shutil.which("curl") is None:
        pytest.skip("curl is not installed: the block calls the service with it")
    bin_dir = str(Path(sys.executable).parent)
    env = {
        **os.environ,
        "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
        "PORT": str(free_port()),
        "TOPOROUTE_CACHE": str(cache_dir),
        "PYTHONUNBUFFERED": "1",
    }
    if block.lang == "python":
        script = tmp_path / "block.py"
        script.write_text(block.code, encoding="utf-8")
        argv = [sys.executable, str(script)]
    else:
        script = tmp_path / "block.sh"
        script.write_text(block.code, encoding="utf-8")
        argv = ["bash", "-euo", "pipefail", str(script)]
    # its own session, so a timeout also stops what the block started in the background (a server)
    proc = subprocess.Popen(
        argv,
        cwd=tmp_path,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
        pytest.fail(
            f"{block.id} ran over {BLOCK_TIMEOUT_S} s\n--- stdout\n{out[-3000:]}\n--- stderr\n{err[-3000:]}"
        )
    finally:
        try:  # anything the block left running in its session
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.returncode == 0, (
        f"{block.id} exited {proc.returncode}\n--- block\n{block.code}--- stdout\n{out[-3000:]}"
        f"\n--- stderr\n{err[-3000:]}"
    )
    printed = out.splitlines()
    missing = [line for line in documented_output(block) if line not in printed]
    assert not missing, (
        f"{block.id} did not print what the README shows:\n"
        + "\n".join(missing)
        + f"\n--- stdout\n{out[-3000:]}"
    )
