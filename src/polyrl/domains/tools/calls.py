"""Read function calls out of a completion.

Accepted forms (first that yields at least one call wins):

1. JSON: one call ``{"name": "add", "arguments": {"a": 3}}`` (``"parameters"`` or
   ``"args"`` also accepted for ``"arguments"``; ``arguments`` may be a JSON string),
   a list of calls, an OpenAI message ``{"tool_calls": [{"type": "function",
   "function": {"name": ..., "arguments": "<json>"}}]}``, or such a list of
   ``tool_calls`` items. Found as the whole text, inside ```` ```json ```` fences,
   or inside ``<tool_call>...</tool_call>`` tags (all tags, then all fences, in order:
   one call per tag is a list of calls). Each of these may also hold several JSON
   values one after the other (one call per line, JSON-lines style), all call-shaped.
2. Python call syntax, as BFCL writes its answers: ``add(a=3, b=4)``,
   ``[f(x=1), g(y="s")]``, or one call per line (``f(x=1)\ng(y="s")``), as the whole
   text or a whole fence: every statement must be such a call. Dotted names
   (``math.factorial(number=5)``) allowed; argument values must be Python literals
   (``ast.literal_eval``).
3. The first JSON value in free text that has ``arguments``/``parameters``/``tool_calls``,
   with the call-shaped JSON values that directly follow it (only whitespace between),
   so ``Calls:\n{...}\n{...}`` reads both; prose between two values ends the run.

A tool spec is never a call: an object whose ``parameters`` is a JSON schema
(``{"type": "object" | "dict", "properties": {...}}``) and that has no ``arguments``
is skipped, so echoing the tool list of the prompt parses to no call.
"""

from __future__ import annotations

import ast
import json
import re
from dataclasses import dataclass, field
from typing import Any

from polyrl.domains.extract import extract_code_blocks


