"""Tests of polyrl.models.lora: real peft adapters on a real tiny model, warning-free."""

from __future__ import annotations

import warnings

import pytest
import torch

from polyrl.models.lora import add_lora, load_lora
from polyrl.models.tiny import build_tiny_model


def tiny():
    return build_tiny_model(hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64,
                            max_position_embeddings=64, seed=0)


def test_adapters_wrap_and_reload_without_a_future_or_deprecation_warning(tmp_path):
    """peft's PeftModel constructor reads transformers' deprecated
    `is_gradient_checkpointing`: get_peft_model and PeftModel.from_pretrained each
    printed a FutureWarning."""
    ids = torch.tensor([[5, 6, 7, 8]])
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        warnings.simplefilter("error", DeprecationWarning)
        model = add_lora(tiny(), rank=4)
        trainable = [n for n, p in model.named_parameters() if p.requires_grad]
        assert trainable and all("lora_" in n for n in trainable)
        for n, p in model.named_parameters():  # move the adapters off their zero init
            if "lora_B" in n:
                torch.nn.init.normal_(p, std=0.1)
        model.save_pretrained(tmp_path / "adapter")
        loaded = load_lora(tiny(), tmp_path / "adapter")
    with torch.no_grad():
        assert torch.allclose(loaded(input_ids=ids).logits, model(input_ids=ids).logits)
        assert not torch.allclose(tiny()(input_ids=ids).logits, model(input_ids=ids).logits)


def test_only_peft_calls_are_quiet_the_deprecation_still_shows_elsewhere():
    """The fix ignores that one warning inside the peft call only: no filter is left
    behind, and code of ours reading the old name would still be told."""
    before = list(warnings.filters)
    model = add_lora(tiny(), rank=2)
    assert warnings.filters == before
    with warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)
        with pytest.raises(FutureWarning, match="is_gradient_checkpointing"):
            _ = model.get_base_model().is_gradient_checkpointing
