"""HFPolicy: loading, batched group sampling, exact logprobs, stop strings, prefix reuse."""

from __future__ import annotations

import pytest
import torch

from polyrl.errors import PromptTooLongError
from polyrl.rollout import HFPolicy, SamplingParams
from tests.rollout.conftest import make_task


def test_from_pretrained_renders_chat_template(hf_policy: HFPolicy) -> None:
    ids = hf_policy.render_prompt(make_task(1, "hi"))
    assert hf_policy.tokenizer.decode(ids) == "Q: hi\nA: "


def test_generate_shapes_order_and_logprobs(hf_policy: HFPolicy) -> None:
    tasks = [make_task(i) for i in range(3)]
    out = hf_policy.generate(tasks, 4, SamplingParams(max_tokens=6, seed=1))
    assert len(out) == 12
    assert [c.task_id for c in out] == ["t0"] * 4 + ["t1"] * 4 + ["t2"] * 4
    assert [c.sample_index for c in out] == [0, 1, 2, 3] * 3
    for c in out:
        assert 1 <= len(c.token_ids) <= 6 and len(c.logprobs) == len(c.token_ids)
        assert c.prompt_token_ids == hf_policy.render_prompt(tasks[int(c.task_id[1:])])
        assert c.finish_reason in ("stop", "length")
    # Logprobs equal a fresh teacher-forced forward pass of prompt + completion.
    model = hf_policy.model
    for c in out[::5]:
        ids = torch.tensor([c.prompt_token_ids + c.token_ids])
        with torch.no_grad():
            logits = model(input_ids=ids).logits[0, len(c.prompt_token_ids) - 1 : -1]
        ref = torch.log_softmax(logits.float(), -1).gather(-1, ids[0, len(c.prompt_token_ids):, None])
        assert torch.allclose(ref.squeeze(-1), torch.tensor(c.logprobs), atol=1e-4)


def test_temperature_scales_logprobs(hf_policy: HFPolicy) -> None:
    task = make_task(2)
    c = hf_policy.generate([task], 1, SamplingParams(temperature=0.5, max_tokens=3, seed=0))[0]
    ids = torch.tensor([c.prompt_token_ids + c.token_ids])
    with torch.no_grad():
        logits = hf_policy.model(input_ids=ids).logits[0, len(c.prompt_token_ids) - 1 : -1]
    ref = torch.log_softmax(logits / 0.5, -1).gather(-1, ids[0, -3:, None]).squeeze(-1)
    assert torch.allclose(ref, torch.tensor(c.logprobs), atol=1e-4)


def test_seed_reproducible_and_samples_differ(hf_policy: HFPolicy) -> None:
    tasks = [make_task(1), make_task(5)]
    sp = SamplingParams(max_tokens=8, seed=123)
    a = hf_policy.generate(tasks, 3, sp)
    b = hf_policy.generate(tasks, 3, sp)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    assert len({tuple(c.token_ids) for c in a[:3]}) > 1  # group samples differ


def test_greedy_prefix_reuse_equals_naive_and_hf_generate(hf_policy: HFPolicy) -> None:
    tasks = [make_task(i) for i in (0, 3, 7)]  # different lengths -> left padding
    sp = SamplingParams(temperature=0, max_tokens=12)
    naive = HFPolicy(hf_policy.model, hf_policy.tokenizer, prefix_reuse=False, max_batch=2)
    a = hf_policy.generate(tasks, 3, sp)
    b = naive.generate(tasks, 3, sp)
    assert [c.token_ids for c in a] == [c.token_ids for c in b]
    for i, t in enumerate(tasks):
        ids = hf_policy.render_prompt(t)
        ref = hf_policy.model.generate(torch.tensor([ids]), max_new_tokens=12, do_sample=False,
                                       eos_token_id=None, pad_token_id=0)
        assert a[3 * i].token_ids[:12] == ref[0, len(ids):].tolist()[: len(a[3 * i].token_ids)]


def test_prefix_reuse_prefills_once(hf_policy: HFPolicy) -> None:
    model, tok = hf_policy.model, hf_policy.tokenizer
    reuse = HFPolicy(model, tok, prefix_reuse=True)
    naive = HFPolicy(model, tok, prefix_reuse=False)
    tasks = [make_task(4)]
    reuse.generate(tasks, 4, SamplingParams(max_tokens=2, seed=0))
    naive.generate(tasks, 4, SamplingParams(max_tokens=2, seed=0))
    assert naive.stats.prompt_tokens == 4 * reuse.stats.prompt_tokens > 0


