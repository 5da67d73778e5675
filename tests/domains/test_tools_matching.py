"""Schema validation and call matching (polyrl.domains.tools.matching / rubric)."""

from __future__ import annotations

import json

import pytest

from polyrl.domains.tools.calls import ToolCall
from polyrl.domains.tools.matching import (
    call_credit,
    match_calls,
    oracle_calls,
    to_json_schema,
    validate_call,
    value_matches,
)
from polyrl.domains.tools.rubric import score_calls
from polyrl.types import Task

SPEC = {"name": "area", "parameters": {"type": "dict", "properties": {
    "base": {"type": "integer"}, "height": {"type": "float"},
    "unit": {"type": "string", "enum": ["m", "cm"]}}, "required": ["base", "height"]}}


def test_bfcl_types_convert_to_json_schema() -> None:
    s = to_json_schema(SPEC["parameters"])
    assert s["type"] == "object" and s["additionalProperties"] is False
    assert s["properties"]["height"]["type"] == "number"
    assert "type" not in to_json_schema({"type": "any"}, top=False)


def test_wrong_argument_type_fails_schema_validation() -> None:
    assert validate_call(ToolCall("area", {"base": 10, "height": 5}), [SPEC]) is None
    assert validate_call(ToolCall("area", {"base": 10, "height": 2.5, "unit": "m"}), [SPEC]) is None
    assert "is not of type 'integer'" in validate_call(
        ToolCall("area", {"base": "10", "height": 5}), [SPEC])
    assert validate_call(ToolCall("area", {"base": 1}), [SPEC]) is not None  # missing required
    assert validate_call(ToolCall("area", {"base": 1, "height": 1, "x": 0}), [SPEC]) is not None
    assert validate_call(ToolCall("area", {"base": 1, "height": 1, "unit": "km"}), [SPEC])
    assert validate_call(ToolCall("volume", {}), [SPEC]) == "unknown function 'volume'"


def test_value_matching_rules() -> None:
    assert value_matches(2.0, 2) and value_matches(2, 2.0)
    assert not value_matches(True, 1) and not value_matches(1, True)
    assert value_matches("New York, NY", "new york ny")
    assert not value_matches("10", 10)
    assert value_matches([1, "a"], [1, "A"]) and not value_matches([1], [1, 2])
    assert value_matches({"name": "Jo"}, {"name": ["jo", "joe"]})
    assert not value_matches({"name": "Jo", "x": 1}, {"name": ["jo"]})


def test_call_credit_hand_computed() -> None:
    exp = {"name": "area", "arguments": {"base": [10], "height": [5], "unit": ["m", ""]}}
    assert call_credit(ToolCall("area", {"base": 10, "height": 5}), exp) == 1.0
    # 3 keys (base, height, unit); base wrong -> 0.3 + 0.7 * 2/3
    assert call_credit(ToolCall("area", {"base": 9, "height": 5, "unit": "m"}), exp) == \
        pytest.approx(0.3 + 0.7 * 2 / 3)
    # an unexpected argument counts against: keys {base, height, unit, k} -> 3/4 right
    assert call_credit(ToolCall("area", {"base": 10, "height": 5, "k": 1}), exp) == \
        pytest.approx(0.3 + 0.7 * 3 / 4)
    assert call_credit(ToolCall("other", {"base": 10, "height": 5}), exp) == 0.0
    # right name, no correct argument: the low name-only floor
    assert call_credit(ToolCall("area", {"base": 9, "height": 4, "unit": "ft"}), exp) == 0.1


def test_parallel_order_insensitive_and_extra_missing_penalised() -> None:
    exp = [{"name": "f", "arguments": {"x": [1]}}, {"name": "g", "arguments": {"y": [2]}}]
    f, g = ToolCall("f", {"x": 1}), ToolCall("g", {"y": 2})
    assert match_calls([g, f], exp, ordered=False) == (1.0, 2)
    assert match_calls([g, f], exp, ordered=True)[0] == 0.0
    assert match_calls([f], exp, ordered=False) == (0.5, 1)  # missing call
    assert match_calls([f, g, f], exp, ordered=False) == (pytest.approx(2 / 3), 2)  # extra


def test_oracle_keeps_required_even_if_omittable() -> None:
    exp = [{"name": "area", "arguments": {"base": [10], "height": ["", 5.0], "unit": ["", "m"]}}]
    assert oracle_calls(exp, [SPEC]) == [ToolCall("area", {"base": 10, "height": 5.0})]


def test_rubric_dense_components() -> None:
    task = Task("t", "tools/x", "test", 1, [], "", {"tools": [SPEC], "ordered": False,
                "expected": [{"name": "area", "arguments": {"base": [10], "height": [5]}}]})
    full = score_calls(task, "area(base=10,height=5)")
    assert full.reward == 1.0 and full.passed
    bad_type = score_calls(task, 'area(base="10",height=5)')
    # parsed 0.1*1 + schema 0.2*0 + match 0.7*(0.3 + 0.7/2)
    assert bad_type.reward == pytest.approx(0.1 + 0.7 * (0.3 + 0.35)) and not bad_type.passed
    assert score_calls(task, "").reward == 0.0
    assert score_calls(task, "sub(a=1)").reward == 0.0  # parsed, but no correct argument
    assert score_calls(task, "area(base=1,height=2)").reward == pytest.approx(0.7 * 0.1)


