"""The default values a tool spec declares for its arguments.

A spec states a default either as JSON Schema's ``"default"`` key or, as nearly all
BFCL specs do, in the argument's description: ``"Default is 'cm'."``,
``"defaults to 0.5"``, ``"Default value is 9.81 m/s^2"``, ``"with 'air' as default"``,
``"Default is an empty list."``. ``spec_defaults`` reads both and converts what it
reads to the argument's declared type (``"'false'"`` of a boolean is ``False``,
``"zero"`` of an integer is 0, ``"all"`` of an array of enum items is the whole enum),
so that a default can be compared with a given value (``matching.value_matches``).

The reward uses it so that copying a default into an optional argument, which is the
same call as omitting the argument, earns nothing (``matching.call_credit``). A
description read loosely can give a stray candidate (``"the current season"``); that
only matters where a completion gives exactly that text.
"""

from __future__ import annotations

import ast
import json
import re
from functools import lru_cache
from typing import Any

_QUOTED = r"'[^']*'|\"[^\"]*\"|\[[^\]]*\]"
_AFTER = re.compile(  # "Default is X", "defaults to X", "default value: X", "Default to be X"
    r"\bdefault(?:s|ed)?(?:\s+(?:value|factor|level|setting))?"
    r"(?:\s+(?:is|are|to|of|as|being|will\s+be|set\s+to|be))*\s*[:=]?\s*"
    rf"(?P<v>{_QUOTED}|(?:[^.,;()\n]|\.(?=\w))+)",
    re.I,
)
_BEFORE = re.compile(  # "with 'air' as default", "5 by default"
    rf"(?P<v>{_QUOTED}|[\w./-]+)\s+(?:as\s+(?:the\s+)?default|by\s+default)\b", re.I
)
_CLAUSE_END = re.compile(r"\s+(?:if|when|unless|which|for|assuming)\b", re.I)
_SENTENCE_END = re.compile(r"\.(?!\w)")
_NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*|\.\d+)(?:e[-+]?\d+)?", re.I)
_NUMERIC = ("integer", "number", "float")
_BOOLS = {"true": True, "false": False}
_EMPTY_LISTS = ("empty list", "an empty list", "empty array", "an empty array", "empty")


def _values(text: str, prop: dict[str, Any], *, quoted: bool = False) -> list[Any]:
    """Values ``text`` may stand for as an argument described by ``prop``."""
    text = text.strip()
    if not text:
        return []
    kind = prop.get("type") if isinstance(prop.get("type"), str) else None
    if not quoted and text[0] in "'\"[":
        try:
            value = ast.literal_eval(text)
        except (ValueError, SyntaxError):
            return []
        if isinstance(value, str):
            return _values(value, prop, quoted=True)
        return [list(value) if isinstance(value, tuple) else value]
    low = text.lower()
    if kind in _NUMERIC:
        if low == "zero":
            return [0]
        m = _NUMBER.search(text)  # "9.81 m/s^2", "1 atm if not provided", "year 2001"
        if not m:
            return []
        value = float(m.group())
        return [int(value) if kind == "integer" and value.is_integer() else value]
    if kind == "boolean":
        return [_BOOLS[low]] if low in _BOOLS else []
    if kind == "array":
        enum = (prop.get("items") or {}).get("enum") if isinstance(prop.get("items"), dict) else None
        if low in _EMPTY_LISTS:
            return [[]]
        if low == "all" and isinstance(enum, list):
            return [list(enum)]  # "Default is all." of an array of enum items
        return [[text]] if quoted else []
    if not quoted and low.startswith(("an empty", "empty")):
        return [""]
    return [text] if kind in ("string", None, "any") else []


def _from_description(description: str, prop: dict[str, Any]) -> list[Any]:
    out: list[Any] = []

    def add(values: list[Any]) -> None:
        out.extend(v for v in values if v not in out)

    for m in _BEFORE.finditer(description):
        add(_values(m.group("v"), prop))
    for m in _AFTER.finditer(description):
        raw = m.group("v")
        if raw[:1] in "'\"[":
            add(_values(raw, prop))
            continue
        raw = _CLAUSE_END.split(raw, maxsplit=1)[0]
        for q in re.findall(_QUOTED, raw):  # "the current season '2023-2024'"
            add(_values(q, prop))
        values = _values(raw, prop)
        if not values and prop.get("type") in _NUMERIC:
            # "will default to that of water ..., which is 4.2 kJ/kg/K": the sentence's number
            rest = _SENTENCE_END.split(description[m.start("v"):], maxsplit=1)[0]
            values = _values(rest, prop, quoted=True)
        add(values)
    return out


def _from_schema(value: Any, prop: dict[str, Any]) -> list[Any]:
    if isinstance(value, str):  # BFCL writes "'urban'", "'false'", "'all'"
        stripped = value.strip()
        if len(stripped) > 1 and stripped[0] == stripped[-1] and stripped[0] in "'\"":
            stripped = stripped[1:-1]
        if prop.get("type") in ("string", None, "any"):
            return [stripped]
        return _values(stripped, prop, quoted=True)
    return [value]


@lru_cache(maxsize=4096)
def _defaults_json(spec_json: str) -> dict[str, tuple[Any, ...]]:
    spec = json.loads(spec_json)
    props = (spec.get("parameters") or {}).get("properties") or {}
    out: dict[str, tuple[Any, ...]] = {}
    for name, prop in props.items():
        if not isinstance(prop, dict):
            continue
        values: list[Any] = _from_schema(prop["default"], prop) if "default" in prop else []
        if isinstance(prop.get("description"), str):
            values.extend(v for v in _from_description(prop["description"], prop)
                          if v not in values)
        if values:
            out[name] = tuple(values)
    return out


def spec_defaults(spec: dict[str, Any] | None) -> dict[str, tuple[Any, ...]]:
    """``{argument: (default values ...)}`` of one tool spec (see the module docstring).

    Several values when a description reads more than one way; arguments without a
    stated default are absent. ``None`` (no spec) gives ``{}``.
    """
    if not spec:
        return {}
    return _defaults_json(json.dumps(spec, sort_keys=True, default=str))
