"""The C++ unit tests (cpp/tests/test_*.cpp): the pieces of the core Python cannot reach directly, such as the bit
toolkit the graph kernels share. Each file is compiled with the C++ compiler the package is built with (``$CXX``,
else ``c++``; the Quick start needs one) and run; it prints ``N passed, M failed`` and exits non-zero on a
failure."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import pytest
from _paths import ROOT

CPP = ROOT / "cpp"
SOURCES = sorted((CPP / "tests").glob("test_*.cpp"))


def test_there_are_cpp_unit_tests() -> None:
    assert [s.name for s in SOURCES] == ["test_bits.cpp", "test_cosine.cpp", "test_gram.cpp"]


@pytest.mark.parametrize("source", SOURCES, ids=[s.stem for s in SOURCES])
def test_cpp_unit(source: Path, tmp_path: Path) -> None:
    cxx = shlex.split(os.environ.get("CXX") or "c++")
    exe = tmp_path / source.stem
    flags = ["-std=c++17", "-O2", "-Wall", "-Wextra", "-Werror", f"-I{CPP / 'include'}"]
    build = subprocess.run(
        [*cxx, *flags, "-o", str(exe), str(source)], capture_output=True, text=True, timeout=300, check=False
    )
    assert build.returncode == 0, f"{source.name} does not compile:\n{build.stderr[-3000:]}"
    run = subprocess.run([str(exe)], capture_output=True, text=True, timeout=300, check=False)
    last = run.stdout.strip().splitlines()[-1] if run.stdout.strip() else ""
    assert run.returncode == 0 and re.fullmatch(r"[1-9]\d* passed, 0 failed", last), run.stdout[-3000:]
