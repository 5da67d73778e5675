"""Grade parsed tool calls: schema validation and matching against expected calls.

Expected calls use BFCL's "possible answer" convention, normalised to
``[{"name": fn, "arguments": {arg: [accepted values ...]}}]``: a call matches when
its name is equal and every argument's value is one of the accepted values.
An accepted value ``""`` means the (optional) argument may be omitted.
Strings compare case-insensitively after dropping spaces and ``,./-_*^``
(so ``"New York, NY"`` equals ``"new york ny"``); numbers compare by value
(``2 == 2.0``, relative tolerance 1e-9); booleans only equal booleans.

Rubric terms (each in [0, 1]):
    parsed: at least one call was read from the completion.
    schema_valid: fraction of calls whose function exists in the task's tool specs and
        whose arguments validate against its JSON schema (``jsonschema``).
    call_match: sum over matched (predicted, expected) pairs of
        ``0.3 * name_equal + 0.7 * argument_fraction`` (``NAME_ONLY_CREDIT`` when the
        name is right but no argument given is) divided by ``max(n_expected, n_predicted)``,
        so missing and extra calls both cost; pairs are positional when the task is
        ordered, else the best assignment.
The rubric (``rubric.py``) pays ``parsed`` and ``schema_valid`` only when some call
has a correct argument (``call_credit > NAME_ONLY_CREDIT``), so a right name with
made-up arguments, or a well-formed call to nothing, earns little.

What is a correct argument follows BFCL's AST checker: a given value must be one the
reference accepts, an omitted one must be omittable (``""`` accepted). An omittable
argument given as ``""``, or as the default its tool spec states (``defaults.py``), is
the same call as omitting it: accepted (no penalty), but no correct argument of its
own, so copying the spec's defaults next to made-up required values earns only
``NAME_ONLY_CREDIT``. Where the reference requires the default value (not omittable),
giving it is a correct argument like any other.
"""

from __future__ import annotations

import copy
import itertools
import json
import math
from functools import lru_cache
from typing import Any

import jsonschema

from polyrl.domains.tools.calls import ToolCall
from polyrl.domains.tools.defaults import spec_defaults

NAME_ONLY_CREDIT = 0.1
"""Credit of a call with the right name and no correct argument (a low floor)."""
_BFCL_TYPES = {"dict": "object", "float": "number", "tuple": "array", "any": None}
_STRIP = str.maketrans("", "", " ,./-_*^")


def to_json_schema(schema: dict[str, Any], *, top: bool = True) -> dict[str, Any]:
    """Convert a BFCL/OpenAI parameter schema to standard JSON Schema.

    BFCL writes ``dict``/``float``/``tuple``/``any`` where JSON Schema has
    ``object``/``number``/``array``/(no type). At the top level, arguments not in
    ``properties`` are rejected (``additionalProperties: false``).
    """
    out = copy.deepcopy(schema)
    t = out.get("type")
    if isinstance(t, str) and t in _BFCL_TYPES:
        mapped = _BFCL_TYPES[t]
        if mapped is None:
            out.pop("type")
        else:
            out["type"] = mapped
    if isinstance(out.get("properties"), dict):
        out["properties"] = {
            k: to_json_schema(v, top=False) for k, v in out["properties"].items()
        }
    if isinstance(out.get("items"), dict):
        out["items"] = to_json_schema(out["items"], top=False)
    if top and out.get("type") == "object":
        out.setdefault("additionalProperties", False)
    return out


@lru_cache(maxsize=4096)
def _validator(schema_json: str) -> jsonschema.protocols.Validator:
    schema = to_json_schema(json.loads(schema_json))
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    return cls(schema)


