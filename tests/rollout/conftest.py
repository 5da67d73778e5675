"""Fixtures of the rollout tests: a tiny model saved to disk and loaded back."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyrl.models.tiny import save_tiny
from polyrl.types import Task


@pytest.fixture(scope="session")
def tiny_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tiny byte-level Llama + tokenizer saved with ``save_pretrained``."""
    return save_tiny(tmp_path_factory.mktemp("tiny") / "model", seed=0, num_layers=2)


@pytest.fixture(scope="session")
def hf_policy(tiny_dir: Path):
    """An ``HFPolicy`` loaded from ``tiny_dir`` on CPU."""
    from polyrl.rollout import HFPolicy

    return HFPolicy.from_pretrained(str(tiny_dir), device="cpu")


def make_task(i: int, text: str | None = None, domain: str = "test/none-v1") -> Task:
    """A task whose prompt differs in length by ``i``."""
    content = text if text is not None else f"Add {i} and {i * 3}." + " please" * i
    return Task(id=f"t{i}", domain=domain, split="train", difficulty=1,
                prompt=[{"role": "user", "content": content}], reference=f"{i * 4}")
