"""toporoute.tasks.sandbox.run_python keeps generated code inside its own folder (issue 16): hostile programs
for every way Python reads, lists or writes a file, each run under each ``files`` mode.

Each test plants its secret outside the sandbox (a file holding a random token, a folder holding a file with
a random name, another process with a token in its environment and its command line) and checks from outside
that the token never reaches the program's output, and that the program saw an error: a PermissionError
naming the path under the audit hook, ENOENT (FileNotFoundError) in the mount namespace, where an outside path
does not exist. Real runs, no mocks.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from toporoute.errors import InvalidArgumentError, ToporouteError
from toporoute.tasks import SandboxResult, run_python
from toporoute.tasks.sandbox import (
    file_isolation,
    mount_namespace_available,
    mount_namespace_unavailable_reason,
)

MODES = ("auto", "mount-ns", "audit-hook")
# What the sandbox passes on to the program (bubblewrap adds PWD); anything else in an environment it can
# read came from outside.
SANDBOX_ENV_KEYS = {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "HOME", "TMPDIR", "PWD"}
ESCAPED = "ESCAPED"  # printed by a program right after a read that should have failed


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    """Each ``files`` mode; ``mount-ns`` skips, saying why, where this machine cannot make the namespace."""
    if request.param == "mount-ns" and not mount_namespace_available():
        pytest.skip(f"no mount namespace on this machine: {mount_namespace_unavailable_reason()}")
    return request.param


def _run(source: str, mode: str) -> SandboxResult:
    r = run_python(textwrap.dedent(source), files=mode, timeout_s=10.0)
    assert r.file_isolation == file_isolation(mode)
    assert not r.timed_out, r.stderr[-800:]
    return r


def _hooked(mode: str) -> bool:
    """Whether the audit hook's path checks apply (they come first: the hook refuses before the kernel
    is asked)."""
    return "audit-hook" in file_isolation(mode)


def _assert_no_leak(r: SandboxResult, *leaks: str) -> None:
    for leak in leaks:
        assert leak not in r.stdout, f"{leak!r} leaked to stdout: {r.stdout[-800:]!r}"
        assert leak not in r.stderr, f"{leak!r} leaked to stderr: {r.stderr[-800:]!r}"


def _assert_refused(
    r: SandboxResult, mode: str, path: str | None = None, *, any_refusal: bool = False
) -> None:
    """The program died of the refusal: under the audit hook alone a PermissionError from its path checks
    (naming ``path``); in the namespace alone ENOENT; under both either one (the hook asks first, the
    namespace catches what it lets through)."""
    assert ESCAPED not in r.stdout and r.returncode == 1, (r.returncode, r.stdout[-400:], r.stderr[-800:])
    last = _last_line(r.stderr)
    by_hook = last.startswith("PermissionError") and (any_refusal or "outside the sandbox directory" in last)
    by_namespace = last.startswith("FileNotFoundError") and "No such file or directory" in last
    if by_hook and path is not None:
        assert path in last, last
    isolation = file_isolation(mode)
    if isolation == "audit-hook":
        assert by_hook, r.stderr[-800:]
    elif isolation == "mount-ns":
        assert by_namespace, r.stderr[-800:]
    else:
        assert by_hook or by_namespace, r.stderr[-800:]


@dataclass(frozen=True)
class Outside:
    """What a test plants outside the sandbox."""

    token: str  # the secret: it must never reach the program's output
    secret: Path  # a file holding the token
    folder: Path  # a folder holding ``planted``
    planted: str  # a file name as secret as the token
    module: str  # the name of a module in ``folder`` that holds the token
    database: Path  # an SQLite database whose table t holds the token


@pytest.fixture
def outside(tmp_path: Path) -> Outside:
    token = f"tok{secrets.token_hex(16)}"
    secret = tmp_path / "secret.txt"
    secret.write_text(f"SECRET={token}\n")
    folder = tmp_path / "outside-folder"
    folder.mkdir()
    planted = f"planted{secrets.token_hex(12)}.txt"
    (folder / planted).write_text(f"SECRET={token}\n")
    module = f"outsidemod_{secrets.token_hex(4)}"
    (folder / f"{module}.py").write_text(f"TOKEN = {token!r}\n")
    database = tmp_path / "outside.db"
    with contextlib.closing(sqlite3.connect(database)) as con, con:
        con.execute("create table t (v text)")
        con.execute("insert into t values (?)", (token,))
    return Outside(token, secret, folder, planted, module, database)


def _source(body: str, **names: object) -> str:
    """``body`` after the imports every program uses and the constants in ``names`` (as Python literals)."""
    head = "import glob, io, json, mmap, os, pathlib, shutil, sys\n"
    head += "".join(f"{k} = {v!r}\n" for k, v in names.items())
    return head + textwrap.dedent(body)


# --- reads of one outside file: each program ends with `print(ESCAPED, data)` after the read -------------------

# cwd deeper than the escape, then a path relative to a descriptor of the top folder: the kernel resolves it
# against the descriptor, while an `open` audit event carries no dir_fd (a check against the cwd lands inside)
_DIR_FD_ESCAPE = """
root = os.getcwd()
rel = os.path.relpath(SECRET, root)
deep = os.path.join(*["d"] * (rel.split(os.sep).count("..") + 2))
os.makedirs(deep)
top = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
os.chdir(deep)
fd = os.open(rel, os.O_RDONLY, dir_fd=top)
data = os.read(fd, 4096)
"""


def _cwd_flipper(a: str, b: str) -> str:
    """Program lines that start a second thread flipping the cwd between the folders ``a`` and ``b`` (Python
    expressions) until ``stop`` gets an item; its ``OSError``, if any, lands in ``failed``. The program imports
    ``threading`` and ends the thread itself (appends to ``stop``, joins ``flipper``)."""
    return f"""stop, failed = [], []