@dataclass(frozen=True)
class ToolCall:
    """One parsed function call: ``name`` and keyword ``arguments`` (JSON-like values)."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """``{"name": ..., "arguments": {...}}``."""
        return {"name": self.name, "arguments": self.arguments}


_TAG_RE = re.compile(r"<tool_call>(.*?)(?:</tool_call>|\Z)", re.S)
_DECODER = json.JSONDecoder()


def _is_spec(obj: dict[str, Any]) -> bool:
    """True for a tool spec (``parameters`` holds a JSON schema, no ``arguments``)."""
    params = obj.get("parameters")
    return ("arguments" not in obj and "args" not in obj and isinstance(params, dict)
            and params.get("type") in ("object", "dict")
            and isinstance(params.get("properties"), dict))


def _call_from_obj(obj: Any) -> list[ToolCall] | None:
    """Calls from one decoded JSON value, or None when it is not call-shaped."""
    if isinstance(obj, list):
        calls: list[ToolCall] = []
        for item in obj:
            sub = _call_from_obj(item)
            if sub is None:
                return None
            calls.extend(sub)
        return calls
    if not isinstance(obj, dict):
        return None
    if "tool_calls" in obj and isinstance(obj["tool_calls"], list):
        return _call_from_obj(obj["tool_calls"])
    if "function" in obj and isinstance(obj["function"], dict):  # OpenAI tool_call item
        return _call_from_obj(obj["function"])
    name = obj.get("name")
    if not isinstance(name, str) or not name or _is_spec(obj):
        return None
    args: Any = {}
    for key in ("arguments", "parameters", "args"):
        if key in obj:
            args = obj[key]
            break
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError:
            return None
    if not isinstance(args, dict):
        return None
    return [ToolCall(name, args)]


def _json_values(text: str) -> list[Any] | None:
    """The JSON values ``text`` consists of (one, or several separated by whitespace:
    JSON lines), or None when anything else is in it."""
    try:
        return [json.loads(text)]
    except json.JSONDecodeError:
        pass
    values, pos = [], 0
    while True:
        while pos < len(text) and text[pos].isspace():
            pos += 1
        if pos == len(text):
            return values or None
        try:
            value, pos = _DECODER.raw_decode(text, pos)
        except json.JSONDecodeError:
            return None
        values.append(value)


def _calls_from_values(values: list[Any]) -> list[ToolCall] | None:
    """Calls of every value, or None unless each value is call-shaped."""
    calls: list[ToolCall] = []
    for value in values:
        sub = _call_from_obj(value)
        if not sub:
            return None
        calls.extend(sub)
    return calls


def _json_candidates(text: str) -> list[list[str]]:
    """Groups of JSON texts: the whole text, the ``<tool_call>`` tags, the fences."""
    groups = [[text.strip()], [m.group(1).strip() for m in _TAG_RE.finditer(text)],
              [b.code for b in extract_code_blocks(text)]]
    return [[c for c in g if c] for g in groups]


def _parse_json_calls(text: str) -> list[ToolCall] | None:
    """Calls of the first group that has any; every tag (fence) of a group counts, so
    parallel calls written one ``<tool_call>`` each (Hermes/Qwen) are all read."""
    for group in _json_candidates(text):
        calls: list[ToolCall] = []
        for cand in group:
            values = _json_values(cand)
            if values is None:
                continue
            if len(values) == 1:
                calls.extend(_call_from_obj(values[0]) or [])
            else:  # JSON lines: every value a call, or the candidate holds none
                calls.extend(_calls_from_values(values) or [])
        if calls:
            return calls
    return None


def _names_arguments(obj: Any) -> bool:
    blob = json.dumps(obj)
    return any(k in blob for k in ('"arguments"', '"parameters"', '"tool_calls"'))


def _parse_embedded_json(text: str) -> list[ToolCall] | None:
    """The first call-shaped JSON value in free text that names its arguments, and the
    call-shaped values right after it (whitespace only between: one call per line)."""
    for m in re.finditer(r"[\[{]", text):
        try:
            obj, end = _DECODER.raw_decode(text, m.start())
        except json.JSONDecodeError:
            continue
        if not _names_arguments(obj):
            continue
        calls = _call_from_obj(obj)
        if not calls:
            continue
        while True:
            nxt = end
            while nxt < len(text) and text[nxt].isspace():
                nxt += 1
            try:
                obj, end = _DECODER.raw_decode(text, nxt)
            except json.JSONDecodeError:
                return calls
            more = _call_from_obj(obj)
            if not more:
                return calls
            calls.extend(more)
    return None


def _dotted(node: ast.AST) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base else None
    return None


def _python_call(node: ast.AST) -> ToolCall | None:
    if not isinstance(node, ast.Call) or node.args:
        return None
    name = _dotted(node.func)
    if name is None:
        return None
    args: dict[str, Any] = {}
    for kw in node.keywords:
        if kw.arg is None:
            return None
        try:
            args[kw.arg] = ast.literal_eval(kw.value)
        except (ValueError, SyntaxError, TypeError):
            return None
    return ToolCall(name, _jsonable(args))


def _jsonable(value: Any) -> Any:
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    return value


def _python_nodes(src: str) -> list[ast.AST] | None:
    """The call expressions of ``src``: one expression (a call, or a list/tuple of
    calls) or several statements, one expression each (calls one per line)."""
    try:
        body = ast.parse(src, mode="eval").body
        return list(body.elts) if isinstance(body, ast.List | ast.Tuple) else [body]
    except (SyntaxError, ValueError):
        pass
    try:
        module = ast.parse(src, mode="exec")
    except (SyntaxError, ValueError):
        return None
    if len(module.body) < 2 or not all(isinstance(s, ast.Expr) for s in module.body):
        return None
    return [s.value for s in module.body if isinstance(s, ast.Expr)]


def _parse_python_calls(text: str) -> list[ToolCall] | None:
    sources = [b.code for b in extract_code_blocks(text)] + [text.strip()]
    for src in sources:
        nodes = _python_nodes(src.strip())
        if not nodes:
            continue
        calls = [_python_call(n) for n in nodes]
        if calls and all(c is not None for c in calls):
            return [c for c in calls if c is not None]
    return None


def parse_calls(text: str) -> list[ToolCall] | None:
    """All function calls in ``text`` (see module docstring), or None when none parse.

    Args:
        text: a completion.

    Returns:
        The calls in the order written, or None (nothing call-shaped found).
    """
    if not text or not text.strip():
        return None
    return _parse_json_calls(text) or _parse_python_calls(text) or _parse_embedded_json(text)


def format_call(call: ToolCall, style: str = "python") -> str:
    """Render ``call`` compactly: ``"python"`` -> ``add(a=3,b=4)``, ``"json"`` -> JSON."""
    if style == "json":
        return json.dumps(call.to_json(), separators=(",", ":"))
    parts = [f"{k}={_py_literal(v)}" for k, v in call.arguments.items()]
    return f"{call.name}({','.join(parts)})"


def _py_literal(value: Any) -> str:
    if isinstance(value, str):
        return json.dumps(value)
    if isinstance(value, bool) or value is None:
        return repr(value)
    if isinstance(value, list):
        return "[" + ",".join(_py_literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ",".join(f"{json.dumps(str(k))}:{_py_literal(v)}" for k, v in value.items()) + "}"
    return repr(value)
