"""toporoute.tasks.sandbox.run_python: real runs of untrusted-looking programs, no mocks.

Each property is checked from outside the sandbox where it can be (the parent listens on the port the
program tries to reach, looks for the child process by pid, checks the directory is gone) rather than trusting
what the sandboxed program reports.
"""

from __future__ import annotations

import json
import os
import re
import resource
import secrets
import signal
import socket
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from toporoute.errors import InvalidArgumentError
from toporoute.tasks import SandboxResult, run_python
from toporoute.tasks.sandbox import FSIZE_LIMIT_BYTES, MAX_OUTPUT_BYTES, network_isolation

MiB = 1024 * 1024


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1] if lines else ""


def _process_gone(pid: int, wait_s: float = 3.0) -> bool:
    """True once ``pid`` no longer runs. A zombie counts as gone: it was killed, and reaping an orphan is up
    to this container's init, not to the sandbox."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, IndexError):
            return True
        if state in ("Z", "X"):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


def test_normal_program_prints() -> None:
    r = run_python("import sys\nprint('hello', sum(range(10)))\nprint('warn', file=sys.stderr)")
    assert isinstance(r, SandboxResult)
    assert r.ok and r.returncode == 0 and not r.timed_out and r.killed_by_signal is None
    assert r.stdout == "hello 45\n"
    assert r.stderr == "warn\n"
    assert 0 < r.wall_s < 5
    assert r.network_isolation == network_isolation()


def test_exit_status_stdin_and_traceback() -> None:
    r = run_python("import sys\nname = input()\nprint(name.upper())\nsys.exit(3)", stdin="ada\n")
    assert r.returncode == 3 and not r.ok and r.stdout == "ADA\n"
    r = run_python("def f():\n    raise KeyError('k')\nf()")
    assert r.returncode == 1
    assert _last_line(r.stderr) == "KeyError: 'k'"
    assert 'File "main.py", line 2, in f' in r.stderr


def test_runs_isolated_python(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONPATH", "/nonexistent-injected")
    code = (
        "import sys, json\nprint(json.dumps([sys.flags.isolated, sys.flags.dont_write_bytecode, sys.path]))"
    )
    isolated, no_pyc, path = json.loads(run_python(code).stdout)
    assert isolated == 1 and no_pyc == 1
    assert "/nonexistent-injected" not in path and "" not in path


def test_infinite_loop_is_killed_at_the_timeout() -> None:
    r = run_python("while True:\n    pass", timeout_s=1.0)
    assert r.timed_out and not r.ok
    assert r.returncode is None and r.killed_by_signal == signal.SIGKILL
    assert 1.0 <= r.wall_s < 2.5


def test_sleeping_program_is_killed_at_the_timeout() -> None:
    # no CPU used, so only the wall-clock limit can stop it
    start = time.monotonic()
    r = run_python("import time\nprint('started', flush=True)\ntime.sleep(60)", timeout_s=1.5)
    assert r.timed_out and r.killed_by_signal == signal.SIGKILL
    assert r.stdout == "started\n"  # output before the kill is kept
    assert time.monotonic() - start < 3.5


_FORK_AND_SLEEP = """
import os, sys, time
pid = os.fork()
if pid == 0:
    os.execv("/bin/sleep", ["sleep", sys.stdin.read()])  # marked by its argument, seen from outside