def flip():
    try:
        while not stop:
            os.chdir({a})
            os.chdir({b})
    except OSError as exc:
        failed.append(exc)
sys.setswitchinterval(1e-6)
flipper = threading.Thread(target=flip)
flipper.start()
"""


# a second thread flips the cwd between two folders while the main one opens a relative path: a check made
# against the cwd of the moment is not what the kernel resolves against a moment later
_CWD_RACE = (
    """
import threading
root = os.getcwd()
A, B, REL = {a}, {b}, {rel}
"""
    + _cwd_flipper("A", "B")
    + """data = error = None
try:
    for _ in range(3000):
        try:
            fd = os.open(REL, os.O_RDONLY)
        except OSError as exc:
            error = exc
            continue
        data = os.read(fd, 4096)
        break
finally:
    stop.append(1)
    flipper.join()
if data is None:
    raise failed[0] if failed else error
"""
)

READS = {
    "open": "data = open(SECRET).read()",
    "open-bytes-path": "data = open(os.fsencode(SECRET), 'rb').read()",
    "open-relative": "data = open(os.path.relpath(SECRET)).read()",
    "os.open": "fd = os.open(SECRET, os.O_RDONLY)\ndata = os.read(fd, 4096)",
    "FileIO": "data = io.FileIO(SECRET).read()",
    "read_text": "data = pathlib.Path(SECRET).read_text()",
    "read_bytes": "data = pathlib.Path(SECRET).read_bytes()",
    "mmap": "fd = os.open(SECRET, os.O_RDONLY)\ndata = mmap.mmap(fd, 0, prot=mmap.PROT_READ)[:]",
    "open_code": "data = io.open_code(SECRET).read()",
    "copyfile": "shutil.copyfile(SECRET, 'copy.txt')\ndata = open('copy.txt').read()",
    "proc-self-root": "data = open('/proc/self/root' + SECRET).read()",
    "proc-self-cwd": "data = open('/proc/self/cwd/' + os.path.relpath(SECRET)).read()",
    "dev-fd-dotdot": (
        "fd = os.open('.', os.O_RDONLY | os.O_DIRECTORY)\n"
        "data = open('/dev/fd/%d/%s' % (fd, os.path.relpath(SECRET))).read()"
    ),
    "dir_fd": _DIR_FD_ESCAPE,
    # deep enough that REL, checked from A, lands inside; from B (the top) it leaves
    "cwd-race-dotdot": "rel = os.path.relpath(SECRET)\nn = rel.split(os.sep).count('..') + 1\n"
    + "os.makedirs(os.path.join(*['d'] * n))\n"
    + _CWD_RACE.format(a="os.path.join(root, *['d'] * n)", b="root", rel="rel"),
    # checked in the folder (where no such file is), opened in the outside one
    "cwd-race-outside": _CWD_RACE.format(
        a="root", b="os.path.dirname(SECRET)", rel="os.path.basename(SECRET)"
    ),
}
# the race cases may also be refused where the cwd changes, in the hook's own words
RACES = ("cwd-race-dotdot", "cwd-race-outside")


@pytest.mark.parametrize("how", list(READS))
def test_reading_an_outside_file_fails(mode: str, outside: Outside, how: str) -> None:
    """Each read call on a file outside the folder fails, and the token never shows."""
    r = _run(_source(READS[how] + f"\nprint({ESCAPED!r}, data)\n", SECRET=str(outside.secret)), mode)
    _assert_no_leak(r, outside.token)
    direct = how in ("open", "os.open", "FileIO", "read_text", "read_bytes", "mmap", "open_code", "copyfile")
    _assert_refused(r, mode, str(outside.secret) if direct else None, any_refusal=how in RACES)


LIBRARY_READS = {
    # C libraries that open files themselves, past the interpreter's own open()
    "sqlite-connect": "import sqlite3\ncon = sqlite3.connect(DB)\ndata = con.execute('select v from t').fetchall()",
    "sqlite-uri": (
        "import sqlite3\ncon = sqlite3.connect('file:' + DB + '?mode=ro', uri=True)\n"
        "data = con.execute('select v from t').fetchall()"
    ),
    "sqlite-attach": (
        "import sqlite3\ncon = sqlite3.connect(':memory:')\ncon.execute('attach database ? as o', (DB,))\n"
        "data = con.execute('select v from o.t').fetchall()"
    ),
    "readline-history": "import readline\nreadline.read_history_file(SECRET)\ndata = readline.get_history_item(1)",
    "urlopen-file": "import urllib.request\ndata = urllib.request.urlopen('file://' + SECRET).read()",
}


@pytest.mark.parametrize("how", list(LIBRARY_READS))
def test_reading_through_libraries_fails(mode: str, outside: Outside, how: str) -> None:
    """Libraries that read files by path (SQLite by name, URI or ATTACH; readline's history; a file: URL)
    reach nothing outside; how they fail is theirs to say."""
    body = LIBRARY_READS[how] + f"\nprint({ESCAPED!r}, data)\n"
    r = _run(_source(body, SECRET=str(outside.secret), DB=str(outside.database)), mode)
    _assert_no_leak(r, outside.token)
    assert ESCAPED not in r.stdout and r.returncode == 1, (r.stdout[-400:], r.stderr[-800:])


def test_traceback_does_not_show_outside_source(mode: str, outside: Outside) -> None:
    """Code compiled under an outside file's name: neither linecache nor the interpreter's own traceback
    printer (which opens the file named in each frame) shows that file's lines."""
    body = """
    import linecache
    print('LINE', repr(linecache.getline(SECRET, 1)))
    exec(compile('1 / 0', SECRET, 'exec'))
    """
    r = _run(_source(body, SECRET=str(outside.secret)), mode)
    _assert_no_leak(r, outside.token)
    assert "LINE ''" in r.stdout, r.stdout
    assert _last_line(r.stderr) == "ZeroDivisionError: division by zero", r.stderr[-800:]
    assert f'File "{outside.secret}", line 1' in r.stderr


def test_importing_a_module_from_outside_fails(mode: str, outside: Outside) -> None:
    """A module planted outside cannot be imported by putting its folder on sys.path."""
    body = f"sys.path.insert(0, DIR)\nimport {outside.module} as m\nprint({ESCAPED!r}, m.TOKEN)\n"
    r = _run(_source(body, DIR=str(outside.folder)), mode)
    _assert_no_leak(r, outside.token)
    assert ESCAPED not in r.stdout and r.returncode == 1
    assert _last_line(r.stderr).startswith("ModuleNotFoundError"), r.stderr[-800:]


# --- listings of an outside folder: each program prints LISTED and the names it got -------------------------

LISTINGS = {
    "listdir": "names = os.listdir(DIR)",
    "scandir": "names = [e.name for e in os.scandir(DIR)]",
    "walk": (  # os.walk swallows errors unless given onerror
        "def fail(exc):\n    raise exc\n"
        "names = [n for _, ds, fs in os.walk(DIR, onerror=fail) for n in ds + fs]"
    ),
    "iterdir": "names = [p.name for p in pathlib.Path(DIR).iterdir()]",
    "listdir-fd": "names = os.listdir(os.open(DIR, os.O_RDONLY | os.O_DIRECTORY))",
    "scandir-fd": "names = [e.name for e in os.scandir(os.open(DIR, os.O_RDONLY | os.O_DIRECTORY))]",
    "dir_fd": (
        "root = os.getcwd()\nrel = os.path.relpath(DIR, root)\n"
        "deep = os.path.join(*['d'] * (rel.split(os.sep).count('..') + 2))\nos.makedirs(deep)\n"
        "top = os.open(root, os.O_RDONLY | os.O_DIRECTORY)\nos.chdir(deep)\n"
        "names = os.listdir(os.open(rel, os.O_RDONLY | os.O_DIRECTORY, dir_fd=top))"
    ),
}
# glob swallows every OSError by design: its listing fails as an empty result
SILENT_LISTINGS = {
    "glob": "names = glob.glob(os.path.join(DIR, '*'))",
    "glob-recursive": "names = glob.glob(os.path.join(DIR, '**'), recursive=True)",
    "glob-root_dir": "names = glob.glob('*', root_dir=DIR)",
}


def _listing_source(body: str, folder: str) -> str:
    return _source(body + "\nprint('LISTED', json.dumps(sorted(names)))\n", DIR=folder)


def _listed(r: SandboxResult) -> list[str] | None:
    for line in r.stdout.splitlines():
        if line.startswith("LISTED "):
            return json.loads(line[len("LISTED ") :])
    return None


@pytest.mark.parametrize("how", list(LISTINGS))
def test_listing_an_outside_folder_fails(mode: str, outside: Outside, how: str) -> None:
    """Each listing call on a folder outside fails; the planted name never shows."""
    r = _run(_listing_source(LISTINGS[how], str(outside.folder)), mode)
    _assert_no_leak(r, outside.planted, outside.module, outside.token)
    assert _listed(r) is None, r.stdout[-400:]
    direct = how in ("listdir", "scandir", "walk", "iterdir", "listdir-fd", "scandir-fd")
    _assert_refused(r, mode, str(outside.folder) if direct else None)


@pytest.mark.parametrize("how", list(SILENT_LISTINGS))
def test_globbing_an_outside_folder_finds_nothing(mode: str, outside: Outside, how: str) -> None:
    """glob hides errors: it must list nothing outside."""
    r = _run(_listing_source(SILENT_LISTINGS[how], str(outside.folder)), mode)
    _assert_no_leak(r, outside.planted, outside.module, outside.token)
    listed = _listed(r)
    assert r.returncode == 0 and listed is not None, (r.stdout[-400:], r.stderr[-800:])
    # a recursive pattern yields its own folder, existing or not; nothing in it may come
    assert set(listed) <= {os.path.join(str(outside.folder), "")}, listed
    # seen from here, the folder does hold what the program was after
    assert outside.planted in os.listdir(outside.folder)


def _interpreter_components(home: str) -> set[str]:
    """The entries of ``home`` on the way to the interpreter's own directories (which the sandbox reads)."""
    found = set()
    for d in (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, sys.executable):
        for p in (d, os.path.realpath(d)):
            rel = os.path.relpath(p, home)
            if not rel.startswith(os.pardir):
                found.add(rel.split(os.sep)[0])
    return found


@pytest.mark.parametrize("how", ["listdir", "scandir", "iterdir"])
def test_listing_the_real_home_fails(mode: str, how: str) -> None:
    """The parent's home directory (read, never written, by this test) cannot be listed, beyond the path
    to the interpreter itself, which the sandbox shows read-only."""
    home = os.path.expanduser("~")
    if not os.path.isdir(home):
        pytest.skip(f"the home directory {home!r} does not exist here")
    r = _run(_listing_source(LISTINGS[how], home), mode)
    hidden = set(os.listdir(home)) - _interpreter_components(home)
    listed = _listed(r)
    if _hooked(mode):
        assert listed is None
        _assert_refused(r, mode, home)
    elif listed is not None:  # the namespace shows the interpreter's prefixes at their own paths
        assert set(listed) <= _interpreter_components(home), listed
    else:
        _assert_refused(r, mode, home)
    # names long enough not to come up by chance in a traceback
    _assert_no_leak(r, *(n for n in hidden if len(n) >= 8))


# --- symlinks and hard links --------------------------------------------------------------------------------

LINKS = {
    "symlink-file": "os.symlink(SECRET, 'link')\nprint('LINKED')\ndata = open('link').read()",
    "symlink-relative": (
        "os.symlink(os.path.relpath(SECRET), 'link')\nprint('LINKED')\ndata = open('link').read()"
    ),
    "symlink-folder": "os.symlink(DIR, 'link')\nprint('LINKED')\ndata = os.listdir('link')",
    "hardlink": "os.link(SECRET, 'hard')\nprint('LINKED')\ndata = open('hard').read()",
}


@pytest.mark.parametrize("how", list(LINKS))
def test_links_to_outside_do_not_reach_it(mode: str, outside: Outside, how: str) -> None:
    """Under the hook making the link is refused; in the namespace alone the link is made and dangles."""
    body = LINKS[how] + f"\nprint({ESCAPED!r}, data)\n"
    r = _run(_source(body, SECRET=str(outside.secret), DIR=str(outside.folder)), mode)
    _assert_no_leak(r, outside.token, outside.planted, outside.module)
    assert ESCAPED not in r.stdout and r.returncode == 1, (r.stdout[-400:], r.stderr[-800:])
    last = _last_line(r.stderr)
    if _hooked(mode):
        event = "os.link" if how == "hardlink" else "os.symlink"
        assert "LINKED" not in r.stdout
        assert last.startswith("PermissionError") and event in last, r.stderr[-800:]
    else:
        # a hard link needs its target, which does not exist here; a symlink is made, then cannot be followed
        assert ("LINKED" in r.stdout) == (how != "hardlink"), r.stdout
        assert last.startswith("FileNotFoundError"), r.stderr[-800:]


# --- /proc ----------------------------------------------------------------------------------------------------


@pytest.fixture
def secret_env(monkeypatch: pytest.MonkeyPatch) -> str:
    value = f"env{secrets.token_hex(16)}"
    monkeypatch.setenv("TOPOROUTE_TEST_SECRET", value)
    return value


@dataclass(frozen=True)
class OtherProcess:
    pid: int
    env_token: str  # in its environment only
    argv_token: str  # in its command line only


@pytest.fixture(scope="module")
def other_process() -> Iterator[OtherProcess]:
    """A process outside the sandbox with a secret in its environment and in its command line (the
    environment a process set with putenv does not show in /proc, so the parent's own would prove little)."""
    env_token, argv_token = f"penv{secrets.token_hex(16)}", f"parg{secrets.token_hex(16)}"
    env = {"PATH": "/usr/bin:/bin", "TOPOROUTE_OTHER_SECRET": env_token}
    code = "import sys; sys.stdin.read()"
    proc = subprocess.Popen([sys.executable, "-c", code, argv_token], stdin=subprocess.PIPE, env=env)
    try:
        # the planted secrets are there to be read, for anyone outside the sandbox (once its exec is done)
        deadline = time.monotonic() + 10
        while argv_token not in Path(f"/proc/{proc.pid}/cmdline").read_text(errors="replace"):
            assert time.monotonic() < deadline, "the other process did not start"
            time.sleep(0.01)
        assert env_token in Path(f"/proc/{proc.pid}/environ").read_text(errors="replace")
        yield OtherProcess(proc.pid, env_token, argv_token)
    finally:
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait(10)


def test_own_environ_holds_no_secret(mode: str, secret_env: str) -> None:
    """/proc/self/environ: refused under the hook; in the namespace alone it shows the sandbox's minimal
    environment only."""
    body = f"data = open('/proc/self/environ', 'rb').read()\nprint({ESCAPED!r}, json.dumps(data.decode()))\n"
    r = _run(_source(body), mode)
    _assert_no_leak(r, secret_env, "TOPOROUTE_TEST_SECRET")
    if _hooked(mode):
        _assert_refused(r, mode, "/proc/self/environ")
    else:
        assert r.returncode == 0, r.stderr[-800:]
        environ = json.loads(r.stdout.split(ESCAPED, 1)[1])
        keys = {entry.split("=", 1)[0] for entry in environ.split("\0") if entry}
        assert keys <= SANDBOX_ENV_KEYS, keys


@pytest.mark.parametrize("whose", ["other", "parent"])
@pytest.mark.parametrize("entry", ["environ", "cmdline"])
def test_other_processes_proc_entries_are_unreachable(
    mode: str, secret_env: str, other_process: OtherProcess, whose: str, entry: str
) -> None:
    """/proc/<pid>/environ and cmdline of a process outside (the parent, another one): refused by the hook,
    absent from the namespace's own /proc."""
    pid = other_process.pid if whose == "other" else os.getpid()
    path = f"/proc/{pid}/{entry}"
    body = f"data = open(PATH, 'rb').read()\nprint({ESCAPED!r}, data.decode(errors='replace'))\n"
    r = _run(_source(body, PATH=path), mode)
    parent_cmdline = Path("/proc/self/cmdline").read_text(errors="replace").replace("\0", " ").strip()
    _assert_no_leak(r, secret_env, other_process.env_token, other_process.argv_token, parent_cmdline)
    _assert_refused(r, mode, path)


def test_init_environ_holds_no_secret(mode: str, secret_env: str) -> None:
    """/proc/1/environ: refused by the hook; in the namespace alone pid 1 is the sandbox's own (bubblewrap's
    init), whose environment is the minimal one."""
    body = f"data = open('/proc/1/environ', 'rb').read()\nprint({ESCAPED!r}, json.dumps(data.decode()))\n"
    r = _run(_source(body), mode)
    _assert_no_leak(r, secret_env)
    if _hooked(mode):
        _assert_refused(r, mode, "/proc/1/environ")
    elif r.returncode == 0:
        environ = json.loads(r.stdout.split(ESCAPED, 1)[1])
        keys = {entry.split("=", 1)[0] for entry in environ.split("\0") if entry}
        assert keys <= SANDBOX_ENV_KEYS, keys
    else:  # the kernel may also keep bubblewrap's own process from being read
        assert _last_line(r.stderr).startswith(("PermissionError", "FileNotFoundError")), r.stderr[-800:]


_LIST_PROC = """
seen = {}
for pid in os.listdir('/proc'):
    if not pid.isdigit() or int(pid) == os.getpid():
        continue
    for entry in ('cmdline', 'environ'):
        try:
            with open('/proc/%s/%s' % (pid, entry), 'rb') as f:
                seen['%s/%s' % (pid, entry)] = f.read().decode(errors='replace')
        except OSError as exc:
            seen['%s/%s' % (pid, entry)] = '!' + type(exc).__name__
print('LISTED', json.dumps(seen))
"""


def test_listing_proc_shows_no_outside_process(
    mode: str, secret_env: str, other_process: OtherProcess
) -> None:
    """Listing /proc is refused by the hook; the namespace's /proc holds its own pid namespace only."""
    r = _run(_source(_LIST_PROC), mode)
    _assert_no_leak(r, secret_env, other_process.env_token, other_process.argv_token)
    if _hooked(mode):
        _assert_refused(r, mode, "/proc")
        return
    assert r.returncode == 0, r.stderr[-800:]
    seen = json.loads(r.stdout.split("LISTED ", 1)[1])
    pids = {key.split("/")[0] for key in seen}
    assert str(other_process.pid) not in pids and str(os.getpid()) not in pids, sorted(pids)
    for key, text in seen.items():
        if key.endswith("/environ") and not text.startswith("!"):
            keys = {e.split("=", 1)[0] for e in text.split("\0") if e}
            assert keys <= SANDBOX_ENV_KEYS, (key, keys)


# --- Python still works ---------------------------------------------------------------------------------------

_STDLIB_PROGRAM = """
import ast, bisect, collections, copy, dataclasses, datetime, decimal, fractions, functools, glob, hashlib
import heapq, inspect, itertools, json, math, os, pathlib, random, re, statistics, string, tempfile
import textwrap, traceback, typing, unicodedata

@dataclasses.dataclass(frozen=True)
class P:
    x: int
    y: int

def hinted(a: int, b: str = "") -> list[int]:
    return [a]

try:
    json.loads("{bad")
except ValueError:
    tb = traceback.format_exc()

checks = {
    "json": json.loads(json.dumps({"a": [1, 2]})) == {"a": [1, 2]},
    "re": re.findall(r"[0-9]+", "a1b22") == ["1", "22"],
    "math": math.isclose(math.sqrt(2) ** 2, 2) and math.comb(5, 2) == 10,
    "fractions": fractions.Fraction(1, 3) + fractions.Fraction(1, 6) == fractions.Fraction(1, 2),
    "decimal": decimal.Decimal("0.1") + decimal.Decimal("0.2") == decimal.Decimal("0.3"),
    "collections": collections.Counter("abca").most_common(1) == [("a", 2)],
    "heapq": heapq.nsmallest(2, [5, 1, 4]) == [1, 4],
    "hashlib": hashlib.sha256(b"abc").hexdigest().startswith("ba7816bf"),
    "itertools": list(itertools.accumulate([1, 2, 3])) == [1, 3, 6],
    "functools": functools.reduce(lambda a, b: a * b, range(1, 6)) == 120,
    "typing": typing.get_type_hints(hinted) == {"a": int, "b": str, "return": list[int]},
    "dataclasses": dataclasses.asdict(P(1, 2)) == {"x": 1, "y": 2},
    "datetime": datetime.date(2024, 3, 1) - datetime.timedelta(days=1) == datetime.date(2024, 2, 29),
    "statistics": statistics.median([3, 1, 2]) == 2 and statistics.mean([1, 2]) == 1.5,
    "random": random.Random(0).random() == RANDOM_0,
    "string": string.ascii_lowercase[:3] == "abc",
    "bisect": bisect.bisect_left([1, 3, 5], 4) == 2,
    "copy": copy.deepcopy({"a": [1]}) == {"a": [1]},
    "textwrap": textwrap.wrap("aaa bbb ccc", 7) == ["aaa bbb", "ccc"],
    "unicodedata": unicodedata.name("\\u00e9") == "LATIN SMALL LETTER E WITH ACUTE",
    "ast": ast.literal_eval("[1, (2, 3)]") == [1, (2, 3)],
    "inspect": "def dumps" in inspect.getsource(json.dumps),  # reads the standard library's source
    # the lines of main.py and of json's own source
    "traceback": 'json.loads("{bad")' in tb and "return _default_decoder.decode(s)" in tb,
}

# its own files: the folder (cwd), HOME and TMPDIR, by several calls
home, tmp = pathlib.Path.home(), tempfile.gettempdir()
with open("here.txt", "w") as f:
    f.write("cwd")
(home / "h.txt").write_text("home")
with tempfile.NamedTemporaryFile("w", delete=False) as f:
    f.write("tmp")
sub = tempfile.mkdtemp()
os.makedirs("a/b")
fd = os.open("a/b/raw.bin", os.O_WRONLY | os.O_CREAT)
os.write(fd, b"raw")
os.close(fd)
checks["files"] = (
    open("here.txt").read() == "cwd"
    and (home / "h.txt").read_text() == "home"
    and open(f.name).read() == "tmp"
    and os.path.isdir(sub)
    and open(os.path.join(os.environ["HOME"], "h.txt")).read() == "home"
    and open("a/b/raw.bin", "rb").read() == b"raw"
    and open(__file__).read().startswith("\\nimport ast")
    and {"here.txt", "a", "main.py"} <= set(os.listdir("."))
    and "raw.bin" in [n for _, _, fs in os.walk(".") for n in fs]
    and "here.txt" in glob.glob("*.txt")
    and {e.name for e in os.scandir(home)} == {"h.txt"}
    and str(home).startswith(os.getcwd() + os.sep)
    and tmp.startswith(os.getcwd() + os.sep)
)
print(json.dumps(checks))
"""


def test_python_and_its_stdlib_work(mode: str) -> None:
    """Imports, the standard library's own files (source for inspect and tracebacks), and the program's
    files in its folder, HOME and TMPDIR all work in every mode."""
    import random

    r = _run(_STDLIB_PROGRAM.replace("RANDOM_0", repr(random.Random(0).random())), mode)
    assert r.returncode == 0, r.stderr[-2000:]
    checks = json.loads(r.stdout)
    assert [k for k, ok in checks.items() if not ok] == [], checks


def test_numpy_works(mode: str) -> None:
    """numpy, where the interpreter has it, imports and computes (its compiled libraries load)."""
    pytest.importorskip("numpy")
    code = """
    import numpy as np
    a = np.array([[2.0, 1.0], [1.0, 3.0]])
    x = np.linalg.solve(a, np.array([3.0, 5.0]))
    np.save("x.npy", x)
    print(np.round(np.load("x.npy"), 6).tolist(), int(np.arange(10).sum()))
    """
    r = _run(code, mode)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout == "[0.8, 1.4] 45\n"


# --- the other escapes stay contained in every mode -------------------------------------------------------------

_CWD_RACE_APPEND = (
    """
import threading
root = os.getcwd()
open('victim.txt', 'w').close()
"""
    + _cwd_flipper("root", "DIR")
    + """try:
    for _ in range(3000):
        try:
            fd = os.open('victim.txt', os.O_WRONLY | os.O_APPEND)
        except OSError:
            continue
        os.write(fd, b'escaped')
        os.close(fd)
finally:
    stop.append(1)
    flipper.join()
if failed:
    raise failed[0]
"""
)

WRITES = {
    "new-file": "open(os.path.join(DIR, 'new.txt'), 'w').write('escaped')",
    "append": "open(VICTIM, 'a').write('escaped')",
    "truncate": "open(VICTIM, 'w').write('escaped')",
    "os.open-write": "os.write(os.open(VICTIM, os.O_WRONLY), b'escaped')",
    "remove": "os.remove(VICTIM)",
    "rename": "os.rename(VICTIM, 'stolen.txt')",
    "makedirs": "os.makedirs(os.path.join(DIR, 'newdir', 'sub'))",
    # a path relative to a descriptor of the top folder, checked against a deeper cwd (see _DIR_FD_ESCAPE)
    "dir_fd-create": (
        "root = os.getcwd()\nrel = os.path.join(os.path.relpath(DIR, root), 'new.txt')\n"
        "deep = os.path.join(*['d'] * (rel.split(os.sep).count('..') + 2))\nos.makedirs(deep)\n"
        "top = os.open(root, os.O_RDONLY | os.O_DIRECTORY)\nos.chdir(deep)\n"
        "os.write(os.open(rel, os.O_WRONLY | os.O_CREAT, dir_fd=top), b'escaped')"
    ),
    # the cwd flips between the folder and DIR while the main thread appends to a name both hold
    "cwd-race-append": _CWD_RACE_APPEND,
}


@pytest.mark.parametrize("how", list(WRITES))
def test_writes_outside_change_nothing(mode: str, tmp_path: Path, how: str) -> None:
    """A write, removal or new folder outside leaves the outside untouched (checked from here)."""
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    before = sorted(os.listdir(tmp_path))
    r = _run(_source(WRITES[how] + "\nprint('WROTE')\n", DIR=str(tmp_path), VICTIM=str(victim)), mode)
    assert victim.read_text() == "keep me"
    assert sorted(os.listdir(tmp_path)) == before
    if how == "cwd-race-append":
        return  # refused at the chdir or at each open, or never raced: what counts is the outside above
    last = _last_line(r.stderr)
    by_hook = last.startswith("PermissionError")
    by_namespace = last.startswith("FileNotFoundError")
    isolation = file_isolation(mode)
    if isolation == "audit-hook":
        assert by_hook and "WROTE" not in r.stdout, r.stderr[-800:]
    elif isolation == "mount-ns+audit-hook":
        assert (by_hook or by_namespace) and "WROTE" not in r.stdout, r.stderr[-800:]
    elif how != "makedirs":
        # the namespace's own root (a tmpfs that vanishes with it) may take a new folder; nothing else
        assert by_namespace and "WROTE" not in r.stdout, r.stderr[-800:]


def test_network_stays_refused(mode: str, listener: socket.socket) -> None:
    """Connecting to a port the parent listens on fails; the parent sees no connection."""
    port = listener.getsockname()[1]
    code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')"
    r = _run(code, mode)
    assert "connected" not in r.stdout and r.returncode == 1
    assert _last_line(r.stderr).startswith("PermissionError"), r.stderr[-800:]
    try:
        conn, _ = listener.accept()
    except TimeoutError:
        pass
    else:
        conn.close()
        pytest.fail("the sandboxed program's connection reached the parent")


@pytest.mark.parametrize(
    ("code", "event"),
    [
        ("import subprocess\nsubprocess.run(['echo', 'SPAWNED'])", "subprocess.Popen"),
        ("import os\nos.system('echo SPAWNED')", "os.system"),
        ("import os\nos.posix_spawn('/bin/echo', ['echo', 'SPAWNED'], {})", "os.posix_spawn"),
    ],
    ids=["subprocess", "system", "posix_spawn"],
)
def test_starting_processes_stays_refused(mode: str, code: str, event: str) -> None:
    """subprocess, os.system and posix_spawn are refused in every mode."""
    r = _run(code, mode)
    assert "SPAWNED" not in r.stdout and r.returncode == 1
    last = _last_line(r.stderr)
    assert last.startswith("PermissionError") and event in last, r.stderr[-800:]


# --- which isolation applied ----------------------------------------------------------------------------------


def test_file_isolation_is_reported(mode: str) -> None:
    """SandboxResult.file_isolation is file_isolation(mode), and auto means the namespace exactly when one
    can be made here."""
    r = _run("print('hi')", mode)
    assert r.ok and r.stdout == "hi\n", r.stderr[-800:]
    expected = {
        "auto": "mount-ns+audit-hook" if mount_namespace_available() else "audit-hook",
        "mount-ns": "mount-ns",
        "audit-hook": "audit-hook",
    }[mode]
    assert file_isolation(mode) == expected and r.file_isolation == expected


def test_default_is_auto() -> None:
    assert run_python("print(1)").file_isolation == file_isolation() == file_isolation("auto")


def test_mount_ns_mode_needs_a_namespace() -> None:
    """files='mount-ns' runs where a namespace can be made, and raises ToporouteError (with the reason)
    where it cannot; never a silent fall back."""
    if mount_namespace_available():
        assert mount_namespace_unavailable_reason() == ""
        assert run_python("print(1)", files="mount-ns").file_isolation == "mount-ns"
    else:
        reason = mount_namespace_unavailable_reason()
        assert reason
        with pytest.raises(ToporouteError, match="mount"):
            run_python("print(1)", files="mount-ns")


@pytest.mark.parametrize("files", ["none", "", "mount_ns", None, True])
def test_bad_files_argument(files: object) -> None:
    with pytest.raises(InvalidArgumentError) as info:
        run_python("print(1)", files=files)  # type: ignore[arg-type]
    assert info.value.arg == "files" and "files" in str(info.value)
