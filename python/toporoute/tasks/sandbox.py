"""Running untrusted Python (LLM-written code) in a throw-away subprocess.

Layers, from the kernel up:

* a fresh interpreter (``python -I -B -X utf8``: isolated mode ignores ``PYTHON*`` variables and the
  user site) in its own session, so on timeout the whole process group is killed with SIGKILL;
* a fresh temporary directory as cwd, HOME and TMPDIR, removed afterwards, and a minimal environment (no
  inherited variables beyond PATH and the locale, so no secrets);
* a network namespace with no interfaces (``unshare --net``) where this machine allows one;
* resource limits set before the code runs: address space, CPU time, file size, no core dumps;
* an audit hook (``sys.addaudithook``; hooks cannot be removed) that refuses sockets, DNS, process spawning,
  signals to other processes, raising the limits, ctypes symbol lookup, and file writes outside the directory.

The audit hook stops ordinary Python code, not a determined attacker: the network namespace and the resource
limits are enforced by the kernel, the rest is defence in depth. Run the whole thing inside a container or VM
where the code may be hostile.
"""

from __future__ import annotations

import contextlib
import functools
import math
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import IO

from ..errors import InvalidArgumentError, ToporouteError

__all__ = ["MAX_OUTPUT_BYTES", "SandboxResult", "network_isolation", "run_python"]

MAX_OUTPUT_BYTES = 64 * 1024
"""Of stdout and stderr each, the first and the last half of this many bytes are kept, the middle dropped."""

FSIZE_LIMIT_BYTES = 16 * 1024 * 1024
MIN_MEMORY_MB = 64  # the interpreter itself needs ~30 MB of address space before any user code runs

_PATH = "/usr/local/bin:/usr/bin:/bin"
_POLL_S = 0.05  # how often the reader checks whether the program has exited
_EXIT_GRACE_S = 0.2