print("forked", flush=True)
"""


def _pids_with_argument(arg: str) -> list[int]:
    """The pids (of this machine's /proc, so outside any pid namespace) of live processes with ``arg`` in their
    command line."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if arg.encode() in (entry / "cmdline").read_bytes().split(b"\0"):
                    found.append(int(entry.name))
            except OSError:
                continue
    return [pid for pid in found if not _process_gone(pid, 0.0)]


@pytest.mark.parametrize("parent", ["sleeps", "exits"])
def test_forked_child_is_killed_with_the_group(parent: str) -> None:
    """A process the program starts is killed with it, whether the program timed out or exited; checked from
    outside (the sandbox may give the program a pid namespace of its own), by the child's marked command line."""
    source = _FORK_AND_SLEEP + ("time.sleep(1000)\n" if parent == "sleeps" else "time.sleep(0.5)\n")
    marker = f"1000.{secrets.randbelow(10**9):09d}"
    with ThreadPoolExecutor(1) as pool:
        run = pool.submit(
            run_python, source, stdin=marker, timeout_s=3.0 if parent == "sleeps" else 10.0, allow_spawn=True
        )
        deadline = time.monotonic() + 10
        while not _pids_with_argument(marker) and not run.done() and time.monotonic() < deadline:
            time.sleep(0.02)
        seen = _pids_with_argument(marker)
        r = run.result()
    assert seen, f"the child never showed up (stdout {r.stdout!r}, stderr {r.stderr[-500:]!r})"
    assert r.stdout == "forked\n"
    if parent == "sleeps":
        assert r.timed_out and r.killed_by_signal == signal.SIGKILL
    else:  # the program itself finished: its status counts, the child left behind is still killed
        assert r.returncode == 0 and not r.timed_out
        assert r.wall_s < 5
    assert all(_process_gone(pid) for pid in seen), f"child {seen} still running after the sandbox returned"


@pytest.mark.parametrize(
    ("code", "event"),
    [
        ("import os\nos.fork()", "os.fork"),
        ("import subprocess\nsubprocess.run(['true'])", "subprocess.Popen"),
        ("import os\nos.system('true')", "os.system"),
        ("import os\nos.execv('/bin/true', ['true'])", "os.exec"),
        ("import os\nos.posix_spawn('/bin/true', ['true'], {})", "os.posix_spawn"),
        ("import _posixsubprocess\n_posixsubprocess.fork_exec()", "_posixsubprocess"),
        (
            (
                "import sys, importlib\ndel sys.modules['_posixsubprocess']\n"
                "importlib.import_module('_posixsubprocess')"
            ),
            "re-importing _posixsubprocess",
        ),
        ("import ctypes\nctypes.CDLL(None).fork()", "ctypes.dlsym"),
        ("import multiprocessing\nmultiprocessing.Process(target=print).start()", "os.fork"),
    ],
    ids=["fork", "subprocess", "system", "exec", "posix_spawn", "fork_exec", "reimport", "ctypes", "mp"],
)
def test_process_spawning_is_refused(code: str, event: str) -> None:
    r = run_python(code + "\nprint('escaped')", timeout_s=5)
    assert r.returncode == 1 and "escaped" not in r.stdout
    last = _last_line(r.stderr)
    assert last.startswith("PermissionError") and event in last, r.stderr[-500:]


def test_memory_bomb_fails_without_hurting_the_parent() -> None:
    before = resource.getrlimit(resource.RLIMIT_AS)
    r = run_python("chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024 * 1024))", memory_mb=256)
    assert not r.ok and not r.timed_out
    assert _last_line(r.stderr) == "MemoryError"
    r = run_python("x = bytearray(2 * 1024 ** 3)", memory_mb=256)
    assert _last_line(r.stderr) == "MemoryError"
    # the limit applied to the child only: the parent can still allocate past it
    assert resource.getrlimit(resource.RLIMIT_AS) == before
    big = bytearray(300 * MiB)
    assert len(big) == 300 * MiB


def test_resource_limits_are_set_and_cannot_be_raised() -> None:
    code = (
        "import resource, json\n"
        "names = ['RLIMIT_AS', 'RLIMIT_CPU', 'RLIMIT_FSIZE', 'RLIMIT_CORE']\n"
        "print(json.dumps({n: resource.getrlimit(getattr(resource, n)) for n in names}))\n"
        "resource.setrlimit(resource.RLIMIT_AS, (-1, -1))"
    )
    r = run_python(code, memory_mb=300, timeout_s=2.5)
    limits = json.loads(r.stdout)
    assert limits["RLIMIT_AS"] == [300 * MiB, 300 * MiB]
    assert limits["RLIMIT_CPU"][0] == 4  # ceil(2.5) + 1
    assert limits["RLIMIT_FSIZE"] == [FSIZE_LIMIT_BYTES, FSIZE_LIMIT_BYTES]
    assert limits["RLIMIT_CORE"] == [0, 0]
    assert _last_line(r.stderr).startswith("PermissionError") and "resource.setrlimit" in r.stderr


def test_file_size_limit() -> None:
    r = run_python("with open('big.bin', 'wb') as f:\n    f.write(b'x' * (32 * 1024 * 1024))")
    assert not r.ok
    # Python ignores SIGXFSZ, so the write fails with EFBIG instead of the process dying
    assert "File too large" in r.stderr or r.killed_by_signal == signal.SIGXFSZ


def _no_connection_arrived(srv: socket.socket) -> bool:
    try:
        conn, _ = srv.accept()
    except TimeoutError:
        return True
    conn.close()
    return False


@pytest.mark.parametrize("netns", [True, False], ids=["netns", "audit-hook-only"])
def test_socket_connect_to_localhost_fails(listener: socket.socket, netns: bool) -> None:
    port = listener.getsockname()[1]
    code = (
        f"import socket\ns = socket.create_connection(('127.0.0.1', {port}), timeout=2)\nprint('connected')"
    )
    r = run_python(code, netns=netns)
    assert "connected" not in r.stdout and r.returncode == 1
    assert _last_line(r.stderr).startswith("PermissionError")
    assert _no_connection_arrived(listener)
    # the listener itself works: the same connection from the parent arrives
    with socket.create_connection(("127.0.0.1", port), timeout=2):
        assert not _no_connection_arrived(listener)


@pytest.mark.parametrize(
    "code",
    [
        "import socket\nsocket.getaddrinfo('localhost', 80)",
        "import socket\nsocket.gethostbyname('example.com')",
        "import urllib.request\nurllib.request.urlopen('http://127.0.0.1:9/', timeout=2)",
        (
            "import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n"
            "s.sendto(b'x', ('127.0.0.1', 53))"
        ),
    ],
    ids=["getaddrinfo", "gethostbyname", "urlopen", "udp"],
)
def test_dns_and_other_network_calls_fail(code: str) -> None:
    r = run_python(code + "\nprint('reached')", netns=False)  # the audit hook alone must stop them
    assert "reached" not in r.stdout
    assert "PermissionError" in r.stderr and "network access is disabled" in r.stderr


def test_network_namespace_has_no_interfaces_when_available() -> None:
    code = "import socket, json\nprint(json.dumps([n for _, n in socket.if_nameindex()]))"
    host = run_python(code, netns=False)
    r = run_python(code)
    if r.network_isolation != "netns+audit-hook":
        pytest.skip("this machine does not allow network namespaces (the audit hook alone applies)")
    assert json.loads(r.stdout) == ["lo"]
    # without the namespace the program sees this machine's interfaces
    assert host.network_isolation == "audit-hook"
    assert json.loads(host.stdout) == [n for _, n in socket.if_nameindex()]


def test_asyncio_still_works() -> None:
    # asyncio needs an AF_UNIX socketpair for its self-pipe: the only socket the sandbox allows
    r = run_python(
        "import asyncio\nasync def f():\n    await asyncio.sleep(0)\n    return 7\nprint(asyncio.run(f()))"
    )
    assert r.ok and r.stdout == "7\n", r.stderr


def test_writes_land_in_the_temp_dir_which_is_removed(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    code = (
        "import os, json, tempfile\n"
        "open('out.txt', 'w').write('data')\n"
        "with tempfile.NamedTemporaryFile('w', delete=False) as f:\n"
        "    f.write('t')\n"
        "os.makedirs('sub/dir')\n"
        "open('sub/dir/x', 'w').write('y')\n"
        "os.remove('sub/dir/x')\n"
        "print(json.dumps({'cwd': os.getcwd(), 'file': os.path.abspath('out.txt'), 'tmp': f.name,\n"
        "                  'home': os.environ['HOME'], 'tmpdir': tempfile.gettempdir()}))\n"
        f"open({str(outside)!r}, 'w').write('escaped')\n"
    )
    r = run_python(code)
    paths = json.loads(r.stdout)
    root = paths["cwd"]
    assert os.path.dirname(root) == tempfile.gettempdir()
    assert os.path.basename(root).startswith("toporoute-sandbox-")
    for key in ("file", "tmp", "home", "tmpdir"):
        assert paths[key].startswith(root + os.sep), (key, paths[key], root)
    assert not os.path.exists(root), "the sandbox directory was not removed"
    # the write outside was refused and did not happen
    assert "PermissionError" in _last_line(r.stderr) and "outside" in _last_line(r.stderr)
    assert not outside.exists()


@pytest.mark.parametrize(
    "code",
    [
        "import os\nos.remove({path!r})",
        "import os\nos.rename({path!r}, 'stolen.txt')",
        "import shutil\nshutil.rmtree({dir!r})",
        "import os\nos.symlink({path!r}, 'link')",
        "import os\nos.chmod({path!r}, 0o777)",
        "import os\nfd = os.open({dir!r}, os.O_RDONLY)\nos.unlink('victim.txt', dir_fd=fd)",
    ],
    ids=["remove", "rename", "rmtree", "symlink", "chmod", "unlink-dir_fd"],
)
def test_changes_outside_the_temp_dir_are_refused(tmp_path: Path, code: str) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    os.chmod(victim, 0o600)
    r = run_python(code.format(path=str(victim), dir=str(tmp_path)))
    assert _last_line(r.stderr).startswith("PermissionError"), r.stderr[-400:]
    assert victim.read_text() == "keep me" and (victim.stat().st_mode & 0o777) == 0o600


def test_parent_environment_is_not_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TOPOROUTE_FAKE_SECRET", "hunter2")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-fake")
    r = run_python("import os, json\nprint(json.dumps(dict(os.environ)))")
    env = json.loads(r.stdout)
    assert "TOPOROUTE_FAKE_SECRET" not in env and "OPENAI_API_KEY" not in env
    assert "hunter2" not in r.stdout and "sk-fake" not in r.stdout
    assert set(env) <= {"PATH", "LANG", "LC_ALL", "LC_CTYPE", "HOME", "TMPDIR", "PWD"}  # bubblewrap sets PWD


def test_cannot_signal_other_processes() -> None:
    r = run_python("import os\nos.kill(os.getppid(), 0)")
    assert _last_line(r.stderr).startswith("PermissionError")
    # its own process is fine
    r = run_python(
        "import os, signal\nsignal.signal(signal.SIGUSR1, lambda *a: print('got it'))\n"
        "os.kill(os.getpid(), signal.SIGUSR1)"
    )
    assert r.ok and r.stdout == "got it\n"


def test_audit_hook_cannot_be_reached() -> None:
    for code in ("import gc\ngc.get_objects()", "import gc\ngc.get_referrers(print)"):
        r = run_python(code)
        assert _last_line(r.stderr).startswith("PermissionError"), code


def test_huge_output_is_capped() -> None:
    r = run_python(
        "import sys\nfor i in range(200_000):\n    print('line', i)\nprint('END', file=sys.stdout)"
    )
    assert r.ok
    assert len(r.stdout.encode()) < MAX_OUTPUT_BYTES + 200
    assert r.stdout.startswith("line 0\nline 1\n")
    assert r.stdout.endswith("line 199999\nEND\n")  # the tail is kept: a traceback comes last
    assert re.search(r"\[\.\.\. \d+ bytes not kept \.\.\.\]", r.stdout)


def test_concurrent_runs_from_threads() -> None:
    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(lambda i: run_python(f"print({i} * {i})"), range(8)))
    assert [r.stdout for r in results] == [f"{i * i}\n" for i in range(8)]


@pytest.mark.parametrize(
    ("kwargs", "arg"),
    [
        ({"source": b"print(1)"}, "source"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"timeout_s": float("inf")}, "timeout_s"),
        ({"timeout_s": True}, "timeout_s"),
        ({"memory_mb": 16}, "memory_mb"),
        ({"memory_mb": 512.0}, "memory_mb"),
        ({"stdin": None}, "stdin"),
    ],
)
def test_bad_arguments(kwargs: dict, arg: str) -> None:
    source = kwargs.pop("source", "print(1)")
    with pytest.raises(InvalidArgumentError) as info:
        run_python(source, **kwargs)
    assert info.value.arg == arg and arg in str(info.value)


def test_directory_is_removed_even_after_chmod() -> None:
    code = "import os\nos.makedirs('locked/inner')\nopen('locked/inner/f', 'w').write('x')\n"
    code += "os.chmod('locked', 0)\n"
    r = run_python(code + "print(os.getcwd())")
    assert r.ok, r.stderr
    assert not os.path.exists(r.stdout.strip())
