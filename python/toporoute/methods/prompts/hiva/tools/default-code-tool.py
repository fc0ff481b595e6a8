"""HiVA's built-in tool for code tasks (shipped with toporoute, run only in the sandbox).

Finds the last python block (or, without a fence, the whole input when it parses) in its input, loads it, and
runs the visible examples of the problem on it (``examples``: pairs of a call expression and its expected repr,
from the prompt the agents see). Returns a short report: which examples pass, the first failure, or why the code
did not load. Trusted: it executes the code it is given, which the deny-list would refuse in an LLM-written tool.
"""

import ast
import re
from typing import Any


def tool_function(
    input_data: str, examples: list[list[str]] | tuple[()] = (), entry_point: str = "", **kwargs: Any
) -> str:
    blocks = re.findall(r"```(?:python|py)?[ \t]*\n(.*?)```", input_data, re.DOTALL)
    code = blocks[-1] if blocks else input_data
    try:
        ast.parse(code)
    except SyntaxError as exc:
        if not blocks:
            return "no python code found in the input"
        return f"the code does not parse: {exc.msg} (line {exc.lineno})"
    namespace: dict[str, Any] = {"__name__": "solution"}
    try:
        exec(compile(code, "<solution>", "exec"), namespace)
    except BaseException as exc:
        return f"the code fails while loading: {type(exc).__name__}: {exc}"
    if entry_point and entry_point not in namespace:
        return f"the code does not define {entry_point}"
    if not examples:
        return "the code loads; the problem shows no examples to check it against"
    lines = []
    passed = 0
    for call, want in examples:
        try:
            got = eval(call, namespace)
        except BaseException as exc:
            lines.append(f"{call} raised {type(exc).__name__}: {exc}")
            continue
        ok = repr(got) == want.strip()
        if not ok:
            try:
                ok = got == ast.literal_eval(want.strip())
            except Exception:
                ok = False
        passed += bool(ok)
        if not ok:
            lines.append(f"{call} returned {got!r}, expected {want.strip()}")
    head = f"{passed}/{len(examples)} visible examples pass"
    return head + ("" if not lines else ":\n" + "\n".join(lines[:5]))