# Runs before the user's code in the sandboxed interpreter (``python -c``), with the limits in sys.argv[1:5].
# Everything lives inside one function so that nothing but the compiled user code is left in __main__.
_BOOT = r"""
def _toporoute_sandbox_boot():
    import os, resource, sys
    mem, cpu, fsize, allow_spawn = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "1"
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    root = os.getcwd()
    inside = root + os.sep
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    devices = frozenset(("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"))
    net = frozenset((
        "socket.connect", "socket.bind", "socket.getaddrinfo", "socket.gethostbyname",
        "socket.gethostbyname_ex", "socket.gethostbyaddr", "socket.getnameinfo", "socket.sendto",
        "socket.sendmsg", "socket.sethostname",
    ))
    spawn = frozenset((
        "os.exec", "os.fork", "os.forkpty", "os.posix_spawn", "os.spawn", "os.system", "subprocess.Popen",
        "os.startfile", "pty.spawn",
    ))
    # event -> (position of a path argument, position of the dir_fd it is relative to or -1), ...
    paths = {
        "os.remove": ((0, 1),), "os.rmdir": ((0, 1),), "os.mkdir": ((0, 2),), "os.rename": ((0, 2), (1, 3)),
        "os.truncate": ((0, -1),), "os.chmod": ((0, 2),), "os.chown": ((0, 3),), "os.utime": ((0, 3),),
        "os.chflags": ((0, -1),), "os.lchflags": ((0, -1),), "shutil.rmtree": ((0, 1),),
    }
    never = frozenset((
        "os.link", "os.symlink", "resource.setrlimit", "resource.prlimit", "ctypes.dlsym",
        "ctypes.dlsym/handle", "gc.get_referrers", "gc.get_referents", "gc.get_objects", "sys.settrace",
        "sys.setprofile", "os.chroot",
    ))
    own = os.getpid()
    fspath, isabs, join, normpath = os.fspath, os.path.isabs, os.path.join, os.path.normpath
    readlink, getcwd, fsdecode = os.readlink, os.getcwd, os.fsdecode

    def allowed_path(p, dir_fd):
        if isinstance(p, int):
            return True  # an already open descriptor: the open itself was checked
        p = fsdecode(fspath(p))
        if not isabs(p):
            # no dir_fd shows as None or a negative number (AT_FDCWD) depending on the call
            base = getcwd() if dir_fd is None or dir_fd < 0 else readlink("/proc/self/fd/%d" % dir_fd)
            p = join(base, p)
        p = normpath(p)
        return p == root or p.startswith(inside) or p in devices

    def hook(event, args):
        if event in net:
            raise PermissionError("network access is disabled in the sandbox (%s)" % event)
        if event == "socket.__new__" and args[1] != 1:  # only AF_UNIX socketpairs (asyncio's self-pipe)
            raise PermissionError("network access is disabled in the sandbox (%s)" % event)
        if event in spawn and not allow_spawn:
            raise PermissionError("starting processes is disabled in the sandbox (%s)" % event)
        if event in never:
            raise PermissionError("%s is disabled in the sandbox" % event)
        if event == "open":
            path, _mode, flags = args
            if flags & write_flags and not allowed_path(path, None):
                raise PermissionError("writing outside the sandbox directory is disabled: %r" % (path,))
        elif event in paths:
            for i, fd_pos in paths[event]:
                if not allowed_path(args[i], args[fd_pos] if fd_pos >= 0 else None):
                    raise PermissionError("%s outside the sandbox directory is disabled: %r"
                                          % (event, args[i]))
        elif event in ("os.kill", "os.killpg", "signal.pthread_kill"):
            target = args[0]
            if event == "os.kill" and target not in (own, 0, -own):
                raise PermissionError("signalling other processes is disabled in the sandbox")
            if event == "os.killpg" and target not in (own, 0):
                raise PermissionError("signalling other processes is disabled in the sandbox")
        elif event == "import" and args[0] == "_posixsubprocess" and not allow_spawn:
            raise PermissionError("re-importing _posixsubprocess is disabled in the sandbox")
        elif event in ("object.__setattr__", "object.__delattr__") and args[0] is hook:
            raise PermissionError("the sandbox's audit hook cannot be changed")

    if not allow_spawn:
        # fork_exec is the one spawning primitive that raises no audit event of its own
        import _posixsubprocess

        def fork_exec(*args, **kwargs):
            raise PermissionError("starting processes is disabled in the sandbox (_posixsubprocess)")

        _posixsubprocess.fork_exec = fork_exec
    sys.addaudithook(hook)
    sys.argv = ["main.py"]
    globals()["__file__"] = join(root, "main.py")
    with open("main.py", encoding="utf-8") as f:
        source = f.read()
    del globals()["_toporoute_sandbox_boot"]
    return compile(source, "main.py", "exec")


exec(_toporoute_sandbox_boot())
"""


@dataclass(frozen=True)
class SandboxResult:
    """What a sandboxed run did.

    Parameters
    ----------
    returncode : int or None
        The exit status; None when the process was killed by a signal (then see ``killed_by_signal``).
    stdout, stderr : str
        The output, decoded as UTF-8 (invalid bytes replaced); past ``MAX_OUTPUT_BYTES`` the middle is cut
        out.
    timed_out : bool
        Killed at the wall-clock timeout, or by the CPU-time limit (SIGXCPU).
    wall_s : float
        Wall-clock seconds from start to exit, interpreter start-up included.
    killed_by_signal : int or None
        The signal that ended the process, if one did (SIGKILL after a timeout, SIGXCPU, SIGSEGV, ...).
    network_isolation : str
        ``"netns+audit-hook"`` (a network namespace without interfaces, plus the audit hook) or
        ``"audit-hook"`` (the audit hook alone, where this machine does not allow namespaces).
    """

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    killed_by_signal: int | None
    network_isolation: str = "audit-hook"

    @property
    def ok(self) -> bool:
        """Exited with status 0 within the time limit."""
        return self.returncode == 0 and not self.timed_out


