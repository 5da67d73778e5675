"""An 8-bit KV cache for the hf backend (``HFPolicy(kv_cache="quantized")``).

Keys and values are stored as int8 with one float32 absmax scale per (row, head,
token) -- symmetric round-to-nearest over the head dimension, so appending a
token never re-quantizes earlier ones. Per-token scales follow the
token-wise value quantization of KIVI (Liu et al., arXiv:2402.02750); keys use
the same per-token scheme here for simplicity (KIVI groups keys per channel).

Trade-off: memory at rest is ``1 + 4 / head_dim`` bytes per element instead of
4 (fp32) or 2 (bf16) -- e.g. 28% of fp32 at head_dim 32 -- so bigger groups or
longer prompts fit; each step dequantizes the layer's whole cache (extra compute
and a full-precision temporary of one layer), and rounding perturbs logits
slightly (relative error ~ 1/254 per element), so greedy outputs may differ
from the full-precision path. Needs transformers >= 5 (``Cache(layers=...)``).
"""

from __future__ import annotations

from typing import Any

import torch
from transformers.cache_utils import Cache, DynamicLayer


def quantize_int8(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 over the last dim: ``x ~= q * scale``.

    Args:
        x: (batch, heads, tokens, head_dim).
    Returns:
        ``(q, scale)``: q (batch, heads, tokens, head_dim) int8, scale (..., tokens, 1) float32.
    """
    scale = (x.float().abs().amax(dim=-1, keepdim=True) / 127.0).clamp_min(1e-12)
    q = torch.round(x.float() / scale).clamp(-127, 127).to(torch.int8)
    return q, scale


class Int8Layer(DynamicLayer):
    """One layer's keys/values in int8 with per-token scales (see module doc)."""

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        """Take device and dtype from the first ``key_states`` (batch, heads, seq,
        head_dim); the int8 buffers start empty."""
        self.device = key_states.device
        self.dtype = key_states.dtype
        self.q: list[torch.Tensor] = []  # [qk, sk, qv, sv]
        self.keys = self.values = None
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any,
               **kwargs: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        new = [*quantize_int8(key_states), *quantize_int8(value_states)]
        self.q = new if not self.q else [torch.cat([a, b], dim=-2) for a, b in zip(self.q, new,
                                                                                  strict=True)]
        qk, sk, qv, sv = self.q
        return (qk.float() * sk).to(self.dtype), (qv.float() * sv).to(self.dtype)

    def get_seq_length(self) -> int:
        if not self.is_initialized or not self.q:
            return 0
        return self.q[0].shape[-2]

    def reset(self) -> None:
        self.q = []
        self.is_initialized = False

    def crop(self, tokens_to_remove: int) -> None:
        if tokens_to_remove < 0 and self.q:
            self.q = [t[..., :tokens_to_remove, :] for t in self.q]

    def batch_repeat_interleave(self, repeats: int) -> None:
        self.q = [t.repeat_interleave(repeats, dim=0) for t in self.q]

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        self.q = [t[indices, ...] for t in self.q]

    def nbytes(self) -> int:
        """Bytes held by this layer's quantized keys, values and scales."""
        return sum(t.numel() * t.element_size() for t in self.q)


class Int8Cache(Cache):
    """A KV cache of ``Int8Layer``s, one per decoder layer of ``config``."""

    def __init__(self, config: Any) -> None:
        n = config.get_text_config(decoder=True).num_hidden_layers
        super().__init__(layers=[Int8Layer() for _ in range(n)])

    def nbytes(self) -> int:
        """Total bytes held by the cache."""
        return sum(layer.nbytes() for layer in self.layers)