def validate_call(call: ToolCall, specs: list[dict[str, Any]]) -> str | None:
    """Check ``call`` against the tool specs; returns None when valid, else the reason.

    Args:
        call: a parsed call.
        specs: function specs ``{"name", "description", "parameters": <schema>}``.
    """
    spec = next((s for s in specs if s.get("name") == call.name), None)
    if spec is None:
        return f"unknown function {call.name!r}"
    schema = spec.get("parameters") or {"type": "object", "properties": {}}
    errors = sorted(
        _validator(json.dumps(schema, sort_keys=True)).iter_errors(call.arguments), key=str
    )
    return errors[0].message if errors else None


def _norm_str(s: str) -> str:
    return s.lower().translate(_STRIP)


def value_matches(pred: Any, gold: Any) -> bool:
    """True when ``pred`` equals one gold value (rules in the module docstring).

    A gold dict maps keys to lists of accepted values (BFCL convention).
    """
    if isinstance(gold, bool) or isinstance(pred, bool):
        return isinstance(gold, bool) and isinstance(pred, bool) and gold == pred
    if isinstance(gold, int | float):
        if not isinstance(pred, int | float):
            return False
        return math.isclose(float(pred), float(gold), rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(gold, str):
        return isinstance(pred, str) and _norm_str(pred) == _norm_str(gold)
    if isinstance(gold, list):
        return (
            isinstance(pred, list)
            and len(pred) == len(gold)
            and all(value_matches(p, g) for p, g in zip(pred, gold, strict=True))
        )
    if isinstance(gold, dict):
        if not isinstance(pred, dict) or set(pred) - set(gold):
            return False
        return all(_accepted(pred, key, acc) for key, acc in gold.items())
    return pred == gold


def _accepted(args: dict[str, Any], key: str, accepted: Any) -> bool:
    accepted = accepted if isinstance(accepted, list) else [accepted]
    if key not in args:
        return "" in accepted
    return any(value_matches(args[key], a) for a in accepted if not (a == "" and args[key] != ""))


def spec_of(name: str, specs: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """The spec named ``name`` in ``specs``, or None."""
    return next((s for s in specs or [] if isinstance(s, dict) and s.get("name") == name), None)


def _grounds(args: dict[str, Any], key: str, accepted: Any,
             defaults: dict[str, tuple[Any, ...]]) -> bool:
    """True when ``args[key]`` is a correct argument that the request alone determines.

    Not an omittable argument given as ``""`` or as the spec's default: that is the
    call with the argument omitted, free to write without reading the request. Nor a
    boolean where the reference accepts both (a coin flip would find it).
    """
    value = args[key]
    if value == "" or not _accepted(args, key, accepted):
        return False
    options = accepted if isinstance(accepted, list) else [accepted]
    if isinstance(value, bool) and {True, False} <= {a for a in options if isinstance(a, bool)}:
        return False  # either boolean is accepted: a guess grounds nothing
    omittable = "" in options
    return not (omittable and any(value_matches(value, d) for d in defaults.get(key, ())))


def call_credit(
    pred: ToolCall, expected: dict[str, Any], spec: dict[str, Any] | None = None
) -> float:
    """Credit in [0, 1] of one predicted call against one expected call.

    ``0.3 * name_equal + 0.7 * (matching arguments / arguments in either)``;
    ``NAME_ONLY_CREDIT`` when the name is right but no argument it gives matches
    (omitting optional arguments, or giving them as ``""`` or as the default ``spec``
    states, alone is no correct argument); 0.0 when the names differ.

    Args:
        pred: the predicted call.
        expected: ``{"name", "arguments": {arg: [accepted values]}}``.
        spec: the tool spec of ``expected["name"]``, for its stated defaults; None
            reads no defaults.
    """
    if pred.name != expected["name"]:
        return 0.0
    gold: dict[str, Any] = expected.get("arguments", {})
    keys = set(gold) | set(pred.arguments)
    if not keys:
        return 1.0
    good = sum(1 for k in keys if k in gold and _accepted(pred.arguments, k, gold[k]))
    if good == len(keys):
        return 1.0
    defaults = spec_defaults(spec)
    if not any(k in gold and _grounds(pred.arguments, k, gold[k], defaults)
               for k in pred.arguments):
        # rightly omitted optional arguments alone earn nothing, nor do ones given as ""
        # or as the spec's default (the same call: no sign of the request being understood)
        return NAME_ONLY_CREDIT
    return 0.3 + 0.7 * good / len(keys)


def match_calls(
    preds: list[ToolCall],
    expected: list[dict[str, Any]],
    *,
    ordered: bool,
    specs: list[dict[str, Any]] | None = None,
) -> tuple[float, int]:
    """Best total credit of ``preds`` against ``expected``.

    ``specs`` (the task's tool specs) supply the defaults ``call_credit`` reads.

    Returns:
        ``(call_match, exact_pairs)``: call_match in [0, 1] (see module docstring);
        exact_pairs = number of pairs with credit 1.0.
    """
    n = max(len(preds), len(expected))
    if n == 0:
        return 1.0, 0
    if not preds or not expected:
        return 0.0, 0
    credit = [[call_credit(p, e, spec_of(e["name"], specs)) for e in expected] for p in preds]
    if ordered:
        pairs = [(i, i) for i in range(min(len(preds), len(expected)))]
    elif min(len(preds), len(expected)) <= 6 and max(len(preds), len(expected)) <= 8:
        best: tuple[float, list[tuple[int, int]]] = (-1.0, [])
        small, big = (preds, expected) if len(preds) <= len(expected) else (expected, preds)
        for perm in itertools.permutations(range(len(big)), len(small)):
            if small is preds:
                cand = [(i, j) for i, j in enumerate(perm)]
            else:
                cand = [(j, i) for i, j in enumerate(perm)]
            total = sum(credit[i][j] for i, j in cand)
            if total > best[0]:
                best = (total, cand)
        pairs = best[1]
    else:  # greedy for very long call lists
        pairs, used = [], set()
        for i in range(len(preds)):
            js = [j for j in range(len(expected)) if j not in used]
            if js:
                j = max(js, key=lambda j, i=i: credit[i][j])
                used.add(j)
                pairs.append((i, j))
    total = sum(credit[i][j] for i, j in pairs)
    exact = sum(1 for i, j in pairs if credit[i][j] >= 1.0)
    return total / n, exact


def bfcl_expected(ground_truth: list[dict[str, dict[str, list[Any]]]]) -> list[dict[str, Any]]:
    """Normalise BFCL ``[{fn: {arg: [accepted]}}]`` to ``[{"name", "arguments"}]``."""
    out = []
    for item in ground_truth:
        if not isinstance(item, dict) or len(item) != 1:
            raise ValueError(f"BFCL ground truth item must be {{fn: args}}, got {item!r}")
        (name, args), = item.items()
        out.append({"name": name, "arguments": args})
    return out


def oracle_calls(
    expected: list[dict[str, Any]], specs: list[dict[str, Any]] | None = None
) -> list[ToolCall]:
    """One correct call per expected call: the first accepted value of each argument.

    An argument that accepts ``""`` (may be omitted) is omitted unless ``specs`` lists
    it as required; then its first non-empty accepted value is used.
    """
    calls = []
    for e in expected:
        spec = next((s for s in specs or [] if s.get("name") == e["name"]), {})
        required = set(spec.get("parameters", {}).get("required", []))
        calls.append(ToolCall(e["name"], _pick(e.get("arguments", {}), required)))
    return calls


def _pick(accepted_by_key: dict[str, Any], required: set[str] | None = None) -> dict[str, Any]:
    out = {}
    for k, acc in accepted_by_key.items():
        acc = acc if isinstance(acc, list) else [acc]
        values = [a for a in acc if a != ""]
        if values and ("" not in acc or required is None or k in required):
            out[k] = _first_value(values[0])
    return out


def _first_value(v: Any) -> Any:
    if isinstance(v, dict):  # nested BFCL dict: {key: [accepted]}
        return _pick(v)
    if isinstance(v, list):
        return [_first_value(x) for x in v]
    return v
