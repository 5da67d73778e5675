"""``recall/needle-v1``: needles and multi-hop key chains hidden in distractor text.

A task hides a chain of ``hops`` facts in a haystack: ``hops - 1`` link facts
("The key amber-heron leads to the key violet-otter.") and one code fact
("The code of violet-otter is 482913."), plus decoy codes and decoy chains
between other keys. The question names the first key; the answer is the code at the
end of the chain. At 3+ hops the decoy chains are as long as the true one, so that
only the key the question names tells which code is the answer (with one-link decoys,
the code at the end of the longest chain was it, whatever the question asked).
With ``hops = 1`` it is the classic needle in a
haystack (Kamradt 2023, "Needle In A Haystack"); with more hops it is a
variable-tracking chain in the spirit of RULER (Hsieh et al. 2024, arXiv:2404.06654).

Difficulty of ``recall/needle-v1`` = length and hops:

====  ====================================  =====  ==============
 d     context (tokens = 4 bytes)            hops   code digits
====  ====================================  =====  ==============
 1     compact list, ~60-byte prompt          1      4
 2     1k                                     1      6
 3     8k                                     2      6
 4     32k                                    3      6
 5     128k                                   4      6
====  ====================================  =====  ==============

Fixed-length instances ``recall/needle-<L>-v1`` (L in 1k, 8k, 32k, 128k, 1m)
keep the context at L tokens and set hops = difficulty (1..5).

Prompts are rendered lazily (``LazyTask``): building a 1M-token task is as
fast as a short one; ``metadata["context_tokens"]``/``["context_bytes"]`` give
the size without rendering.

Splits: a task is ``test`` when ``crc32(<chain keys>|<code>) % 10 == 0``, else
``train`` (content-disjoint).

Reward: ``exact`` (weight 0.5): the answer (the last number in the completion with
as many digits as the code, else the last number; thousands commas dropped, so
``662,502`` is 662502 and in "The code of x is 662502 (1 hop)." the answer is 662502;
read after the last copy of the question, so an echoed prompt is no answer) equals
the code; ``chars`` (weight 0.5): dense credit, the fraction
of code positions (left-aligned) the answer gets right (``positional_match``), none
unless the answer agrees with the code at more positions than with any other code of
the context (a decoy picked, or digits pooled from the context's codes, is a wrong
retrieval, not a near miss).
Perfect = 1.0, empty = 0.0, ``Score.passed`` = exact.
"""

from __future__ import annotations

import functools
import random
import re
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

from polyrl.domains.base import Answer, Domain, RewardFn, Rubric, answer_text
from polyrl.domains.extract import after_echo, positional_match
from polyrl.domains.mixture import normalize_difficulty
from polyrl.domains.recall.haystack import BYTES_PER_TOKEN, LazyTask, build_haystack
from polyrl.types import Message, Score, Task

LADDER = {1: (0, 1), 2: (1_000, 1), 3: (8_000, 2), 4: (32_000, 3), 5: (128_000, 4)}
"""``recall/needle-v1``: difficulty -> (context tokens, hops); 0 tokens = compact list."""

LENGTHS = {"1k": 1_000, "8k": 8_000, "32k": 32_000, "128k": 128_000, "1m": 1_000_000}
"""Fixed-length instances: name -> context tokens."""

_SHORT_KEYS = ("fox", "owl", "elk", "yak", "emu", "ant", "bee", "cat", "dog", "eel", "gnu",
               "hen", "jay", "koi", "ram", "rat", "cow", "pig", "bat", "ape")
_ADJ = ("amber", "violet", "crimson", "silver", "golden", "indigo", "scarlet", "olive",
        "ivory", "cobalt", "coral", "jade", "ochre", "teal", "russet", "azure")
_ANIMALS = ("heron", "otter", "falcon", "badger", "lynx", "marten", "ibis", "walrus",
            "gecko", "bison", "puffin", "tapir", "jackal", "oriole", "newt", "stoat")
_DIGITS_RE = re.compile(r"(?<!\d)\d{1,3}(?:,\d{3})+(?!\d)|\d+")


def _keys(rng: random.Random, k: int) -> list[str]:
    pairs = rng.sample(range(len(_ADJ) * len(_ANIMALS)), k)
    return [f"{_ADJ[p // len(_ANIMALS)]}-{_ANIMALS[p % len(_ANIMALS)]}" for p in pairs]


