"""Where public data sets and caches live.

Data: ``$POLYRL_DATA_DIR`` when set, else ``../shared/data`` beside the repository
checkout (``<checkout>/../shared/data``). Cache: ``$POLYRL_CACHE_DIR`` when set,
else ``~/.cache/polyrl``.
"""

from __future__ import annotations

import os
from pathlib import Path

import polyrl


def data_dir() -> Path:
    """The shared data folder (it may not exist)."""
    env = os.environ.get("POLYRL_DATA_DIR")
    if env:
        return Path(env).expanduser()
    checkout = Path(polyrl.__file__).resolve().parents[2]  # src/polyrl/__init__.py -> checkout
    return (checkout.parent / "shared" / "data").resolve()


def data_path(relative: str) -> Path:
    """``data_dir() / relative``."""
    return data_dir() / relative


def cache_dir() -> Path:
    """The polyrl cache folder (created by callers when they write)."""
    return Path(os.environ.get("POLYRL_CACHE_DIR", "~/.cache/polyrl")).expanduser()