def test_optional_arguments_given_as_empty_string_earn_no_credit() -> None:
    gold = {"name": "area", "arguments": {"base": [10], "height": [5], "unit": ["m", ""]}}
    wrong = ToolCall("area", {"base": 999, "height": 999, "unit": ""})
    assert call_credit(wrong, gold) == 0.1  # name only: "" is the omission marker
    task = Task("t", "tools/x", "test", 1, [], "",
                {"tools": [SPEC], "expected": [gold], "ordered": False})
    assert score_calls(task, json.dumps([wrong.to_json()])).reward < 0.1
    assert call_credit(ToolCall("area", {"base": 10, "height": 5, "unit": ""}), gold) == 1.0


WEATHER = {"name": "weather", "parameters": {"type": "dict", "required": ["city"], "properties": {
    "city": {"type": "string"},
    "unit": {"type": "string", "description": "Temperature unit. Default is 'c'."},
    "days": {"type": "integer", "default": 1},
    "alerts": {"type": "boolean", "description": "Include alerts. Defaults to false."}}}}


def _weather_task(arguments: dict) -> Task:
    return Task("t", "tools/x", "test", 1, [], "", {"tools": [WEATHER], "ordered": False,
                "expected": [{"name": "weather", "arguments": arguments}]})


def test_spec_defaults_copied_into_optional_arguments_earn_nothing() -> None:
    """Made-up required value + the spec's defaults: the call with the options omitted."""
    gold = {"city": ["Oslo"], "unit": ["c", ""], "days": ["", 1], "alerts": [False, ""]}
    task = _weather_task(gold)
    copied = {"city": "zzz", "unit": "c", "days": 1, "alerts": False}
    for args in (copied, {"city": "zzz", "unit": "C", "days": 1.0},
                 {"city": "zzz", "alerts": False}):
        s = score_calls(task, json.dumps({"name": "weather", "arguments": args}))
        assert s.reward == pytest.approx(0.7 * 0.1), args  # name only, as with them omitted
        assert s.reward == score_calls(task, 'weather(city="zzz")').reward
    assert call_credit(ToolCall("weather", copied), task.metadata["expected"][0],
                       WEATHER) == 0.1
    # the defaults are still accepted: no penalty next to a right required value
    assert score_calls(task, json.dumps({"name": "weather", "arguments": dict(
        copied, city="Oslo")})).reward == 1.0
    one_right = score_calls(task, 'weather(city="Oslo", days=1, alerts=True)')
    assert one_right.reward == score_calls(task, 'weather(city="Oslo", alerts=True)').reward
    # a value other than the default, which the reference accepts, is a correct argument
    other = _weather_task(dict(gold, unit=["f", "c", ""]))
    assert score_calls(other, 'weather(city="zzz", unit="f")').reward > 0.3


def test_a_boolean_either_value_of_which_is_accepted_grounds_nothing() -> None:
    """Made-up required values + a flag the reference accepts either way: a coin flip
    is no correct argument (5 BFCL tasks accept ['', True, False])."""
    task = _weather_task({"city": ["Oslo"], "alerts": ["", True, False]})
    for flag in ("True", "False"):
        s = score_calls(task, f'weather(city="zzz", alerts={flag})')
        assert s.reward == score_calls(task, 'weather(city="zzz")').reward, flag
    assert score_calls(task, 'weather(city="Oslo", alerts=True)').reward == 1.0
    # a flag the request decides (one value accepted) still grounds the call
    asked = _weather_task({"city": ["Oslo"], "alerts": [True]})
    assert score_calls(asked, 'weather(city="zzz", alerts=True)').reward > 0.3


def test_default_the_reference_asks_for_explicitly_earns_credit() -> None:
    """Not omittable in the reference (the request names the value): a correct argument."""
    task = _weather_task({"city": ["Oslo"], "unit": ["c"], "days": [1, ""]})
    s = score_calls(task, 'weather(city="zzz", unit="c", days=1)')
    assert s.reward == pytest.approx(0.1 + 0.2 + 0.7 * (0.3 + 0.7 * 2 / 3))  # unit, days right
    assert score_calls(task, 'weather(city="Oslo", unit="c", days=1)').reward == 1.0
    # omitting what the reference asks for stays wrong
    assert score_calls(task, 'weather(city="Oslo")').reward < 1.0


def test_spec_defaults_read_from_schema_and_description() -> None:
    from polyrl.domains.tools.defaults import spec_defaults

    assert spec_defaults(WEATHER) == {"unit": ("c",), "days": (1,), "alerts": (False,)}
    spec = {"name": "f", "parameters": {"type": "dict", "properties": {
        "g": {"type": "float", "description": "Gravity. Default value is 9.81 m/s^2, earth's."},
        "v0": {"type": "integer", "description": "Initial velocity. Default is zero."},
        "gas": {"type": "string", "description": "Type of gas, with 'air' as default."},
        "u": {"type": "string", "description": "If not provided, the default is km/h."},
        "stops": {"type": "array", "description": "Stops. Default is an empty list."},
        "flag": {"type": "boolean", "default": "'false'"},
        "kind": {"type": "string", "default": "'urban'"},
        "n": {"type": "integer", "description": "Count. Default is 1 atm if not provided."},
        "cap": {"type": "float", "description": "If not provided, will default to that "
                "of water, which is 4.2 kJ/kg/K."},
        "what": {"type": "array", "items": {"type": "string", "enum": ["a", "b"]},
                 "description": "Details. Default is all."},
        "x": {"type": "integer", "description": "No default stated here."}}}}
    assert spec_defaults(spec) == {
        "g": (9.81,), "v0": (0,), "gas": ("air",), "u": ("km/h",), "stops": ([],),
        "flag": (False,), "kind": ("urban",), "n": (1,), "cap": (4.2,),
        "what": (["a", "b"],)}
    assert spec_defaults(None) == {} and spec_defaults({"name": "f"}) == {}