def _code(rng: random.Random, digits: int) -> str:
    return str(rng.randint(10 ** (digits - 1), 10**digits - 1))


def render_prompt(meta: dict[str, Any]) -> list[Message]:
    """Build the chat messages of a recall task from its metadata (module-level: picklable)."""
    if meta["format"] == "compact":
        pairs = ", ".join(f"{k}={v}" for k, v in meta["facts"])
        return [{"role": "user", "content": f"Codes: {pairs}. Code of {meta['chain'][0]}?"}]
    text = build_haystack(meta["filler_seed"], meta["filler_bytes"],
                          [(s, d) for s, d in meta["facts"]])
    return [{"role": "user", "content": f"{text}\n\n{meta['question']}"}]


def _question(meta: dict[str, Any]) -> str:
    """The question that ends the prompt (read from metadata: no rendering)."""
    if meta["format"] == "compact":
        return f"Code of {meta['chain'][0]}?"
    return str(meta["question"])


def _answer(task: Task, parsed: str) -> float:
    return float(parsed == task.metadata["answer"])


def _decoy_codes(meta: dict[str, Any]) -> set[str]:
    """The codes of the context other than the answer (decoys' and other keys')."""
    if meta["format"] == "compact":
        codes = {str(v) for _, v in meta["facts"]}
    else:
        codes = {d for sentence, _ in meta["facts"] for d in _DIGITS_RE.findall(str(sentence))}
    return codes - {meta["answer"]}


def _chars(task: Task, parsed: str) -> float:
    """Digit credit, only for an answer nearer the code than every other code of the
    context: another code is a wrong retrieval, not a near miss (picking one of d1's four
    codes at random scored 0.34 with it, 0.25 without), and so is a number made of the
    context's codes (each digit the commonest among them at its place: 0.29 on d1-d3,
    above a random pick, never itself a decoy)."""
    if not parsed:
        return 0.0
    credit = positional_match(parsed, task.metadata["answer"])
    if any(positional_match(parsed, code) >= credit for code in _decoy_codes(task.metadata)):
        return 0.0
    return credit


