"""code/mbppplus-v1: input coercion, expected outputs from the canonical (cached), scoring."""

from __future__ import annotations

import gzip
import json

import pytest

import polyrl.domains.code.mbppplus as mbppplus
from polyrl.domains.code.mbppplus import MbppPlusDomain, argument_shapes, coerce
from polyrl.errors import ConfigError


def test_json_inputs_take_the_container_types_of_the_tasks_own_assert() -> None:
    shapes = argument_shapes("assert f((3, 4), [(1, 2)], {'a': (1, 2)}, 1j) == 1", "f")
    args = [[3, 4], [[1, 2]], {"a": [1, 2]}, "2j"]
    assert [coerce(s, a) for s, a in zip(shapes, args, strict=True)] == \
        [(3, 4), [(1, 2)], {"a": (1, 2)}, 2j]
    assert coerce(("num",), "kx") == "kx"  # adversarial strings stay strings


def test_missing_data_names_the_path(tmp_path) -> None:
    domain = MbppPlusDomain(path=tmp_path / "MbppPlus.jsonl.gz")
    with pytest.raises(ConfigError, match="MbppPlus.jsonl.gz"):
        next(domain.tasks("test"))
    with pytest.raises(ConfigError, match="MbppPlus.jsonl.gz"):
        domain.split_sizes()  # listed as unavailable, not as an empty domain


def test_canonical_passes_wrong_fails_and_outputs_are_cached(
        shared_data, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("POLYRL_CACHE_DIR", str(tmp_path))
    path = shared_data / "mbppplus" / "MbppPlus.jsonl.gz"
    domain = MbppPlusDomain(path=path)
    tasks = list(domain.tasks("test", n=3))
    assert [t.id for t in tasks] == ["Mbpp/2", "Mbpp/3", "Mbpp/4"]
    assert tasks[0].metadata["unordered"]  # its prompt asserts set(similar_elements(...))
    for task in tasks:
        assert task.metadata["n_tests"] > 50
        assert domain.score(task, f"```python\n{task.reference}\n```").reward == 1.0
        assert domain.score(task, f"```python\ndef {task.metadata['entry_point']}(*a):\n"
                                  "    return None\n```").reward == 0.0
    assert len(list(tmp_path.glob("mbppplus/*/Mbpp_*.json"))) == 3

    def no_sandbox(*args, **kwargs):
        raise AssertionError("expected outputs must come from the cache")

    monkeypatch.setattr(mbppplus, "run_tests", no_sandbox)
    again = list(MbppPlusDomain(path=path).tasks("test", n=3))
    assert [t.metadata["cases"] for t in again] == [t.metadata["cases"] for t in tasks]


def test_inputs_after_one_that_hangs_are_still_recorded(tmp_path, monkeypatch) -> None:
    """An input whose canonical run overruns its wall backstop (a loaded machine made
    Mbpp/599's ``sum(range(10**8))`` do so) had the canonical's process killed, and the
    rest of its 16-input execution went unreported and was dropped: the recorded tests
    depended on load (Mbpp/599: 41 of 91 inputs under load, 75 otherwise)."""
    monkeypatch.setenv("POLYRL_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(mbppplus, "RECORD_TIMEOUT_S", 0.2)  # wall backstop 1.6 s
    row = {"task_id": "Mbpp/1", "entry_point": "double", "atol": 0,
           "prompt": '"""\nDouble x.\nassert double(1) == 2\n"""\n',
           "canonical_solution": ("import time\n\ndef double(x):\n    if x < 0:\n"
                                  "        time.sleep(30)  # no CPU: only the wall backstop\n"
                                  "    return 2 * x\n"),
           "base_input": [[1], [-1], [2], [3]], "plus_input": [[4]],
           "assertion": "assert double(1) == 2"}
    path = tmp_path / "MbppPlus.jsonl.gz"
    with gzip.open(path, "wt") as f:
        f.write(json.dumps(row) + "\n")
    (task,) = MbppPlusDomain(path=path).tasks("test")
    assert [c[0]["__t"][0] for c in task.metadata["cases"]] == [1, 2, 3, 4]
    assert [c[1] for c in task.metadata["cases"]] == [2, 4, 6, 8]
    assert task.metadata["dropped"] == 1
