"""Fixtures for the train tests: a tiny real model, a small real domain, a real policy.

The domain and the policy are real (real forward passes, real sampling through
``polyrl.rollout.HFPolicy``, a deterministic reward); small so the tests stay fast.
"""

from __future__ import annotations

import random
from collections.abc import Iterator, Sequence

import pytest

from polyrl.domains.base import Domain, Env
from polyrl.errors import GraderError
from polyrl.models.tiny import build_byte_tokenizer, build_tiny_model
from polyrl.rollout import HFPolicy
from polyrl.types import Score, Task


class EchoDomain(Domain):
    """Repeat a string of digits; reward = mean of the share of digits echoed right and
    the share of ASCII characters (a dense term a random model already varies on).

    Difficulty d asks for d digits. ``fail_every`` > 0 makes every k-th score a
    ``GraderError`` (an infrastructure failure that must never be trained on).
    """

    binary = False

    def __init__(self, domain_id: str = "test/echo-v1", fail_every: int = 0) -> None:
        self.id = domain_id
        self.family = "test"
        self.fail_every = fail_every
        self.calls = 0

    def tasks(self, split: str, *, difficulty: int | Sequence[int] | None = None,
              n: int | None = None, seed: int = 0) -> Iterator[Task]:
        if split not in ("train", "test"):
            raise ValueError(f"unknown split {split!r}")
        rng = random.Random(f"{self.id}:{split}:{seed}")
        diffs = [difficulty] if isinstance(difficulty, int) else list(difficulty or [1])
        for i in range(n or 8):
            d = diffs[i % len(diffs)]
            digits = "".join(rng.choice("0123456789") for _ in range(d))
            yield Task(id=f"{split}-{seed}-{i}", domain=self.id, split=split, difficulty=d,
                       prompt=[{"role": "user", "content": digits}], reference=digits)

    def score(self, task: Task, answer) -> Score:
        self.calls += 1
        if self.fail_every and self.calls % self.fail_every == 0:
            raise GraderError("grader crashed (injected)")
        text = answer if isinstance(answer, str) else answer.text
        ref = task.reference
        echoed = sum(1 for a, b in zip(text, ref, strict=False) if a == b) / len(ref)
        ascii_share = sum(ch.isascii() for ch in text) / max(1, len(text))
        return Score(reward=(echoed + ascii_share) / 2,
                     components={"echoed": echoed, "ascii": ascii_share})


def tiny_model(seed: int = 0):
    """A 2-layer, 64-wide byte-level Llama (fp32)."""
    return build_tiny_model(hidden_size=64, num_layers=2, num_heads=2, intermediate_size=128,
                            max_position_embeddings=1024, seed=seed)


@pytest.fixture
def tokenizer():
    return build_byte_tokenizer()


@pytest.fixture
def echo_domain() -> EchoDomain:
    return EchoDomain()


def tiny_policy(seed: int = 0) -> HFPolicy:
    """An ``HFPolicy`` over a fresh ``tiny_model(seed)``."""
    return HFPolicy(tiny_model(seed), build_byte_tokenizer())


class GuessEnv(Env):
    """Guess a digit in up to 2 turns; the env answers "higher"/"lower"; reward 1 when hit,
    0.25 for any digit, else 0."""

    def __init__(self, target: str) -> None:
        self.target = target
        self.turns = 0

    def reset(self, *, seed=None):
        self.turns = 0
        return "guess a digit", {}

    def step(self, action: str):
        self.turns += 1
        guess = action.strip()[:1]
        if guess == self.target:
            return "yes", 1.0, True, False, {}
        reward = 0.25 if guess.isdigit() else 0.0
        hint = "higher" if guess.isdigit() and guess < self.target else "lower"
        return hint, reward, False, self.turns >= 2, {}


class GuessDomain(EchoDomain):
    """A multi-turn domain over ``GuessEnv``; the episode's reward is the score."""

    multi_turn = True

    def env(self, task: Task) -> Env:
        return GuessEnv(task.reference[:1])

    def score(self, task: Task, answer) -> Score:
        reward = float(getattr(answer, "reward", 0.0))
        return Score(reward=reward, components={"env": reward})
