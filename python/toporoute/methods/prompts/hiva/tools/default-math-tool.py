"""HiVA's built-in tool for math tasks (shipped with toporoute, run only in the sandbox).

Finds arithmetic expressions in its input (numbers with + - * / // % ** and parentheses) and computes them by
walking their syntax tree: no names, no calls, small exponents only. Returns one line per expression.
"""

import ast
import operator
import re
from collections.abc import Callable
from typing import Any

_OPS: dict[type, Callable[[Any, Any], Any]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY: dict[type, Callable[[Any], Any]] = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _calc(node: ast.AST) -> Any:
    if isinstance(node, ast.Module) and len(node.body) == 1 and isinstance(node.body[0], ast.Expr):
        return _calc(node.body[0].value)
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)):
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_calc(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
        left, right = _calc(node.left), _calc(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > 64:
            raise ValueError("exponent too large")
        return _OPS[type(node.op)](left, right)
    raise ValueError("not arithmetic")


def tool_function(input_data: str, **kwargs: Any) -> str:
    text = input_data.replace("^", "**").replace("\u00d7", "*").replace("\u00f7", "/")
    found = re.findall(r"[-+(]*\d[\d.\s+\-*/%()]*\d\)*|\d+\s*\*\*\s*\d+", text)
    lines = []
    for expr in found:
        expr = expr.strip()
        if not re.search(r"[+\-*/%]", expr.lstrip("-+")):
            continue
        try:
            value = _calc(ast.parse(expr))
        except Exception:
            continue
        lines.append(f"{expr} = {value}")
        if len(lines) >= 10:
            break
    return "\n".join(lines) if lines else "no arithmetic expression found in the input"
