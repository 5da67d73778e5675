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


def test_parallel_calls_one_json_object_per_line_are_all_read() -> None:
    a = {"name": "add", "arguments": {"a": 1}}
    b = {"name": "mul", "arguments": {"a": 2}}
    want = [ToolCall("add", {"a": 1}), ToolCall("mul", {"a": 2})]
    lines = f"{json.dumps(a)}\n{json.dumps(b)}"
    assert parse_calls(lines) == want
    assert parse_calls(lines + "\n\n") == want
    assert parse_calls(f"```json\n{lines}\n```") == want
    assert parse_calls(f"<tool_call>\n{lines}\n</tool_call>") == want
    assert parse_calls(f"Here are the calls:\n{lines}\nDone.") == want
    # a call with no arguments written bare on its own line is a call too
    assert parse_calls(f'{json.dumps(a)}\n{{"name": "now"}}') == [want[0], ToolCall("now")]


def test_parallel_python_calls_one_per_line_are_all_read() -> None:
    want = [ToolCall("math.hypot", {"x": 4, "y": 5}), ToolCall("g", {"s": "t"})]
    assert parse_calls('math.hypot(x=4, y=5)\ng(s="t")') == want
    assert parse_calls('\nmath.hypot(x=4, y=5)\n\ng(s="t")\n') == want
    assert parse_calls('```python\nmath.hypot(x=4, y=5)\ng(s="t")\n```') == want


def test_lines_that_are_not_all_calls_stay_unread() -> None:
    a = json.dumps({"name": "add", "arguments": {"a": 1}})
    # prose that mentions functions is no call, line by line or not
    for text in ("You could use add(a=1)\nor mul(a=2)", "add(a=1)\nx = 2",
                 "import os\nadd(a=1)", "add\nmul", 'add(a=1)\nprint("x")',
                 "add(a=1) first,\nthen mul(a=2)"):
        assert parse_calls(text) is None, text
    # prose between two JSON calls ends the run: only the first is read
    assert parse_calls(f"I call {a} and maybe later "
                       + json.dumps({"name": "mul", "arguments": {"a": 2}})) == \
        [ToolCall("add", {"a": 1})]
    assert parse_calls(f'{a}\n{{"note": 1}}') == [ToolCall("add", {"a": 1})]


def test_tool_specs_one_per_line_are_not_calls() -> None:
    spec = {"name": "add", "description": "a+b", "parameters": {
        "type": "dict", "properties": {"a": {"type": "integer"}}, "required": ["a"]}}
    other = dict(spec, name="mul")
    lines = f"{json.dumps(spec)}\n{json.dumps(other)}"
    for text in (lines, f"```json\n{lines}\n```", "Tools:\n" + lines):
        assert parse_calls(text) is None, text
    call = json.dumps({"name": "add", "arguments": {"a": 1}})
    assert parse_calls(f"{lines}\n{call}") == [ToolCall("add", {"a": 1})]