@functools.cache
def _netns_prefix() -> tuple[str, ...]:
    """The command prefix that runs a program without network, or () where namespaces are not allowed here.

    Probed once per process: containers often forbid unprivileged user namespaces.
    """
    unshare = shutil.which("unshare", path=_PATH)
    if unshare is None or not sys.platform.startswith("linux"):
        return ()
    # root can create the namespace directly; anyone else needs a user namespace to hold the privilege
    prefix = (unshare, "--net") if os.geteuid() == 0 else (unshare, "--net", "--map-root-user")
    probe = "import socket; print(len(socket.if_nameindex()))"
    try:
        done = subprocess.run(
            [*prefix, sys.executable, "-I", "-c", probe],
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": _PATH},
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return ()
    # a fresh namespace has the loopback interface only (and it is down)
    if done.returncode != 0 or done.stdout.strip() not in ("0", "1"):
        return ()
    return prefix


def network_isolation(netns: bool = True) -> str:
    """Which network isolation :func:`run_python` uses on this machine: ``"netns+audit-hook"`` or
    ``"audit-hook"``."""
    return "netns+audit-hook" if netns and _netns_prefix() else "audit-hook"


def check_limits(timeout_s: float, memory_mb: int) -> None:
    """Raises InvalidArgumentError unless ``timeout_s`` is a finite number > 0 and ``memory_mb`` an int >=
    :data:`MIN_MEMORY_MB` (the limits of :func:`run_python`)."""
    if (
        isinstance(timeout_s, bool)
        or not isinstance(timeout_s, (int, float))
        or not math.isfinite(timeout_s)
        or timeout_s <= 0
    ):
        raise InvalidArgumentError(f"timeout_s must be a finite number > 0; got {timeout_s!r}", "timeout_s")
    if isinstance(memory_mb, bool) or not isinstance(memory_mb, int) or memory_mb < MIN_MEMORY_MB:
        raise InvalidArgumentError(
            f"memory_mb must be an integer >= {MIN_MEMORY_MB}; got {memory_mb!r}", "memory_mb"
        )


def run_python(
    source: str,
    *,
    timeout_s: float = 10.0,
    memory_mb: int = 1024,
    stdin: str = "",
    netns: bool = True,
    allow_spawn: bool = False,
) -> SandboxResult:
    """Runs ``source`` as ``__main__`` (file name ``main.py``) in a sandboxed interpreter (see the module).

    Parameters
    ----------
    source : str
        The program.
    timeout_s : float
        Wall-clock limit in seconds; the process group is then killed with SIGKILL. The CPU-time limit is this
        rounded up, plus one second.
    memory_mb : int
        Address-space limit (RLIMIT_AS) in MiB, at least 64.
    stdin : str
        Fed to the program's standard input.
    netns : bool
        Also run in an empty network namespace when this machine allows it (the audit hook applies either
        way).
    allow_spawn : bool
        Let the program start processes (off by default, so it cannot escape the limits). Children stay in the
        program's process group and are killed with it.

    Returns
    -------
    SandboxResult
        Exit status, output, timing, and which network isolation applied.

    Raises
    ------
    InvalidArgumentError
        For a bad argument.
    ToporouteError
        When the interpreter cannot be started.
    """
    if not isinstance(source, str):
        raise InvalidArgumentError(f"source must be a string; got {type(source).__name__}", "source")
    check_limits(timeout_s, memory_mb)
    if not isinstance(stdin, str):
        raise InvalidArgumentError(f"stdin must be a string; got {type(stdin).__name__}", "stdin")

    prefix = _netns_prefix() if netns else ()
    isolation = "netns+audit-hook" if prefix else "audit-hook"
    limits = [str(memory_mb * 1024 * 1024), str(math.ceil(timeout_s) + 1), str(FSIZE_LIMIT_BYTES)]
    cmd = [
        *prefix,
        sys.executable,
        "-I",
        "-B",
        "-X",
        "utf8",
        "-c",
        _BOOT,
        *limits,
        "1" if allow_spawn else "0",
    ]

    workdir = tempfile.mkdtemp(prefix="toporoute-sandbox-")
    try:
        home = os.path.join(workdir, "home")
        tmp = os.path.join(workdir, "tmp")
        os.mkdir(home)
        os.mkdir(tmp)
        with open(os.path.join(workdir, "main.py"), "w", encoding="utf-8") as f:
            f.write(source)
        env = {"PATH": _PATH, "LANG": "C.UTF-8", "LC_ALL": "C.UTF-8", "HOME": home, "TMPDIR": tmp}
        with tempfile.TemporaryFile() as stdin_file:
            stdin_file.write(stdin.encode("utf-8"))
            stdin_file.seek(0)
            return _run(cmd, workdir, env, stdin_file, timeout_s, isolation)
    finally:
        _remove_tree(workdir)


def _run(
    cmd: list[str], cwd: str, env: dict[str, str], stdin_file: IO[bytes], timeout_s: float, isolation: str
) -> SandboxResult:
    start = time.monotonic()
    try:
        proc = subprocess.Popen(
            cmd,
            cwd=cwd,
            env=env,
            stdin=stdin_file,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,  # its own process group: one killpg reaches every child it starts
            close_fds=True,
        )
    except OSError as exc:
        raise ToporouteError(f"cannot start the sandboxed interpreter {sys.executable}: {exc}") from exc
    stdout, stderr = proc.stdout, proc.stderr
    assert stdout is not None and stderr is not None  # both are pipes

    out = _Capped()
    err = _Capped()
    timed_out = False
    deadline = start + timeout_s
    exited_at: float | None = None
    try:
        with selectors.DefaultSelector() as sel:
            sel.register(stdout, selectors.EVENT_READ, out)
            sel.register(stderr, selectors.EVENT_READ, err)
            # Read as it comes, so a chatty program never blocks on a full pipe nor fills our memory. The
            # pipes close when every process holding them has gone; a child left running keeps them open, so
            # once the program itself has exited its output gets a short grace period, then the group goes.
            while sel.get_map():
                now = time.monotonic()
                if exited_at is None and proc.poll() is not None:
                    exited_at = now
                if exited_at is not None and now - exited_at > _EXIT_GRACE_S:
                    break
                if now >= deadline:
                    timed_out = exited_at is None
                    break
                for key, _ in sel.select(min(deadline - now, _POLL_S)):
                    data = os.read(key.fd, 65536)
                    if data:
                        key.data.add(data)
                    else:
                        sel.unregister(key.fileobj)
        if not timed_out:
            try:
                proc.wait(max(deadline - time.monotonic(), 0.0))
            except subprocess.TimeoutExpired:
                timed_out = True
    finally:
        # Always, even after a clean exit: a child it started may still run in the group.
        _kill_group(proc.pid)
        proc.wait()
        wall = time.monotonic() - start
        stdout.close()
        stderr.close()

    code = proc.returncode
    signum = -code if code < 0 else None
    if signum == signal.SIGXCPU:
        timed_out = True
    return SandboxResult(
        returncode=None if signum is not None else code,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        wall_s=wall,
        killed_by_signal=signum,
        network_isolation=isolation,
    )


def _remove_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    if os.path.exists(path):
        # the program may have taken away permissions inside its directory (harmless to root, not to others)
        for dirpath, _, _ in os.walk(path):
            with contextlib.suppress(OSError):
                os.chmod(dirpath, 0o700)
        shutil.rmtree(path, ignore_errors=True)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # the group is already gone
        os.killpg(pgid, signal.SIGKILL)


class _Capped:
    """Keeps the first and the last MAX_OUTPUT_BYTES / 2 of a stream (a traceback comes at the end) and counts
    what lies between."""

    def __init__(self) -> None:
        self._head = bytearray()
        self._tail = bytearray()
        self._dropped = 0

    def add(self, data: bytes) -> None:
        half = MAX_OUTPUT_BYTES // 2
        room = half - len(self._head)
        if room > 0:
            self._head += data[:room]
            data = data[room:]
        self._tail += data
        if len(self._tail) > half:
            self._dropped += len(self._tail) - half
            del self._tail[: len(self._tail) - half]

    def text(self) -> str:
        if not self._dropped:
            return bytes(self._head + self._tail).decode("utf-8", errors="replace")
        head = bytes(self._head).decode("utf-8", errors="replace")
        tail = bytes(self._tail).decode("utf-8", errors="replace")
        return f"{head}\n[... {self._dropped} bytes not kept ...]\n{tail}"
