"""Models: building tiny models from configs and loading hub/local models.

This package module stays light (no torch): the CLI checks a model path with
``local_model_problem`` before it makes a run directory or loads anything.
"""

from __future__ import annotations

from pathlib import Path

MODEL_FILES = ("config.json", "adapter_config.json")
"""A transformers model directory holds one of these (a peft adapter: the second)."""


def is_local_path(path_or_id: str) -> bool:
    """Whether ``path_or_id`` names a local path rather than a hub id: it starts with
    ``/``, ``./``, ``../`` or ``~``, has more than one ``/`` (a hub id is ``NAME`` or
    ``ORG/NAME``), is ``.`` or ``..``, or exists on disk (transformers then loads it
    from there)."""
    return (path_or_id.startswith(("/", "./", "../", "~")) or path_or_id.count("/") > 1
            or path_or_id in (".", "..") or Path(path_or_id).expanduser().exists())


def local_model_problem(path_or_id: str) -> str | None:
    """Why ``path_or_id`` cannot be loaded as a transformers model, where that shows
    without loading it; None for a directory holding one of ``MODEL_FILES`` and for a
    name that may be a hub id (whether the hub has it shows only when it is loaded).

    Returns:
        One phrase, e.g. ``"no such directory"``, ``"a file, not a model directory"``,
        ``"a directory without config.json: not a transformers model directory"``,
        ``"empty: give a local model directory or a hub id (ORG/NAME)"``.
    """
    if not path_or_id.strip():
        return "empty: give a local model directory or a hub id (ORG/NAME)"
    if not is_local_path(path_or_id):
        return None
    local = Path(path_or_id).expanduser()
    if not local.exists():
        return "no such directory"
    if not local.is_dir():
        return "a file, not a model directory"
    if not any((local / name).is_file() for name in MODEL_FILES):
        return "a directory without config.json: not a transformers model directory"
    return None
