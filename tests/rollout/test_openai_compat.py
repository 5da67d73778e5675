"""OpenAIPolicy against a real HTTP server on 127.0.0.1 serving the tiny hf model."""

from __future__ import annotations

import warnings

import pytest

from polyrl.errors import ConfigError, PolicyServerError, PromptTooLongError
from polyrl.rollout import HFPolicy, OpenAIPolicy, SamplingParams, make_policy
from tests.rollout.conftest import make_task
from tests.rollout.server import TinyOpenAIServer


@pytest.fixture()
def server(hf_policy: HFPolicy):
    srv = TinyOpenAIServer(hf_policy).start()
    yield srv
    srv.stop()


def test_chat_endpoint_matches_local_greedy(server: TinyOpenAIServer, hf_policy: HFPolicy) -> None:
    tasks = [make_task(1), make_task(2)]
    sp = SamplingParams(temperature=0, max_tokens=8)
    remote = make_policy(f"openai:{server.url}#tiny", token_ids=True)
    assert isinstance(remote, OpenAIPolicy)
    got = remote.generate(tasks, 2, sp)
    local = hf_policy.generate(tasks, 2, sp)
    assert [c.task_id for c in got] == ["t1", "t1", "t2", "t2"]
    assert [c.sample_index for c in got] == [0, 1, 0, 1]
    for a, b in zip(got, local, strict=True):
        assert a.text == b.text and a.token_ids == b.token_ids
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
        assert a.finish_reason == b.finish_reason


def test_completions_endpoint_and_token_prompts(server: TinyOpenAIServer,
                                                hf_policy: HFPolicy) -> None:
    sp = SamplingParams(temperature=0, max_tokens=6)
    remote = OpenAIPolicy(server.url, "tiny", endpoint="completions",
                          tokenizer=hf_policy.tokenizer)
    task = make_task(3)
    c = remote.generate([task], 1, sp)[0]
    assert c.text == hf_policy.generate([task], 1, sp)[0].text and len(c.logprobs) == 6
    ids = hf_policy.render_prompt(task)
    d = remote.generate_from_tokens([ids], 1, sp)[0]
    assert d.text == c.text and d.prompt_token_ids == ids
    assert d.token_ids == []  # ids only when asked (token_ids=True)


def test_bounded_concurrency(server: TinyOpenAIServer) -> None:
    server.delay_s = 0.05
    remote = OpenAIPolicy(server.url, "tiny", max_concurrency=3)
    out = remote.generate([make_task(i) for i in range(4)], 3, SamplingParams(max_tokens=2))
    assert len(out) == 12 and server.requests == 12
    assert 2 <= server.max_in_flight <= 3


def test_transient_errors_retried_then_raised(server: TinyOpenAIServer) -> None:
    remote = OpenAIPolicy(server.url, "tiny", max_retries=2, backoff_s=0.01)
    server.fail_next = 2
    assert remote.generate([make_task(0)], 1, SamplingParams(max_tokens=2))[0].text is not None
    assert remote.retries == 2
    server.fail_next, server.fail_status = 10, 429
    with pytest.raises(PolicyServerError, match="429"):
        remote.generate([make_task(0)], 1, SamplingParams(max_tokens=2))


def test_final_errors(server: TinyOpenAIServer) -> None:
    with pytest.raises(ConfigError, match="404"):
        OpenAIPolicy(server.url, "nope").generate([make_task(0)], 1, SamplingParams(max_tokens=2))
    remote = OpenAIPolicy(server.url, "tiny", max_retries=0)
    with pytest.raises(PromptTooLongError):
        remote.generate_from_tokens([[5] * 5000], 1, SamplingParams(max_tokens=2))


def test_timeout_and_connection_refused(server: TinyOpenAIServer) -> None:
    server.delay_s = 1.0
    slow = OpenAIPolicy(server.url, "tiny", timeout_s=0.2, max_retries=0)
    with pytest.raises(PolicyServerError, match="attempts"):
        slow.generate([make_task(0)], 1, SamplingParams(max_tokens=2))
    server.delay_s = 0.0
    url = server.url
    server.stop()
    dead = OpenAIPolicy(url, "tiny", max_retries=1, backoff_s=0.01)
    with pytest.raises(PolicyServerError):
        dead.generate([make_task(0)], 1, SamplingParams(max_tokens=2))


def test_an_answer_from_another_model_is_warned_once(server: TinyOpenAIServer) -> None:
    sp = SamplingParams(max_tokens=2)
    same = OpenAIPolicy(server.url, "tiny")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same.generate([make_task(0)], 2, sp)
    assert same.served_models == {"tiny"}
    server.any_model = True  # as llama.cpp: any name is served by the loaded model
    other = OpenAIPolicy(server.url, "llama-70b", max_concurrency=2)
    with pytest.warns(RuntimeWarning, match="asked for model 'llama-70b'.*'tiny'") as seen:
        other.generate([make_task(1), make_task(2)], 2, sp)
    assert len([w for w in seen if issubclass(w.category, RuntimeWarning)]) == 1
    assert other.served_models == {"tiny"}
