"""Durable encoding of job functions, arguments and results."""

from __future__ import annotations

import pytest
import sched_jobs

from polyrl.scheduler import codec
from polyrl.scheduler.probes import sliced_sleep
from polyrl.types import Episode, Score, Turn


def test_fn_path_only_for_importable_functions() -> None:
    assert codec.fn_path(sliced_sleep) == "polyrl.scheduler.probes:sliced_sleep"
    assert codec.load_fn(codec.fn_path(sched_jobs.square)) is sched_jobs.square
    assert codec.fn_path(lambda: 1) is None
    assert codec.fn_path(Score(1.0).to_dict) is None  # bound method: not re-creatable


def test_polyrl_dataclasses_round_trip() -> None:
    value = {"score": Score(0.5, {"tests_passed": 0.5}), "eps": [Episode("t", [Turn("user", "hi")])],
             "tuple": (1, "a")}
    back = codec.loads(codec.dumps(value))
    assert back["score"] == value["score"] and back["eps"][0].turns[0].content == "hi"
    assert back["tuple"] == [1, "a"]


def test_unsafe_values_name_where_they_are() -> None:
    with pytest.raises(codec.NotSerializableError, match=r"args\[1\]\.x: object"):
        codec.dumps([1, {"x": object()}], "args")
    with pytest.raises(codec.NotSerializableError, match="dict key 3"):
        codec.dumps({3: 1}, "kwargs")
