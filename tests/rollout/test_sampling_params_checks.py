"""SamplingParams refuses values the samplers would misread (break-it)."""

from __future__ import annotations

import pytest

from polyrl.rollout import SamplingParams


@pytest.mark.parametrize("kw", [{"temperature": float("nan")}, {"temperature": float("inf")},
                                {"max_tokens": 2.5}, {"max_tokens": True}])
def test_non_finite_temperature_and_non_int_max_tokens_refused(kw: dict) -> None:
    with pytest.raises(ValueError):
        SamplingParams(**kw)
