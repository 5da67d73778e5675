import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from polyrl.models.tiny import build_byte_tokenizer, save_tiny


def test_byte_tokenizer_roundtrips_any_text():
    tok = build_byte_tokenizer()
    text = "def f(x):\n    return x + 1  # é ✓ 12,345.6"
    ids = tok.encode(text, add_special_tokens=False)
    assert len(ids) == len(text.encode("utf-8"))
    assert tok.decode(ids) == text
    assert tok.pad_token_id == 0 and tok.bos_token_id == 1 and tok.eos_token_id == 2


def test_chat_template_is_compact():
    tok = build_byte_tokenizer()
    s = tok.apply_chat_template([{"role": "user", "content": "2+2?"}], tokenize=False, add_generation_prompt=True)
    assert s == "Q: 2+2?\nA: "


def test_save_and_load_from_directory(tmp_path):
    path = save_tiny(tmp_path / "tiny", hidden_size=32, num_layers=1, num_heads=2, intermediate_size=64)
    model = AutoModelForCausalLM.from_pretrained(path)
    tok = AutoTokenizer.from_pretrained(path)
    ids = tok("hello", return_tensors="pt").input_ids
    out = model(ids)
    assert out.logits.shape == (1, ids.shape[1], 259)
    assert tok.decode(tok.encode("héllo", add_special_tokens=False)) == "héllo"
    assert torch.isfinite(out.logits).all()