def test_a_group_larger_than_max_batch_is_decoded_in_batches(hf_policy: HFPolicy) -> None:
    """With prefix reuse, n > max_batch decoded all n rows at once (past max_batch, the
    memory bound on a GPU). Now the group's prompt is prefilled once per batch."""
    small = HFPolicy(hf_policy.model, hf_policy.tokenizer, prefix_reuse=True, max_batch=2)
    rows: list[int] = []
    decode = small._decode
    small._decode = lambda prompts, repeats, *a: rows.append(len(prompts) * repeats) or \
        decode(prompts, repeats, *a)
    tasks = [make_task(1), make_task(6)]
    out = small.generate(tasks, 5, SamplingParams(temperature=0, max_tokens=4))
    assert rows and max(rows) <= 2 and sum(rows) == 10
    assert [c.sample_index for c in out] == [0, 1, 2, 3, 4] * 2
    greedy = hf_policy.generate(tasks, 1, SamplingParams(temperature=0, max_tokens=4))
    assert [c.token_ids for c in out] == [greedy[0].token_ids] * 5 + [greedy[1].token_ids] * 5
    assert small.stats.prompt_tokens == 3 * sum(len(c.prompt_token_ids) for c in greedy)


def test_eos_ends_and_is_kept(hf_policy: HFPolicy) -> None:
    model, tok = hf_policy.model, hf_policy.tokenizer
    with torch.no_grad():
        saved = model.lm_head.weight.clone() if not model.config.tie_word_embeddings else None
        bias = torch.zeros(model.config.vocab_size)
        bias[2] = 1e4  # force EOS through a forward hook on the logits
    handle = model.lm_head.register_forward_hook(lambda m, i, o: o + bias)
    try:
        c = HFPolicy(model, tok).generate([make_task(1)], 2, SamplingParams(max_tokens=5))[0]
    finally:
        handle.remove()
    assert saved is None or torch.equal(saved, model.lm_head.weight)
    assert c.token_ids == [2] and c.finish_reason == "stop" and c.text == ""


def test_stop_string_cuts_text_and_ids(hf_policy: HFPolicy) -> None:
    tasks = [make_task(i) for i in range(4)]
    free = hf_policy.generate(tasks, 2, SamplingParams(max_tokens=16, seed=5))
    # Use a character the sampler actually produced in the middle of a completion.
    c0 = next(c for c in free if len(c.text) > 4)
    stop = c0.text[2]
    cut = hf_policy.generate(tasks, 2, SamplingParams(max_tokens=16, seed=5, stop=(stop,)))
    for a, b in zip(free, cut, strict=True):
        assert stop not in b.text
        assert a.token_ids[: len(b.token_ids)] == b.token_ids  # same sampler stream
        if stop in a.text:
            assert b.finish_reason == "stop" and a.text.startswith(b.text)
            assert stop in hf_policy.decode(b.token_ids)
            assert stop not in hf_policy.decode(b.token_ids[:-1])  # nothing after the stop


def test_prompt_too_long(hf_policy: HFPolicy) -> None:
    with pytest.raises(PromptTooLongError):
        hf_policy.generate_from_tokens([[5] * 5000], 1, SamplingParams(max_tokens=2))


def test_context_clips_max_tokens(hf_policy: HFPolicy) -> None:
    ctx = hf_policy.context_tokens
    c = hf_policy.generate_from_tokens([[5] * (ctx - 3)], 1, SamplingParams(max_tokens=50))[0]
    assert len(c.token_ids) <= 3


def test_training_mode_restored(hf_policy: HFPolicy) -> None:
    hf_policy.model.train()
    hf_policy.generate([make_task(0)], 1, SamplingParams(max_tokens=2))
    assert hf_policy.model.training
    hf_policy.model.eval()


def test_peft_wrapped_model_logprobs_exact() -> None:
    pytest.importorskip("peft")
    from polyrl.models.lora import add_lora
    from polyrl.models.tiny import build_byte_tokenizer, build_tiny_model

    model = add_lora(build_tiny_model(num_layers=1), rank=4)
    policy = HFPolicy(model, build_byte_tokenizer())
    c = policy.generate([make_task(1)], 2, SamplingParams(max_tokens=5, seed=0))[1]
    ids = torch.tensor([c.prompt_token_ids + c.token_ids])
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0, len(c.prompt_token_ids) - 1 : -1]
    ref = torch.log_softmax(logits, -1).gather(-1, ids[0, -len(c.token_ids):, None]).squeeze(-1)
    assert torch.allclose(ref, torch.tensor(c.logprobs), atol=1e-4)
