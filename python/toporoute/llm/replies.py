"""Reading structured replies: reasoning stripped, the JSON value extracted and checked against the request's
JSON Schema.

This is the one path every engine (``vllm``, ``openai``, ``replay``, ``scripted``) fills
:attr:`~toporoute.llm.types.Result.parsed` through, and the one :class:`~toporoute.llm.Structured` validates
with before it re-prompts, so ``parsed`` means the same whichever engine answered: the reply's JSON value,
valid under the request's schema, or None.
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from ..errors import InvalidArgumentError

if TYPE_CHECKING:
    import jsonschema

    from .types import Request

__all__ = ["ReplyChecker", "extract_json", "strip_reasoning"]

_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"
_THINK_BLOCK = re.compile(r"<think>.*?</think>", re.DOTALL)
_FENCE = re.compile(r"```[ \t]*(?:json)?[ \t]*\n?(.*?)```", re.DOTALL | re.IGNORECASE)


def strip_reasoning(text: str) -> str:
    """``text`` without reasoning: ``<think>...</think>`` blocks, everything up to a ``</think>`` that has no
    opening tag (chat templates that open the block in the prompt), and an unterminated leading ``<think>``
    block (the reply ran out of tokens while reasoning: nothing is left)."""
    close, open_ = text.find(_THINK_CLOSE), text.find(_THINK_OPEN)
    if close >= 0 and (open_ < 0 or close < open_):
        text = text[close + len(_THINK_CLOSE) :]
    text = _THINK_BLOCK.sub("", text).strip()
    return "" if text.startswith(_THINK_OPEN) else text


def extract_json(text: str, *, arrays: bool = False) -> Any:
    """The JSON value in a reply: the whole text, else the first ```json fenced block that parses, else the
    first balanced ``{...}`` (or ``[...]`` too when ``arrays``) that parses. Raises ValueError when none does.

    Reasoning is not stripped here: see :func:`strip_reasoning`.
    """
    text = text.strip()
    if not text:
        raise ValueError("the reply is empty")
    try:
        return json.loads(text)
    except ValueError:
        pass
    for m in _FENCE.finditer(text):
        try:
            return json.loads(m.group(1))
        except ValueError:
            continue
    decoder = json.JSONDecoder()
    openers = "{[" if arrays else "{"
    for i, ch in enumerate(text):
        if ch in openers:
            try:
                return decoder.raw_decode(text, i)[0]
            except ValueError:
                continue
    raise ValueError("no JSON object found in the reply")


def _path(error: jsonschema.ValidationError) -> str:
    return "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)


class ReplyChecker:
    """Checks replies against JSON Schemas, compiling each schema once (per checker: no shared state).

    ``jsonschema`` is imported on the first schema, so engines that never see one do not need it.
    """

    def __init__(self) -> None:
        self._validators: dict[str, jsonschema.protocols.Validator] = {}

    def validator(self, schema: dict[str, Any]) -> jsonschema.protocols.Validator:
        """The compiled validator of ``schema``; an invalid schema raises
        :class:`~toporoute.errors.InvalidArgumentError`."""
        key = json.dumps(schema, sort_keys=True, default=list)
        v = self._validators.get(key)
        if v is None:
            import jsonschema
            from jsonschema.exceptions import SchemaError

            cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
            try:
                cls.check_schema(schema)
            except SchemaError as exc:
                raise InvalidArgumentError(
                    f"request schema must be a valid JSON Schema; got one where {exc.message}", "schema"
                ) from exc
            v = self._validators[key] = cls(schema)
        return v

    def check(self, text: str, schema: dict[str, Any]) -> tuple[Any, str | None]:
        """``(value, None)`` when ``text`` holds a JSON value valid under ``schema``, else ``(None, why)``."""
        from jsonschema.exceptions import best_match

        body = strip_reasoning(text)
        if not body:
            return None, "the reply is empty" + (" after the reasoning" if text.strip() else "")
        try:
            value = extract_json(body, arrays=schema.get("type") == "array")
        except ValueError as exc:
            return None, str(exc)
        error = best_match(self.validator(schema).iter_errors(value))
        if error is None:
            return value, None
        message = error.message if len(error.message) <= 300 else error.message[:300] + "..."
        return None, f"at {_path(error)}: {message}"

    def parsed(self, request: Request, text: str) -> Any:
        """What :attr:`Result.parsed` holds for ``text`` answering ``request``: the valid JSON value when the
        request has a schema, else None."""
        if request.schema is None:
            return None
        return self.check(text, request.schema)[0]
