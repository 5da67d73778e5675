"""Parsing tool calls out of completions (polyrl.domains.tools.calls)."""

from __future__ import annotations

import json

from polyrl.domains.tools.calls import ToolCall, format_call, parse_calls


def test_json_single_list_and_openai_forms() -> None:
    want = [ToolCall("add", {"a": 3, "b": 4})]
    assert parse_calls('{"name": "add", "arguments": {"a": 3, "b": 4}}') == want
    assert parse_calls('[{"name": "add", "parameters": {"a": 3, "b": 4}}]') == want
    openai = ('{"tool_calls": [{"type": "function", "function": '
              '{"name": "add", "arguments": "{\\"a\\": 3, \\"b\\": 4}"}}]}')
    assert parse_calls(openai) == want
    assert parse_calls('Sure!\n```json\n{"name":"add","arguments":{"a":3,"b":4}}\n```') == want
    assert parse_calls('<tool_call>{"name":"add","arguments":{"a":3,"b":4}}</tool_call>') == want


def test_python_call_syntax_with_dotted_names_and_lists() -> None:
    assert parse_calls("add(a=3,b=4)") == [ToolCall("add", {"a": 3, "b": 4})]
    calls = parse_calls('[math.hypot(x=4, y=5), f(s="x", t=(1, 2))]')
    assert calls == [ToolCall("math.hypot", {"x": 4, "y": 5}), ToolCall("f", {"s": "x", "t": [1, 2]})]


def test_embedded_json_needs_arguments_key() -> None:
    text = 'I will call {"name": "add", "arguments": {"a": 1}} now'
    assert parse_calls(text) == [ToolCall("add", {"a": 1})]
    # a dict that merely has a "name" is not a call
    assert parse_calls('the user is {"name": "John"}') is None


def test_tool_specs_are_not_calls() -> None:
    spec = {"name": "add", "description": "a+b", "parameters": {
        "type": "object", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}
    bfcl = dict(spec, parameters=dict(spec["parameters"], type="dict"))
    for text in (json.dumps(spec), json.dumps([spec, bfcl]),
                 "You can call these functions (JSON schema):\n" + json.dumps([bfcl]),
                 json.dumps({"type": "function", "function": spec})):
        assert parse_calls(text) is None, text
    # a call whose arguments happen to be named like schema keys is still a call
    call = {"name": "f", "arguments": {"type": "object", "properties": {}}}
    assert parse_calls(json.dumps(call)) == [ToolCall("f", call["arguments"])]


def test_nothing_parses() -> None:
    for text in ("", "   ", "I don't know.", "add(3, 4)", "f(x=open('y'))"):
        assert parse_calls(text) is None, text


def test_format_call_round_trips() -> None:
    call = ToolCall("send", {"to": "a@b.c", "n": 2, "ok": True, "xs": [1, "y"]})
    assert parse_calls(format_call(call)) == [call]
    assert parse_calls(format_call(call, "json")) == [call]
    assert format_call(ToolCall("add", {"a": 3, "b": 4})) == "add(a=3,b=4)"


def test_one_tool_call_tag_per_call_reads_every_call() -> None:
    a = {"name": "add", "arguments": {"a": 1}}
    b = {"name": "mul", "arguments": {"a": 2}}
    text = "\n".join(f"<tool_call>\n{json.dumps(c)}\n</tool_call>" for c in (a, b))
    assert parse_calls(text) == [ToolCall("add", {"a": 1}), ToolCall("mul", {"a": 2})]
    fenced = "\n".join(f"```json\n{json.dumps(c)}\n```" for c in (a, b))
    assert parse_calls(fenced) == [ToolCall("add", {"a": 1}), ToolCall("mul", {"a": 2})]
