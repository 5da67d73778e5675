"""``final/`` of a run is a plain transformers model, LoRA runs included."""

from __future__ import annotations

import shutil
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from polyrl.eval.pipeline import save_final
from polyrl.models.lora import add_lora
from polyrl.models.tiny import save_tiny
from polyrl.rollout import HFPolicy

SIZE = {"hidden_size": 32, "num_layers": 2, "num_heads": 2, "intermediate_size": 64,
        "max_position_embeddings": 64}


def _trained_lora(base: Path) -> torch.nn.Module:
    """The base at ``base`` wrapped as the trainer wraps it, its adapters moved off zero."""
    model = AutoModelForCausalLM.from_pretrained(base)
    model = add_lora(model, rank=4)
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(0.5 * torch.randn(p.shape, generator=gen))
    return model.eval()


def test_a_lora_runs_final_is_merged_and_loads_without_its_base(tmp_path: Path):
    base = save_tiny(tmp_path / "cache" / "base", **SIZE)
    model = _trained_lora(base)
    tok = AutoTokenizer.from_pretrained(base)
    final = tmp_path / "run" / "final"
    save_final(model, tok, final, str(base))
    assert (final / "config.json").is_file() and not (final / "adapter_config.json").exists()
    assert (final / "adapter" / "adapter_config.json").is_file()
    ids = torch.tensor([[1, 40, 41, 42, 43, 44]])
    with torch.no_grad():
        want = model(ids).logits
    shutil.rmtree(tmp_path / "cache")  # a cleared model cache, or another machine
    loaded = AutoModelForCausalLM.from_pretrained(final).eval()
    assert not getattr(loaded, "_hf_peft_config_loaded", False)  # plain weights, no peft
    with torch.no_grad():
        got = loaded(ids).logits
    assert not torch.allclose(got, _base_logits(tmp_path, ids), atol=1e-3)  # adapters count
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)
    assert HFPolicy.from_pretrained(str(final), device="cpu").tokenizer is not None
    assert any(p.requires_grad for p in model.parameters())  # the live model is untouched
    assert any("lora_" in n for n, _ in model.named_parameters())


def _base_logits(tmp_path: Path, ids: torch.Tensor) -> torch.Tensor:
    base = save_tiny(tmp_path / "again", **SIZE)  # the same seed: the same base weights
    with torch.no_grad():
        return AutoModelForCausalLM.from_pretrained(base).eval()(ids).logits


def test_a_full_finetunes_final_is_saved_as_it_is(tmp_path: Path):
    base = save_tiny(tmp_path / "base", **SIZE)
    model = AutoModelForCausalLM.from_pretrained(base)
    save_final(model, AutoTokenizer.from_pretrained(base), tmp_path / "final", str(base))
    assert (tmp_path / "final" / "config.json").is_file()
    assert not (tmp_path / "final" / "adapter").exists()
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "final")
    for (n, p), (_, q) in zip(model.named_parameters(), loaded.named_parameters(), strict=True):
        assert torch.equal(p, q), n
