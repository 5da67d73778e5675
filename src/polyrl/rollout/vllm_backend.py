"""The ``vllm`` backend: in-process vLLM (optional extra ``vllm``, CUDA only).

Import-guarded: building a ``VLLMPolicy`` without vLLM or without a CUDA GPU
raises ``ConfigError`` saying what to install or use instead; importing this
module never needs vLLM.

Logprobs: requested as the sampled token's logprob (``logprobs=0``) with
``logprobs_mode="processed_logprobs"`` where the installed vLLM supports it, so
they follow polyrl's convention (``log_softmax(logits / temperature)``) when top-p and
top-k are off (the default). vLLM's processed logprobs are taken after its top-k/top-p
filter, i.e. renormalised over the nucleus, whereas polyrl's (training, ``HFPolicy``)
are taken before it: with ``top_p < 1`` a sampled token's vLLM logprob is the higher
one, and replay importance weights (``train.update``) read it as behaviour logprob.
Older vLLM versions return untempered logprobs (equal at temperature 1).
"""

from __future__ import annotations

from typing import Any

from polyrl.errors import ConfigError
from polyrl.rollout.base import Policy, SamplingParams, check_n, render_messages
from polyrl.types import Completion, Task


def vllm_unavailable_reason() -> str | None:
    """Why in-process vLLM cannot run here, or None when it can."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return "torch is not installed"
    try:
        import vllm  # noqa: F401
    except ImportError as e:
        return f"vllm is not installed ({e}); install the extra: pip install 'polyrl[vllm]'"
    if not torch.cuda.is_available():
        return "vllm needs a CUDA GPU and none is visible; use 'hf:PATH' on CPU"
    return None


def sampling_kwargs(n_prompts: int, n: int, sampling: SamplingParams) -> list[dict[str, Any]]:
    """Keyword arguments of ``vllm.SamplingParams``, one dict per prompt.

    A seeded request draws from its own generator seeded with its ``seed``: one seed for
    every prompt gave every prompt the same random numbers (correlated samples across a
    step's prompts). Prompt ``i`` gets ``seed + i * n``, as the OpenAI-compatible client
    seeds its ``i * n + j``-th request; vLLM derives the ``n`` samples of one request.

    Args:
        n_prompts: how many prompts (``>= 0``).
        n: samples per prompt.
        sampling: the step's sampling settings; ``seed`` None = unseeded.
    """
    out = []
    for i in range(n_prompts):
        seed = None if sampling.seed is None else sampling.seed + i * n
        out.append(dict(n=n, temperature=sampling.temperature, top_p=sampling.top_p,
                        max_tokens=sampling.max_tokens, stop=list(sampling.stop) or None,
                        seed=seed, logprobs=0))
    return out


class VLLMPolicy(Policy):
    """Sample with an in-process ``vllm.LLM``.

    Args:
        path_or_id: local directory or hub id.
        llm_kwargs: passed to ``vllm.LLM`` (e.g. ``gpu_memory_utilization``, ``dtype``).
    Raises:
        ConfigError: vLLM or CUDA unavailable (the message says which and what to do).
    """

    def __init__(self, path_or_id: str, **llm_kwargs: Any) -> None:
        super().__init__()
        reason = vllm_unavailable_reason()
        if reason:
            raise ConfigError("<cli>", "--policy", f"vllm:{path_or_id}: {reason}")
        import vllm

        self.name = f"vllm:{path_or_id}"
        self._vllm = vllm
        try:
            self.llm = vllm.LLM(model=path_or_id, logprobs_mode="processed_logprobs", **llm_kwargs)
        except TypeError:  # older vLLM without logprobs_mode
            self.llm = vllm.LLM(model=path_or_id, **llm_kwargs)
        self.tokenizer = self.llm.get_tokenizer()

    def generate(self, tasks: list[Task], n: int, sampling: SamplingParams) -> list[Completion]:
        """See ``Policy.generate``."""
        check_n(n)
        out = self.generate_from_tokens([self.render_prompt(t) for t in tasks], n, sampling)
        for i, c in enumerate(out):
            c.task_id = tasks[i // n].id
        return out

    def render_prompt(self, task: Task) -> list[int]:
        """Chat-template token ids of ``task.prompt``."""
        return render_messages(self.tokenizer, task.prompt)

    def generate_from_tokens(
        self, prompt_token_ids: list[list[int]], n: int, sampling: SamplingParams
    ) -> list[Completion]:
        """See ``Policy.generate_from_tokens``."""
        check_n(n)
        params = [self._vllm.SamplingParams(**kw)
                  for kw in sampling_kwargs(len(prompt_token_ids), n, sampling)]
        prompts = [{"prompt_token_ids": list(p)} for p in prompt_token_ids]
        results = self.llm.generate(prompts, params, use_tqdm=False)
        out = []
        for prompt, res in zip(prompt_token_ids, results, strict=True):
            for j, o in enumerate(res.outputs):
                ids = list(o.token_ids)
                lps = [float(d[t].logprob) for t, d in zip(ids, o.logprobs or [], strict=True)] if o.logprobs else []
                out.append(Completion(
                    task_id="", text=o.text, sample_index=j, prompt_token_ids=list(prompt),
                    token_ids=ids, logprobs=lps,
                    finish_reason="length" if o.finish_reason == "length" else "stop",
                    policy_version=self.version,
                ))
        return out
