"""SamplingParams validation, stop-string helpers, prompt rendering without a template."""

from __future__ import annotations

import pytest

from polyrl.rollout import HFPolicy, SamplingParams
from polyrl.rollout.base import apply_stop, find_stop, render_messages


@pytest.mark.parametrize(("kwargs", "field"), [
    ({"temperature": -1}, "temperature"), ({"top_p": 0}, "top_p"), ({"top_p": 1.5}, "top_p"),
    ({"max_tokens": 0}, "max_tokens"), ({"stop": ("",)}, "stop"),
])
def test_sampling_params_validation(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SamplingParams(**kwargs)


def test_sampling_params_normalise_and_replace() -> None:
    sp = SamplingParams(stop="\n")
    assert sp.stop == ("\n",)
    assert sp.replace(max_tokens=3).max_tokens == 3 and sp.replace(max_tokens=3).stop == ("\n",)
    with pytest.raises(ValueError):
        sp.replace(top_p=2.0)


def test_stop_helpers() -> None:
    assert find_stop("abc END x STOP", ("STOP", "END")) == 4
    assert apply_stop("abc END x", ("END",)) == ("abc ", True)
    assert apply_stop("abc", ("END",)) == ("abc", False)


def test_render_plain_text_without_template(hf_policy: HFPolicy) -> None:
    tok = hf_policy.tokenizer
    saved = tok.chat_template
    tok.chat_template = None
    try:
        ids = render_messages(tok, [{"role": "system", "content": "s"},
                                    {"role": "user", "content": "hi"}])
    finally:
        tok.chat_template = saved
    assert tok.decode(ids, skip_special_tokens=True) == "s\nhi\n"


def test_vllm_requests_of_different_prompts_get_different_seeds() -> None:
    """One seeded ``SamplingParams`` for every prompt gave each prompt vLLM's same random
    numbers; each prompt's request now has its own seed, ``seed + i * n`` (no vLLM here:
    the keyword arguments the backend builds its requests from are checked)."""
    from polyrl.rollout import SamplingParams
    from polyrl.rollout.vllm_backend import sampling_kwargs

    kws = sampling_kwargs(3, 4, SamplingParams(temperature=0.7, max_tokens=5, seed=11))
    assert [kw["seed"] for kw in kws] == [11, 15, 19]
    assert all(kw["n"] == 4 and kw["max_tokens"] == 5 and kw["logprobs"] == 0 for kw in kws)
    unseeded = sampling_kwargs(2, 4, SamplingParams(temperature=0.7, max_tokens=5))
    assert [kw["seed"] for kw in unseeded] == [None, None]
