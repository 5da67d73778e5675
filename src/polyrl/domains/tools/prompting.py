"""How tool specs are shown to the policy: full JSON schema or a compact signature."""

from __future__ import annotations

import json
from typing import Any

_SHORT = {"integer": "int", "number": "float", "float": "float", "string": "str",
          "boolean": "bool", "array": "list", "object": "dict", "dict": "dict"}


def tools_system_prompt(specs: list[dict[str, Any]]) -> str:
    """A system message listing ``specs`` as JSON and the expected answer format."""
    return (
        "You can call these functions (JSON schema):\n"
        + json.dumps(specs, separators=(",", ":"))
        + '\nAnswer with the call(s) only, as JSON: [{"name": ..., "arguments": {...}}]'
    )


def compact_signature(spec: dict[str, Any]) -> str:
    """``add(a:int,b:int)`` from a JSON-schema spec (enums shown as ``a|b``)."""
    props = spec.get("parameters", {}).get("properties", {})
    parts = []
    for name, p in props.items():
        kind = "|".join(map(str, p["enum"])) if "enum" in p else _SHORT.get(p.get("type"), "any")
        parts.append(f"{name}:{kind}")
    return f"{spec['name']}({','.join(parts)})"