class NeedleRecall(Domain):
    """Needle / multi-hop key-chain retrieval in distractor text (see the module docstring).

    Args:
        context_tokens: fixed context length in tokens (4 bytes each), or None for
            the ``LADDER`` of ``recall/needle-v1`` (length grows with difficulty).
        domain_id: the versioned id; default ``recall/needle-v1`` or
            ``recall/needle-<L>-v1`` for a fixed length.

    Raises:
        ValueError: ``context_tokens`` below 100.
    """

    family = "recall"
    binary = True

    def __init__(self, context_tokens: int | None = None, domain_id: str | None = None) -> None:
        if context_tokens is not None and context_tokens < 100:
            raise ValueError(f"context_tokens must be >= 100, got {context_tokens}")
        self.context_tokens = context_tokens
        if domain_id is None:
            names = {v: k for k, v in LENGTHS.items()}
            if context_tokens is None:
                domain_id = "recall/needle-v1"
            else:
                domain_id = f"recall/needle-{names.get(context_tokens, str(context_tokens))}-v1"
        self.id = domain_id
        if context_tokens is None:
            self.description = "Needle / key-chain recall; 60 bytes (d1) to 128k tokens, 1-4 hops."
        else:
            self.description = f"Needle / key-chain recall in {context_tokens:,} tokens; hops = d."
        self.rubric = Rubric([RewardFn("exact", _answer, 0.5), RewardFn("chars", _chars, 0.5)])

    def shape(self, difficulty: int) -> tuple[int, int]:
        """``(context tokens, hops)`` at ``difficulty``; 0 tokens = the compact format."""
        if self.context_tokens is None:
            return LADDER[difficulty]
        return self.context_tokens, difficulty

    def tasks(
        self,
        split: str,
        *,
        difficulty: int | Sequence[int] | None = None,
        n: int | None = None,
        seed: int = 0,
    ) -> Iterator[Task]:
        """Yield ``n`` lazily rendered tasks of ``split``.

        Raises:
            ValueError: unknown split, ``n`` None, or a difficulty outside 1..5.
        """
        diffs = normalize_difficulty(difficulty)
        if split not in ("train", "test"):
            raise ValueError(f"{self.id}: split must be 'train' or 'test', got {split!r}")
        if n is None:
            raise ValueError(f"{self.id} is procedural (unbounded): pass n")
        rng = random.Random(f"{self.id}|{split}|{seed}")
        for i in range(n):
            d = diffs[0] if len(diffs) == 1 else rng.choice(diffs)
            while True:
                meta = self._make(rng, d)
                key = "|".join(meta["chain"]) + "|" + meta["answer"]
                if ("test" if zlib.crc32(key.encode()) % 10 == 0 else "train") == split:
                    break
            fields: dict[str, Any] = {"id": f"{split}/d{d}/s{seed}/{i}", "domain": self.id,
                                      "split": split, "difficulty": d,
                                      "reference": meta["answer"], "metadata": meta}
            if meta["format"] == "compact":  # short: render now
                yield Task(prompt=render_prompt(meta), **fields)
            else:
                yield LazyTask(render=functools.partial(render_prompt, meta), **fields)

    def _make(self, rng: random.Random, difficulty: int) -> dict[str, Any]:
        tokens, hops = self.shape(difficulty)
        if tokens == 0:
            keys = rng.sample(_SHORT_KEYS, 4)
            facts = [[k, _code(rng, 4)] for k in keys]
            target = rng.randrange(4)
            meta = {"format": "compact", "hops": 1, "context_tokens": 0, "context_bytes": 0,
                    "chain": [keys[target]], "answer": facts[target][1], "facts": facts}
            meta["context_bytes"] = len(render_prompt(meta)[0]["content"])
            return meta
        n_decoy = 2 + 2 * hops
        keys = _keys(rng, hops + n_decoy)
        chain, decoys = keys[:hops], keys[hops:]
        code = _code(rng, 6)
        facts: list[tuple[str, float]] = []
        for a, b in zip(chain, chain[1:], strict=False):
            facts.append((f"The key {a} leads to the key {b}.", rng.random()))
        facts.append((f"The code of {chain[-1]} is {code}.", rng.random()))
        if hops <= 2:  # decoy codes, and one-link decoy chains (as long as the true one)
            for j, k in enumerate(decoys):
                if j % 2 and j + 1 < len(decoys):
                    facts.append((f"The key {k} leads to the key {decoys[j + 1]}.", rng.random()))
                else:
                    facts.append((f"The code of {k} is {_code(rng, 6)}.", rng.random()))
        else:  # two decoy chains of ``hops`` keys, so chain length does not tell the answer
            for part in (decoys[:hops], decoys[hops:2 * hops]):
                for a, b in zip(part, part[1:], strict=False):
                    facts.append((f"The key {a} leads to the key {b}.", rng.random()))
                facts.append((f"The code of {part[-1]} is {_code(rng, 6)}.", rng.random()))
            for k in decoys[2 * hops:]:
                facts.append((f"The code of {k} is {_code(rng, 6)}.", rng.random()))
        if hops == 1:
            question = f"What is the code of {chain[0]}? Answer with the code only."
        else:
            question = (f"Start at the key {chain[0]} and follow the 'leads to' links. "
                        "What is the code at the end? Answer with the code only.")
        n_bytes = tokens * BYTES_PER_TOKEN
        return {"format": "haystack", "hops": hops, "context_tokens": tokens,
                "context_bytes": n_bytes, "filler_bytes": n_bytes - sum(len(s) for s, _ in facts),
                "filler_seed": rng.getrandbits(32), "chain": chain, "answer": code,
                "question": question, "facts": [[s, round(d, 4)] for s, d in facts]}

    def score(self, task: Task, answer: Answer) -> Score:
        """Score ``answer``: components ``exact`` and ``chars``; passed = exact."""
        text = after_echo(answer_text(answer), _question(task.metadata))
        found = [f.replace(",", "") for f in _DIGITS_RE.findall(text)]
        sized = [f for f in found if len(f) == len(task.metadata["answer"])]
        score = self.rubric.score(task, (sized or found or [""])[-1])
        score.passed = score.components["exact"] == 1.0
        return score


KEY_WORDS = frozenset(_ADJ + _ANIMALS + _SHORT_KEYS)
"""Words keys are made of (disjoint from ``haystack.FILLER_WORDS``)."""


def builtin_domains() -> list[Domain]:
    """``recall/needle-v1`` and one fixed-length instance per entry of ``LENGTHS``."""
    return [NeedleRecall()] + [NeedleRecall(tokens) for tokens in LENGTHS.values()]
