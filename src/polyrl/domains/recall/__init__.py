"""Long-context recall domains: ``recall/needle-v1`` and fixed-length ``recall/needle-<L>-v1``."""

from __future__ import annotations

from polyrl.domains.recall.haystack import (
    BYTES_PER_TOKEN,
    FILLER_WORDS,
    LazyTask,
    build_haystack,
    filler_sentences,
)
from polyrl.domains.recall.needle import (
    KEY_WORDS,
    LADDER,
    LENGTHS,
    NeedleRecall,
    builtin_domains,
    render_prompt,
)

__all__ = [
    "BYTES_PER_TOKEN",
    "FILLER_WORDS",
    "KEY_WORDS",
    "LADDER",
    "LENGTHS",
    "LazyTask",
    "NeedleRecall",
    "build_haystack",
    "builtin_domains",
    "filler_sentences",
    "render_prompt",
]
