"""Distractor text for long-context recall, and tasks whose prompt is rendered on access.

The haystack is built from a fixed pool of 4,096 bland sentences (no digits,
no key words), drawn with a seeded RNG, so a 1M-token haystack (4 MB) takes
tens of milliseconds and is identical for the same seed everywhere.

``LazyTask`` is a ``Task`` whose ``prompt`` is produced by a picklable render
function the first time it is read (``task.prompt``, ``to_dict()``, equality),
so building thousands of 1M-token tasks costs no more than building short
ones; ``metadata["context_bytes"]`` tells the prompt size without rendering.
"""

from __future__ import annotations

import bisect
import functools
import itertools
import random
from collections.abc import Callable, Sequence
from typing import Any

from polyrl.types import Message, Task

BYTES_PER_TOKEN = 4
"""Length unit: one "token" of context = 4 bytes of English text (typical BPE ratio)."""

_SUBJECTS = (
    "The committee", "A quiet neighbour", "The old library", "Every morning the baker",
    "The river", "A travelling musician", "The village council", "Our gardener",
    "The museum guide", "A tired engineer", "The harbour master", "The small bakery",
    "A curious student", "The weather report", "The night train", "The mountain path",
)
_VERBS = (
    "mentioned", "described", "ignored", "painted", "repaired", "celebrated", "measured",
    "questioned", "photographed", "remembered", "discussed", "cleaned", "visited", "admired",
    "postponed", "organised",
)
_OBJECTS = (
    "the wooden bridge", "a forgotten letter", "the autumn festival", "the crowded market",
    "an unusual cloud", "the long corridor", "a broken umbrella", "the evening lecture",
    "the stone fountain", "a faded map", "the narrow staircase", "the spring harvest",
    "a distant lighthouse", "the copper kettle", "the weekly newsletter", "a velvet curtain",
)
_TAILS = (
    "before lunch.", "without much fuss.", "as the rain began.", "for the third time.",
    "while everyone waited.", "near the old square.", "with great care.", "late in the evening.",
    "despite the wind.", "in a hurry.", "after a long debate.", "under a grey sky.",
    "to nobody's surprise.", "at the edge of town.", "once again.", "with a smile.",
)

FILLER_WORDS = frozenset(
    w.strip(".,'").lower() for part in (_SUBJECTS, _VERBS, _OBJECTS, _TAILS) for s in part
    for w in s.split()
)
"""Every word that filler text may contain (keys must avoid these)."""


@functools.lru_cache(maxsize=1)
def _pool() -> tuple[tuple[str, ...], tuple[int, ...]]:
    rng = random.Random(20240611)
    combos = list(itertools.product(_SUBJECTS, _VERBS, _OBJECTS, _TAILS))
    chosen = rng.sample(combos, 4096)
    sentences = tuple(" ".join(parts) + " " for parts in chosen)
    return sentences, tuple(len(s) for s in sentences)


def filler_sentences(seed: int | str, n_bytes: int) -> list[str]:
    """Seeded distractor sentences whose joined length is at most ``n_bytes`` (ASCII, bytes).

    Returns:
        sentences (each ends with a space) totalling ``n_bytes`` minus less than
        one sentence (~60 bytes); ``[]`` when ``n_bytes`` is below one sentence.
    """
    sentences, lengths = _pool()
    mean = sum(lengths) / len(lengths)
    rng = random.Random(seed)
    k = int(n_bytes / mean * 1.1) + 2
    idx = rng.choices(range(len(sentences)), k=k)
    total = list(itertools.accumulate(lengths[i] for i in idx))
    while total and total[-1] < n_bytes:  # rare: sampled sentences shorter than the mean
        more = rng.choices(range(len(sentences)), k=k // 10 + 2)
        idx += more
        total = list(itertools.accumulate(lengths[i] for i in idx))
    keep = bisect.bisect_right(total, n_bytes)
    return [sentences[i] for i in idx[:keep]]


def build_haystack(seed: int | str, n_bytes: int, facts: Sequence[tuple[str, float]]) -> str:
    """Distractor text of about ``n_bytes`` with each ``(sentence, depth)`` fact inserted.

    Args:
        seed: seeds the filler.
        n_bytes: filler size in bytes (facts add their own length).
        facts: sentences and their depth in [0, 1] (0 = start, 1 = end).

    Returns:
        the text; facts at equal depth keep their given order.
    """
    body = filler_sentences(seed, n_bytes)
    slots = sorted(
        ((min(len(body), int(depth * len(body))), i, s) for i, (s, depth) in enumerate(facts)),
        reverse=True,
    )
    for pos, _, sentence in slots:
        body.insert(pos, sentence.rstrip() + " ")
    return "".join(body).rstrip()


class LazyTask(Task):
    """A ``Task`` whose ``prompt`` is rendered by ``render()`` on first access, then kept.

    Args:
        render: a picklable zero-argument callable returning the chat messages
            (e.g. a ``functools.partial`` of a module-level function).
        *args, **kwargs: the ``Task`` fields; a non-None ``prompt`` is used as is.

    Pickles, copies and compares like a ``Task`` (comparing renders both).
    """

    def __init__(
        self, *args: Any, render: Callable[[], list[Message]] | None = None, **kwargs: Any
    ) -> None:
        self._prompt: list[Message] | None = None
        self._render = render
        kwargs.setdefault("prompt", None)
        super().__init__(*args, **kwargs)
        if self._prompt is None and self._render is None:
            raise ValueError("LazyTask needs a prompt or a render function")

    def _get_prompt(self) -> list[Message]:
        if self._prompt is None:
            assert self._render is not None
            self._prompt = self._render()
        return self._prompt

    def _set_prompt(self, value: list[Message] | None) -> None:
        self._prompt = value

    prompt = property(_get_prompt, _set_prompt)  # type: ignore[assignment]

    @property
    def is_rendered(self) -> bool:
        """True once the prompt text has been built."""
        return self._prompt is not None

    def __repr__(self) -> str:
        size = self.metadata.get("context_bytes", "?")
        return (
            f"LazyTask(id={self.id!r}, domain={self.domain!r}, split={self.split!r}, "
            f"difficulty={self.difficulty}, prompt=<~{size} bytes, "
            f"{'rendered' if self.is_rendered else 'not rendered'}>, reference={self.reference!r})"
        )
