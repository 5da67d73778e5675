"""Tiny byte-level Llama-style models built from a config (no downloads).

Used by the quickstart, the tests and the benchmarks. The tokenizer is a real
``PreTrainedTokenizerFast`` (byte-level: one token per UTF-8 byte, plus
``<pad>``, ``<s>``, ``</s>``) with a short chat template, so everything that
loads hub models (``AutoTokenizer``/``AutoModelForCausalLM.from_pretrained``)
loads these from a directory too.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

SPECIAL_TOKENS = ["<pad>", "<s>", "</s>"]
"""Special tokens at ids 0, 1, 2; byte ``b`` is token ``b + 3``."""

CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}A: {{ m['content'] }}{{ eos_token }}\n"
    "{% elif m['role'] == 'user' %}Q: {{ m['content'] }}\n"
    "{% else %}{{ m['content'] }}\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}A: {% endif %}"
)
"""A compact chat template (few tokens matter when one token is one byte)."""


def build_byte_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level tokenizer: vocab 259 = 3 specials + 256 bytes, no merges.

    Returns:
        a ``PreTrainedTokenizerFast`` with ``pad_token_id=0``, ``bos_token_id=1``,
        ``eos_token_id=2``, left padding, and ``CHAT_TEMPLATE``.
    """
    byte_chars = list(pre_tokenizers.ByteLevel.alphabet())
    byte_chars.sort(key=_byte_of_char)
    vocab = {tok: i for i, tok in enumerate(SPECIAL_TOKENS)}
    for i, ch in enumerate(byte_chars):
        vocab[ch] = i + len(SPECIAL_TOKENS)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[], fuse_unk=False))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(SPECIAL_TOKENS)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        padding_side="left",
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def _byte_of_char(ch: str) -> int:
    """Inverse of GPT-2's bytes-to-unicode map for one character."""
    code = ord(ch)
    printable = list(range(33, 127)) + list(range(161, 173)) + list(range(174, 256))
    if code in printable:
        return code
    others = [b for b in range(256) if b not in printable]
    return others[code - 256]


def build_tiny_model(
    hidden_size: int = 128,
    num_layers: int = 4,
    num_heads: int = 4,
    intermediate_size: int = 384,
    max_position_embeddings: int = 1024,
    seed: int = 0,
) -> LlamaForCausalLM:
    """A randomly initialised Llama-style causal LM over the byte vocabulary.

    Args:
        hidden_size: residual width; num_layers: decoder layers; num_heads: attention heads;
        intermediate_size: MLP width; max_position_embeddings: context in tokens;
        seed: torch seed for the initialisation.

    Returns:
        a ``LlamaForCausalLM`` in fp32 (vocab 259; about 0.8M parameters at the defaults).
    """
    config = LlamaConfig(
        vocab_size=len(SPECIAL_TOKENS) + 256,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_heads,
        max_position_embeddings=max_position_embeddings,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=True,
    )
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    model.generation_config.pad_token_id = 0
    return model


def save_tiny(path: str | Path, seed: int = 0, **model_kwargs: int) -> Path:
    """Build a tiny model + byte tokenizer and ``save_pretrained`` both to ``path``.

    Returns:
        ``path`` as a ``Path``, loadable with ``AutoModelForCausalLM`` / ``AutoTokenizer``.
    """
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    build_tiny_model(seed=seed, **model_kwargs).save_pretrained(path)
    build_byte_tokenizer().save_pretrained(path)
    return path
