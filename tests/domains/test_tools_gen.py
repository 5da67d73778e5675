"""tools/gen-v1: generator, sizes for the tiny model, checker, dense reward."""

from __future__ import annotations

import json

import pytest

from polyrl.domains.checker import check_domain
from polyrl.domains.tools.gen import ToolsGenDomain


@pytest.fixture(scope="module")
def domain() -> ToolsGenDomain:
    return ToolsGenDomain()


def test_check_domain_passes(domain: ToolsGenDomain) -> None:
    report = check_domain(domain, n=25, seed=3)
    assert report.ok, report.problems
    assert report.oracle_mean == 1.0 and report.empty_mean == 0.0 and report.deterministic


def test_difficulty_one_fits_the_byte_level_quickstart(domain: ToolsGenDomain) -> None:
    tasks = list(domain.tasks("train", difficulty=1, n=200))
    assert max(len(t.prompt[0]["content"].encode()) for t in tasks) <= 160
    assert max(len(t.reference.encode()) for t in tasks) <= 12  # e.g. "add(a=3,b=4)"


def test_every_difficulty_oracle_exact_and_seeded(domain: ToolsGenDomain) -> None:
    for level in range(1, 6):
        tasks = list(domain.tasks("test", difficulty=level, n=10, seed=7))
        assert all(t.difficulty == level and t.split == "test" for t in tasks)
        for t in tasks:
            s = domain.score(t, t.reference)
            assert s.reward == 1.0 and s.passed, (t.id, s)
        again = list(domain.tasks("test", difficulty=level, n=10, seed=7))
        assert [t.to_dict() for t in tasks] == [t.to_dict() for t in again]
    assert list(domain.tasks("test", n=3, seed=1)) != list(domain.tasks("test", n=3, seed=2))


def test_partial_credit_is_dense(domain: ToolsGenDomain) -> None:
    task = next(domain.tasks("train", difficulty=1, n=1))
    name = task.metadata["expected"][0]["name"]
    args = {k: v[0] for k, v in task.metadata["expected"][0]["arguments"].items()}
    one_wrong = dict(args, a=args["a"] + 1)
    s = domain.score(task, json.dumps({"name": name, "arguments": one_wrong}))
    assert s.reward == pytest.approx(0.1 + 0.2 + 0.7 * (0.3 + 0.7 * 0.5))
    assert not s.passed
    wrong_name = domain.score(task, json.dumps({"name": "nope", "arguments": args}))
    assert wrong_name.reward == 0.0
    all_wrong = dict(args, a=args["a"] + 1, b=args["b"] + 1)
    s = domain.score(task, json.dumps({"name": name, "arguments": all_wrong}))
    assert s.reward == pytest.approx(0.7 * 0.1)  # name only: no parsed/schema credit


@pytest.mark.parametrize("level", [3, 4, 5])
def test_prompt_echo_is_not_a_call(domain: ToolsGenDomain, level: int) -> None:
    for task in domain.tasks("test", difficulty=level, n=30):
        score = domain.score(task, task.prompt[0]["content"])
        assert score.reward == 0.0 and score.components["n_calls"] == 0.0


def test_parallel_and_ordered_tasks(domain: ToolsGenDomain) -> None:
    t4 = next(domain.tasks("train", difficulty=4, n=1))
    calls = json.loads(t4.reference)
    assert len(calls) >= 2 and not t4.metadata["ordered"]
    assert domain.score(t4, json.dumps(calls[::-1])).reward == 1.0
    t5 = next(domain.tasks("train", difficulty=5, n=1))
    calls = json.loads(t5.reference)
    assert t5.metadata["ordered"]
    assert domain.score(t5, json.dumps(calls[::-1])).reward < 1.0


def test_bad_arguments_raise(domain: ToolsGenDomain) -> None:
    with pytest.raises(ValueError):
        list(domain.tasks("dev", n=1))
    with pytest.raises(ValueError):
        list(domain.tasks("train"))


def test_spec_defaults_copied_next_to_made_up_values_earn_little(domain: ToolsGenDomain) -> None:
    """send_email's ``urgent`` and search_flights' ``passengers`` have spec defaults:
    every call with made-up required values and the defaults copied is name-only."""
    fill = {"string": "zzz", "integer": 987654, "number": 987654.5, "array": []}
    seen = 0
    for task in domain.tasks("train", difficulty=[3, 4, 5], n=90):
        calls, copied = [], False
        for e in task.metadata["expected"]:
            params = next(s for s in task.metadata["tools"] if s["name"] == e["name"])[
                "parameters"]
            args = {k: fill[params["properties"][k]["type"]] for k in params["required"]}
            for k, prop in params["properties"].items():
                if k not in params["required"] and "" in e["arguments"].get(k, []):
                    args[k] = prop["default"]
                    copied = True
            calls.append({"name": e["name"], "arguments": args})
        if not copied:
            continue
        seen += 1
        s = domain.score(task, json.dumps(calls))
        assert s.reward == pytest.approx(0.7 * 0.1), (task.id, calls, s)
    assert seen >= 10


def test_parallel_calls_one_per_line_score_one(domain: ToolsGenDomain) -> None:
    from polyrl.domains.tools.calls import ToolCall, format_call

    for task in domain.tasks("test", difficulty=4, n=20):
        calls = json.loads(task.reference)
        assert len(calls) >= 2
        json_lines = "\n".join(json.dumps(c) for c in calls)
        py_lines = "\n".join(format_call(ToolCall(c["name"], c["arguments"])) for c in calls)
        for text in (json_lines, py_lines, f"```\n{py_lines}\n```"):
            s = domain.score(task, text)
            assert s.reward == 1.0 and s.passed, (task.id, text, s)


def test_spraying_candidate_calls_earns_no_format_floor(domain: ToolsGenDomain) -> None:
    """One call per candidate value (numbers 0..9 for ``a``, ``b`` made up): one of them
    has a correct argument, but a spray of 10 calls must not earn parsed+schema_valid."""
    for task in domain.tasks("train", difficulty=1, n=20):
        name = task.metadata["expected"][0]["name"]
        spray = "\n".join(json.dumps({"name": name, "arguments": {"a": a, "b": 99}})
                          for a in range(10))
        s = domain.score(task, spray)
        assert s.reward < 0.1, (task.id, s)
