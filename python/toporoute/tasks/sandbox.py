"""Running untrusted Python (LLM-written code) in a throw-away subprocess.

Layers, from the kernel up:

* a fresh interpreter (``python -I -B -X utf8``: isolated mode ignores ``PYTHON*`` variables and the
  user site) in its own session, so on timeout the whole process group is killed with SIGKILL;
* a fresh temporary directory as cwd, HOME and TMPDIR, removed afterwards, and a minimal environment (no
  inherited variables beyond PATH and the locale, so no secrets);
* a mount namespace (Debian's ``bubblewrap``, where it is installed and this machine allows namespaces) in
  which the program sees its own directory (read-write) and, read-only, only what Python needs: ``/usr``, the
  loader's cache, the interpreter's prefixes and its ``sys.path``; a fresh ``/proc`` of its own pid namespace,
  a minimal ``/dev``, no capabilities, no network (an empty network namespace), so no file outside its
  directory can be read, listed or written, by any call;
* without bubblewrap, a network namespace with no interfaces (``unshare --net``) where this machine allows one;
* resource limits set before the code runs: address space, CPU time, file size, no core dumps;
* an audit hook (``sys.addaudithook``; hooks cannot be removed) that refuses sockets, DNS, process spawning,
  signals to other processes, raising the limits, ctypes symbol lookup, symlinks and hard links, and any
  file read, listing or write outside the directory (reads are also allowed in the interpreter's own
  directories and the time-zone database). Paths are resolved (symlinks followed) before they are checked;
  since an open does not show its ``dir_fd``, relative paths with ``..``, changing to a directory outside and
  opening one are refused, so a relative path cannot leave whatever its base. Without a mount namespace the
  modules that open files without an audit event (``sqlite3``, ``readline``, ``dbm``'s) are refused too.

Where no mount namespace can be made, the audit hook is what keeps reads in; it stops ordinary Python code,
not a determined attacker. ``SandboxResult.file_isolation`` and :func:`file_isolation` say which protection
applied (``files=`` of :func:`run_python` picks one). Run the whole thing inside a container or VM where the
code may be hostile.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
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

from .._checks import int_at_least
from ..errors import InvalidArgumentError, ToporouteError

__all__ = [
    "FILE_MODES",
    "MAX_OUTPUT_BYTES",
    "SandboxResult",
    "file_isolation",
    "mount_namespace_available",
    "mount_namespace_unavailable_reason",
    "network_isolation",
    "run_python",
]

FILE_MODES = ("auto", "mount-ns", "audit-hook")
"""How :func:`run_python` keeps file access inside the program's directory (its ``files`` argument)."""

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
    # "mount-ns+audit-hook", "mount-ns" (no path checks here) or "audit-hook" (no namespace: these checks are
    # all there is, so modules that open files without an audit event are refused too)
    isolation = sys.argv[5]
    check_paths, hook_only = isolation != "mount-ns", isolation == "audit-hook"
    unaudited = frozenset(("_sqlite3", "readline", "_dbm", "_gdbm"))
    resource.setrlimit(resource.RLIMIT_AS, (mem, mem))
    resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu + 1))
    resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))

    realpath = os.path.realpath
    root = realpath(os.getcwd())
    inside = root + os.sep
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
    devices = frozenset(("/dev/null", "/dev/stdout", "/dev/stderr", "/dev/tty"))
    read_devices = devices | {"/dev/zero", "/dev/urandom", "/dev/random", "/dev/full"}
    # reads may also reach what the interpreter imports from, and the time-zone database (zoneinfo)
    readable = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path,
                "/usr/share/zoneinfo", "/usr/lib/zoneinfo", "/usr/share/lib/zoneinfo", "/etc/zoneinfo"}
    readable = tuple(sorted({realpath(d).rstrip(os.sep) + os.sep for d in readable if d and os.path.isabs(d)}
                            - {os.sep}))
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
    listings = frozenset(("os.listdir", "os.scandir", "os.listxattr", "os.getxattr", "sqlite3.connect"))
    never = frozenset((
        "os.link", "os.symlink", "resource.setrlimit", "resource.prlimit", "ctypes.dlsym",
        "ctypes.dlsym/handle", "gc.get_referrers", "gc.get_referents", "gc.get_objects", "sys.settrace",
        "sys.setprofile", "os.chroot",
    ))
    own = os.getpid()
    fspath, isabs, join, isdir = os.fspath, os.path.isabs, os.path.join, os.path.isdir
    readlink, getcwd, fsdecode = os.readlink, os.getcwd, os.fsdecode

    def resolve(p, dir_fd):
        # the absolute path, symlinks followed; None for an already open descriptor (its open was checked).
        # A relative path is resolved from the cwd, which stays inside the directory (os.chdir is checked),
        # or from a dir_fd the open event does not show, which is a directory inside it too (directories
        # outside cannot be opened): without "..", it cannot leave, whatever the base was.
        if isinstance(p, int):
            return None
        p = fsdecode(fspath(p))
        if p in devices:
            return p
        if not isabs(p) and ".." in p.split(os.sep):
            raise PermissionError("a relative path with '..' may lead outside the sandbox directory: "
                                  "disabled: %r" % (p,))
        if not isabs(p):
            # no dir_fd shows as None or a negative number (AT_FDCWD) depending on the call
            base = getcwd() if dir_fd is None or dir_fd < 0 else readlink("/proc/self/fd/%d" % dir_fd)
            p = join(base, p)
        return realpath(p)  # symlinks first, then "..", as the kernel resolves them

    def fd_path(fd):
        return readlink("/proc/self/fd/%d" % fd)

    def allowed_path(p, dir_fd):
        p = resolve(p, dir_fd)
        return p is None or p == root or p.startswith(inside) or p in devices

    def allowed_read(p, dir_fd=None):
        p = resolve(p, dir_fd)
        return (p is None or p == root or p.startswith(inside) or p in read_devices
                or (p + os.sep).startswith(readable))

    def check_path(event, args):
        if event == "open":
            path, _mode, flags = args
            if path is None:
                return
            if flags & write_flags:
                if not allowed_path(path, None):
                    raise PermissionError("writing outside the sandbox directory is disabled: %r" % (path,))
            elif not allowed_read(path):
                raise PermissionError("reading outside the sandbox directory is disabled: %r" % (path,))
            elif not allowed_path(path, None) and isdir(path):
                # a descriptor of an outside directory would be a base (dir_fd) the open event does not show
                raise PermissionError("opening a directory outside the sandbox directory is disabled: %r"
                                      % (path,))
        elif event == "os.chdir":
            if not allowed_path(args[0] if not isinstance(args[0], int) else fd_path(args[0]), None):
                raise PermissionError("changing to a directory outside the sandbox directory is disabled: %r"
                                      % (args[0],))
        elif event in listings:
            path = args[0] if args else None
            if not allowed_read("." if path is None else path):
                raise PermissionError("reading outside the sandbox directory is disabled: %r" % (path,))
        elif event == "ctypes.dlopen" and args[0] and "/" in fsdecode(args[0]):
            if not allowed_read(args[0]):
                raise PermissionError("loading a library outside the sandbox is disabled: %r" % (args[0],))
        elif event in paths:
            for i, fd_pos in paths[event]:
                if not allowed_path(args[i], args[fd_pos] if fd_pos >= 0 else None):
                    raise PermissionError("%s outside the sandbox directory is disabled: %r"
                                          % (event, args[i]))

    def hook(event, args):
        if event in net:
            raise PermissionError("network access is disabled in the sandbox (%s)" % event)
        if event == "socket.__new__" and args[1] != 1:  # only AF_UNIX socketpairs (asyncio's self-pipe)
            raise PermissionError("network access is disabled in the sandbox (%s)" % event)
        if event in spawn and not allow_spawn:
            raise PermissionError("starting processes is disabled in the sandbox (%s)" % event)
        if event in never and (check_paths or event not in ("os.link", "os.symlink")):
            raise PermissionError("%s is disabled in the sandbox" % event)
        if check_paths:
            check_path(event, args)
        if event in ("os.kill", "os.killpg", "signal.pthread_kill"):
            target = args[0]
            if event == "os.kill" and target not in (own, 0, -own):
                raise PermissionError("signalling other processes is disabled in the sandbox")
            if event == "os.killpg" and target not in (own, 0):
                raise PermissionError("signalling other processes is disabled in the sandbox")
        elif event == "import" and args[0] == "_posixsubprocess" and not allow_spawn:
            raise PermissionError("re-importing _posixsubprocess is disabled in the sandbox")
        elif event == "import" and hook_only and args[0] in unaudited:
            raise PermissionError("%s opens files unchecked: disabled in the sandbox without a mount namespace"
                                  % args[0])
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
    file_isolation : str
        What kept file access inside the program's directory: ``"mount-ns+audit-hook"`` (a mount namespace
        that holds nothing else but read-only system and interpreter files, plus the audit hook's path
        checks), ``"mount-ns"`` (the namespace alone) or ``"audit-hook"`` (the hook alone).
    """

    returncode: int | None
    stdout: str
    stderr: str
    timed_out: bool
    wall_s: float
    killed_by_signal: int | None
    network_isolation: str = "audit-hook"
    file_isolation: str = "audit-hook"

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


# Directories of the system that the mount namespace shows read-only (a symlink stays a symlink), and the
# loader's files; everything else of the machine is absent there.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime")


@functools.cache
def _interpreter_dirs() -> tuple[str, ...]:
    """The directories the sandboxed interpreter starts and imports from: its prefixes and its ``sys.path``
    in isolated mode (site-packages and what their ``.pth`` files add), as it reports them."""
    probe = "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, *sys.path]))"
    dirs = {sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix}
    try:
        done = subprocess.run(
            [sys.executable, "-I", "-c", probe],
            capture_output=True,
            text=True,
            timeout=30,
            env={"PATH": _PATH},
            check=False,
        )
        dirs.update(json.loads(done.stdout))
    except (OSError, subprocess.SubprocessError, ValueError):
        pass  # the prefixes alone
    return tuple(sorted(d for d in dirs if d and os.path.isabs(d) and os.path.isdir(d)))


def _bwrap_args(workdir: str, netns: bool) -> list[str]:
    """bubblewrap's arguments for one run: the program's directory read-write, the system and interpreter
    read-only, its own /proc and /dev, every namespace unshared (the network one only when ``netns``), no
    capabilities, and killed with the parent."""
    args = ["--unshare-all", "--cap-drop", "ALL", "--die-with-parent"]
    if not netns:
        args.append("--share-net")
    binds = ["--proc", "/proc", "--dev", "/dev", "--bind", workdir, workdir, "--chdir", workdir]
    return [*args, *_read_only_binds(), *binds]


@functools.cache
def _read_only_binds() -> tuple[str, ...]:
    """The read-only part of :func:`_bwrap_args`, the same for every run: worked out once per process."""
    args: list[str] = []
    bound: list[str] = []

    def covered(path: str) -> bool:
        return any(path == b or path.startswith(b.rstrip("/") + "/") for b in bound)

    for d in _SYSTEM_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
            bound.append(d)
    for f in _SYSTEM_FILES:
        if os.path.exists(f) and not covered(f):
            args += ["--ro-bind", f, f]
    for d in _interpreter_dirs():
        for path in dict.fromkeys((d, os.path.realpath(d))):
            if not covered(path):
                args += ["--ro-bind", os.path.realpath(d), path]
                bound.append(path)
    exe = os.path.realpath(sys.executable)
    if not covered(exe):
        args += ["--ro-bind", exe, exe]
    return tuple(args)


@functools.cache
def _mount_namespace() -> tuple[tuple[str, ...], str]:
    """(bubblewrap's command, "") where a mount namespace can be made here, else ((), the reason).

    Probed once per process by running the interpreter in one: containers often forbid namespaces.
    """
    if not sys.platform.startswith("linux"):
        return (), f"mount namespaces are Linux-only (this is {sys.platform})"
    bwrap = shutil.which("bwrap", path=_PATH)
    if bwrap is None:
        return (), "bubblewrap (bwrap) is not installed (Debian: apt-get install bubblewrap)"
    workdir = tempfile.mkdtemp(prefix="toporoute-sandbox-probe-")
    try:
        cmd = [bwrap, *_bwrap_args(workdir, True), sys.executable, "-I", "-c", "import json, os; print('ok')"]
        done = subprocess.run(
            cmd, capture_output=True, text=True, timeout=30, env={"PATH": _PATH}, check=False
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return (), f"bubblewrap cannot run here: {exc}"
    finally:
        _remove_tree(workdir)
    if done.returncode != 0 or done.stdout.strip() != "ok":
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        return (), f"bubblewrap cannot make the namespaces here: {why}"
    return (bwrap,), ""


def mount_namespace_available() -> bool:
    """Whether :func:`run_python` can run programs in a mount namespace on this machine (bubblewrap)."""
    return bool(_mount_namespace()[0])


def mount_namespace_unavailable_reason() -> str:
    """Why no mount namespace can be made here ("" when one can)."""
    return _mount_namespace()[1]


def file_isolation(files: str = "auto") -> str:
    """The ``file_isolation`` :func:`run_python` gives with ``files`` on this machine:
    ``"mount-ns+audit-hook"``, ``"mount-ns"`` or ``"audit-hook"``."""
    _check_files(files)
    if files == "audit-hook":
        return "audit-hook"
    if files == "mount-ns":
        if not mount_namespace_available():
            raise ToporouteError(f"files='mount-ns': {mount_namespace_unavailable_reason()}")
        return "mount-ns"
    return "mount-ns+audit-hook" if mount_namespace_available() else "audit-hook"


def _check_files(files: str) -> None:
    if files not in FILE_MODES:
        raise InvalidArgumentError(f"files must be one of {FILE_MODES}; got {files!r}", "files")


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
    int_at_least("memory_mb", memory_mb, MIN_MEMORY_MB)


def run_python(
    source: str,
    *,
    timeout_s: float = 10.0,
    memory_mb: int = 1024,
    stdin: str = "",
    netns: bool = True,
    allow_spawn: bool = False,
    files: str = "auto",
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
    files : {"auto", "mount-ns", "audit-hook"}
        How file access is kept inside the program's directory. ``auto``: the mount namespace where this
        machine can make one, and the audit hook's path checks either way. ``mount-ns``: the namespace alone
        (an error where there is none; the hook still refuses network, processes, signals and ctypes, but
        not paths). ``audit-hook``: the hook alone.

    Returns
    -------
    SandboxResult
        Exit status, output, timing, and which network and file isolation applied. In a mount namespace
        the program runs under bubblewrap, which reports a death by signal n as the exit status 128 + n: such
        a status reads as that signal (a program exiting with it itself is reported as killed).

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

    fs = file_isolation(files)
    limits = [str(memory_mb * 1024 * 1024), str(math.ceil(timeout_s) + 1), str(FSIZE_LIMIT_BYTES)]
    flags = ["1" if allow_spawn else "0", fs]
    interpreter = [sys.executable, "-I", "-B", "-X", "utf8", "-c", _BOOT, *limits, *flags]

    workdir = os.path.realpath(tempfile.mkdtemp(prefix="toporoute-sandbox-"))
    try:
        if fs.startswith("mount-ns"):
            cmd = [*_mount_namespace()[0], *_bwrap_args(workdir, netns), *interpreter]
            net = "netns+audit-hook" if netns else "audit-hook"
        else:
            prefix = _netns_prefix() if netns else ()
            cmd = [*prefix, *interpreter]
            net = "netns+audit-hook" if prefix else "audit-hook"
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
            result = _run(cmd, workdir, env, stdin_file, timeout_s, bwrap=fs.startswith("mount-ns"))
        return dataclasses.replace(result, network_isolation=net, file_isolation=fs)
    finally:
        _remove_tree(workdir)


def _run(
    cmd: list[str], cwd: str, env: dict[str, str], stdin_file: IO[bytes], timeout_s: float, *, bwrap: bool
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
    if bwrap and signum is None and 128 < code < 128 + signal.NSIG:
        signum = code - 128  # bubblewrap's report of its child's death by a signal
    if signum == signal.SIGXCPU:
        timed_out = True
    return SandboxResult(
        returncode=None if signum is not None else code,
        stdout=out.text(),
        stderr=err.text(),
        timed_out=timed_out,
        wall_s=wall,
        killed_by_signal=signum,
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
