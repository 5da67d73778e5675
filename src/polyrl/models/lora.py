"""LoRA adapters (peft) on a transformers causal LM, without the deprecation peft trips.

Every LoRA run printed ``FutureWarning: `is_gradient_checkpointing` is deprecated and
will be removed in v6. Use `is_activation_checkpointing` instead.`` Its cause is not an
argument polyrl passes: ``peft.PeftModel.__init__`` (peft 0.21.2, the newest release)
reads ``model.is_gradient_checkpointing`` of the model it wraps, a property
transformers 5.2x renamed ``is_activation_checkpointing`` and now warns on, whatever
the caller passes (``get_peft_model`` and ``PeftModel.from_pretrained`` both construct a
``PeftModel``). peft reads it only to decide whether to call
``enable_input_require_grads`` (needed when activation checkpointing is on), which the
trainer does itself before wrapping. So the two functions here build the ``PeftModel``
with exactly that one warning, from that one property, ignored for the duration of the
call (``_peft_reads_old_checkpointing_name``); every other warning, and that one from
anywhere else, still shows. Drop the filter once peft reads the new name.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

OLD_CHECKPOINTING_NAME_WARNING = r"`is_gradient_checkpointing` is deprecated"
"""Start of the FutureWarning transformers >= 5.2x gives when ``is_gradient_checkpointing``
is read (peft's ``PeftModel.__init__`` does)."""


@contextmanager
def _peft_reads_old_checkpointing_name() -> Iterator[None]:
    """Ignore transformers' FutureWarning for ``is_gradient_checkpointing``, raised from
    ``transformers.modeling_utils``, inside the block only (see the module docstring)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=OLD_CHECKPOINTING_NAME_WARNING,
                                category=FutureWarning, module=r"transformers\.modeling_utils")
        yield


def add_lora(model: torch.nn.Module, rank: int) -> Any:
    """Wrap ``model`` in LoRA adapters of rank ``rank`` on every linear layer.

    ``lora_alpha = 2 * rank``, no dropout (RL trains on the sampling policy's own
    log-probs), ``task_type="CAUSAL_LM"``. The base weights are frozen in place; when
    activation checkpointing is to be used, enable it (and
    ``enable_input_require_grads``) on ``model`` first.

    Args:
        model: a transformers causal LM (``PreTrainedModel``).
        rank: the adapters' rank r (>= 1).

    Returns:
        the ``peft.PeftModelForCausalLM`` around ``model`` (``disable_adapter()`` gives
        the base model; parameter names start with ``base_model.model.``).

    Raises:
        ImportError: peft is not installed.
    """
    from peft import LoraConfig, get_peft_model

    config = LoraConfig(r=rank, lora_alpha=2 * rank, lora_dropout=0.0,
                        target_modules="all-linear", task_type="CAUSAL_LM")
    with _peft_reads_old_checkpointing_name():
        return get_peft_model(model, config)


def load_lora(base: torch.nn.Module, adapter_dir: str | Path) -> Any:
    """``peft.PeftModel.from_pretrained(base, adapter_dir)`` without the deprecation
    warning peft's constructor trips (module docstring).

    Args:
        base: the base causal LM the adapter was trained on.
        adapter_dir: a directory written by ``PeftModel.save_pretrained``
            (``adapter_config.json`` + weights).

    Returns:
        the ``PeftModel`` (``merge_and_unload()`` gives a plain model).

    Raises:
        ValueError, OSError: as ``PeftModel.from_pretrained`` (no adapter there).
    """
    from peft import PeftModel

    with _peft_reads_old_checkpointing_name():
        return PeftModel.from_pretrained(base, str(adapter_dir))
