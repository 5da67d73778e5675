"""The int8 KV cache: quantization error, memory, logits close to full precision."""

from __future__ import annotations

import torch

from polyrl.rollout import HFPolicy, SamplingParams
from polyrl.rollout.kv_cache import Int8Cache, quantize_int8
from tests.rollout.conftest import make_task


def test_int8_quantization_error_and_memory(hf_policy: HFPolicy) -> None:
    x = torch.randn(2, 4, 7, 32)
    q, s = quantize_int8(x)
    assert q.dtype == torch.int8 and ((q.float() * s - x).abs() <= s / 2 + 1e-6).all()
    quant = HFPolicy(hf_policy.model, hf_policy.tokenizer, kv_cache="quantized")
    tasks = [make_task(2), make_task(5)]
    sp = SamplingParams(temperature=0, max_tokens=8)
    a, b = hf_policy.generate(tasks, 2, sp), quant.generate(tasks, 2, sp)
    diffs = [abs(u - v) for x, y in zip(a, b, strict=True) if x.token_ids == y.token_ids
             for u, v in zip(x.logprobs, y.logprobs, strict=True)]
    assert diffs and max(diffs) < 0.05
    cache = Int8Cache(hf_policy.model.config)
    ids = torch.tensor([hf_policy.render_prompt(tasks[0])])
    with torch.no_grad():
        hf_policy.model(input_ids=ids, cache=cache, use_cache=True)
    cfg = hf_policy.model.config
    fp32_bytes = 2 * cfg.num_hidden_layers * ids.shape[1] * cfg.hidden_size * 4
    assert cache.get_seq_length() == ids.shape[1] and cache.nbytes() < 0.35 * fp32_bytes
