"""Turn job functions and values into stored text and back.

Durable jobs (those ``resume()`` can re-create after a crash) need:

- a function importable by path: a top-level function or a class attribute,
  recorded as ``"module:qualname"`` (no lambdas, closures or bound methods);
- JSON-safe arguments and results: None, bool, int, float, str, lists/tuples,
  dicts with str keys, and polyrl dataclasses with ``to_dict``/``from_dict``
  (``Score``, ``Task``, ``Completion``, ``Episode`` ...), which are tagged with
  their import path and rebuilt on load.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from typing import Any

_TAG = "__polyrl_type__"


class NotSerializableError(TypeError):
    """A value cannot be stored as JSON (the message names the offending type)."""


def fn_path(fn: Callable[..., Any]) -> str | None:
    """Return ``"module:qualname"`` when ``fn`` can be re-imported by that path, else None."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", None)
    if not module or not qualname or "<" in qualname or module == "__main__":
        return None
    try:
        return fn_path_checked(fn, module, qualname)
    except (ImportError, AttributeError):
        return None


def fn_path_checked(fn: Callable[..., Any], module: str, qualname: str) -> str | None:
    """Return the path when importing ``module:qualname`` gives back ``fn`` itself."""
    path = f"{module}:{qualname}"
    return path if load_fn(path) is fn else None


def load_fn(path: str) -> Callable[..., Any]:
    """Import the function recorded as ``"module:qualname"``.

    Raises:
        ImportError / AttributeError: the module or attribute no longer exists.
    """
    module, _, qualname = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


def _encode(value: Any, where: str) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_encode(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise NotSerializableError(f"{where}: dict key {k!r} is not a str")
            out[k] = _encode(v, f"{where}.{k}")
        return out
    cls = type(value)
    if hasattr(value, "to_dict") and hasattr(cls, "from_dict"):
        path = f"{cls.__module__}:{cls.__qualname__}"
        return {_TAG: path, "data": _encode(value.to_dict(), where)}
    raise NotSerializableError(f"{where}: {cls.__name__} is not JSON-safe")


def _decode(value: Any) -> Any:
    if isinstance(value, list):
        return [_decode(v) for v in value]
    if isinstance(value, dict):
        if _TAG in value:
            cls = load_fn(value[_TAG])
            return cls.from_dict(_decode(value["data"]))  # type: ignore[attr-defined]
        return {k: _decode(v) for k, v in value.items()}
    return value


def dumps(value: Any, where: str = "value") -> str:
    """Encode ``value`` as JSON text; raises ``NotSerializableError`` naming ``where``."""
    return json.dumps(_encode(value, where), separators=(",", ":"))


def loads(text: str | None) -> Any:
    """Decode JSON text written by ``dumps`` (None stays None)."""
    if text is None:
        return None
    return _decode(json.loads(text))
