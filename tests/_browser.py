"""Headless Chromium for the report tests: open a page, dump its DOM or take a screenshot, and read the DOM's
start tags. A test that needs it is marked ``@pytest.mark.browser``: it skips with the reason where no Chromium
is installed, and fails there under ``pytest --require-browser`` (tests/conftest.py)."""

from __future__ import annotations

import shutil
import subprocess
from html.parser import HTMLParser
from pathlib import Path

import pytest


def find_chromium() -> str | None:
    """The Chromium executable, or None where none is installed."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        found = shutil.which(name)
        if found:
            return found
    return None


def chromium() -> str:
    """The Chromium executable. A marked test reaches this only where there is one (conftest.py skips or fails
    it before); an unmarked one fails here where there is none, which asks for the marker."""
    found = find_chromium()
    if found is None:
        pytest.fail(
            "headless Chromium is not installed, and the test is not marked @pytest.mark.browser "
            "(which would skip it here, or fail it under --require-browser)",
            pytrace=False,
        )
    return found


def run_chromium(html: Path, profile: Path, *args: str, fragment: str = "") -> subprocess.CompletedProcess:
    """Opens ``html`` (plus ``fragment``) in headless Chromium with ``args`` (``--dump-dom``, ``--screenshot``)."""
    cmd = [
        chromium(),
        "--headless=new",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={profile}",
        "--virtual-time-budget=5000",
        *args,
        html.as_uri() + fragment,
    ]
    # stderr carries DBus/GPU chatter on machines without them: only the exit status and stdout matter
    proc = subprocess.run(cmd, capture_output=True, timeout=90, check=False)
    assert proc.returncode == 0, proc.stderr.decode(errors="replace")[-2000:]
    return proc


class Elements(HTMLParser):
    """Every start tag of a serialized DOM with its attributes."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))


def elements(dom: str) -> list[tuple[str, dict[str, str | None]]]:
    """The start tags of ``dom`` in document order."""
    parser = Elements()
    parser.feed(dom)
    return parser.tags


def classes(attrs: dict[str, str | None]) -> set[str]:
    return set((attrs.get("class") or "").split())
