"""The one checker every domain must pass (after Gymnasium's ``utils/env_checker.py``).

``check_domain`` verifies, on ``n`` tasks of the test split (train when a
domain has no test split):

- the oracle (``domain.oracle(task)``, or ``domain.oracle_actions(task)``
  replayed through ``domain.env(task)`` for multi-turn domains) earns 1.0;
- an empty answer (multi-turn: an immediate ``env.done_action``) and a few
  garbage answers earn 0.0, one of them the task's own prompt echoed back (its
  messages' contents joined by newlines: a tool list, a question, the numbers shown);
- ``tasks()`` with the same seed yields the same tasks, and scoring the same
  answer twice gives identical ``Score``s (episode rewards, multi-turn); a
  procedural split (``split_sizes()`` None for it) yields other tasks for another
  seed (training draws fresh tasks with a new seed every time: a generator that
  ignored it trained on the same ``n`` tasks forever);
- train and test are disjoint (by task id and by prompt text) where both exist:
  every task of a bounded split, ``4 * n`` tasks of an unbounded one;
- binary domains set ``Score.passed`` True on the oracle and False on empty.

A domain that raises while being checked fails the check with the error
named in ``problems``; the checker itself never raises for a bad domain.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from polyrl.domains.base import Domain, Env
from polyrl.types import Episode, Score, Task, Turn

EMPTY_ANSWERS = ("", " \n\t ")
"""Completions that must earn reward 0.0."""

PROMPT_ECHO = "\x00<polyrl-checker:prompt-echo>\x00"
"""Placeholder in ``GARBAGE_ANSWERS`` replaced by the task's prompt (``prompt_echo``)."""
GARBAGE_ANSWERS = ("I don't know.", "?!?! ### ...", "<|endoftext|>", PROMPT_ECHO)
"""Answers with no content of their own that must also earn 0.0."""

_TOL = 1e-9
_DONE = "\x00<polyrl-checker:done-action>\x00"
"""Placeholder replaced by the env's own ``done_action`` when an episode is replayed."""


@dataclass
class CheckReport:
    """The verdict of ``check_domain``.

    Attributes:
        id: the domain id.
        n: tasks checked.
        oracle_mean: mean oracle reward (must be 1.0).
        empty_mean: mean reward of empty answers/episodes (must be 0.0).
        garbage_mean: mean reward of garbage answers (must be 0.0).
        deterministic: same seed -> same tasks, same answer -> same Score.
        disjoint: train/test share no task id or prompt; None when one split is empty.
        ok: every check passed.
        problems: one line per failed check (empty when ``ok``).
        seconds: wall time of the check, seconds.
    """

    id: str
    n: int
    oracle_mean: float
    empty_mean: float
    garbage_mean: float
    deterministic: bool
    disjoint: bool | None
    ok: bool
    problems: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (the last line of ``polyrl domains check --json``)."""
        return asdict(self)


def run_actions(
    env: Env, actions: Sequence[str], *, seed: int | None = None, task_id: str = ""
) -> Episode:
    """Replay fixed ``actions`` through ``env`` until it terminates or truncates.

    The policy-free episode loop used by the checker (oracle replays, empty
    episodes) and by tests; the policy-driven loop lives in ``rollout``.

    Args:
        env: a fresh environment (not closed here; the caller owns it).
        actions: model actions, in order; the rest are ignored once the episode ends.
        seed: passed to ``env.reset``.
        task_id: recorded on the returned episode.

    Returns:
        an ``Episode`` whose turns alternate ``assistant`` (the action, trainable)
        and ``user`` (the observation); ``reward`` is the last step's reward.
        When ``actions`` run out before the env ends, ``truncated`` is True and
        ``info["actions_exhausted"]`` is True. ``info["initial_observation"]`` is
        the observation from ``reset`` and ``info["steps"]`` the steps taken.
    """
    observation, info = env.reset(seed=seed)
    episode = Episode(task_id=task_id, info={"initial_observation": observation, "steps": 0})
    for action in actions:
        observation, reward, terminated, truncated, step_info = env.step(action)
        episode.turns.append(Turn(role="assistant", content=action, trainable=True))
        episode.turns.append(Turn(role="user", content=observation))
        episode.reward = float(reward)
        episode.info["steps"] += 1
        episode.info["last_info"] = step_info
        if terminated or truncated:
            episode.terminated, episode.truncated = bool(terminated), bool(truncated)
            return episode
    episode.truncated = True
    episode.info["actions_exhausted"] = True
    return episode


def prompt_echo(task: Task) -> str:
    """The task's prompt as an answer: every message's content, joined by newlines."""
    return "\n".join(str(m.get("content", "")) for m in task.prompt)


def _content(task: Task) -> str:
    """What a task asks and expects (its id may name the seed): prompt, reference,
    metadata."""
    return json.dumps([task.prompt, task.reference, task.metadata], sort_keys=True,
                      ensure_ascii=False, default=str)


def _fingerprint(task: Task) -> str:
    text = json.dumps(task.prompt, sort_keys=True, ensure_ascii=False)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()


class _Check:
    """Accumulates values and problems for one domain."""

    def __init__(self, domain: Domain) -> None:
        self.domain = domain
        self.problems: list[str] = []
        self.deterministic = True

    def _single(self, task: Task, answer: str, what: str) -> Score | None:
        try:
            first = self.domain.score(task, answer)
            second = self.domain.score(task, answer)
        except Exception as e:
            self.problems.append(f"{what} on task {task.id} raised {type(e).__name__}: {e}")
            return None
        if first.to_dict() != second.to_dict():
            self.deterministic = False
            self.problems.append(f"{what} on task {task.id}: two scorings differ")
        if not first.ok:
            self.problems.append(f"{what} on task {task.id}: score error {first.error}")
        return first

    def _episode(self, task: Task, actions: list[str], what: str) -> float | None:
        try:
            rewards = []
            for _ in range(2):
                with self.domain.env(task) as env:
                    plan = [env.done_action if a == _DONE else a for a in actions]
                    rewards.append(run_actions(env, plan, seed=0, task_id=task.id).reward)
        except Exception as e:
            self.problems.append(f"{what} on task {task.id} raised {type(e).__name__}: {e}")
            return None
        if rewards[0] != rewards[1]:
            self.deterministic = False
            self.problems.append(f"{what} on task {task.id}: rewards differ {rewards}")
        return rewards[0]

    def oracle(self, task: Task) -> float:
        if self.domain.multi_turn:
            value = self._episode(task, list(self.domain.oracle_actions(task)), "oracle")
            return 0.0 if value is None else value
        score = self._single(task, self.domain.oracle(task), "oracle")
        if score is None:
            return 0.0
        if self.domain.binary and score.passed is not True:
            self.problems.append(f"oracle on task {task.id}: passed={score.passed}, want True")
        return score.reward

    def bad(self, task: Task, answers: Sequence[str], what: str) -> list[float]:
        """Rewards of answers that must earn 0.0 (an error counts as 1.0: a failure)."""
        values: list[float | None] = []
        answers = [prompt_echo(task) if a == PROMPT_ECHO else a for a in answers]
        if self.domain.multi_turn:
            plans = [[_DONE]] if what == "empty" else [[a, _DONE] for a in answers]
            values = [self._episode(task, plan, what) for plan in plans]
        else:
            for answer in answers:
                score = self._single(task, answer, what)
                if score is not None and self.domain.binary and score.passed is not False:
                    self.problems.append(f"{what} on task {task.id}: passed={score.passed}")
                values.append(None if score is None else score.reward)
        return [1.0 if v is None else v for v in values]


def check_domain(
    domain: Domain, n: int = 8, seed: int = 0, *, difficulty: int | Sequence[int] | None = None
) -> CheckReport:
    """Run the shared checks on ``n`` tasks of ``domain`` (see the module docstring).

    Args:
        domain: the domain to check.
        n: tasks to check (>= 1).
        seed: seed of the task sample.
        difficulty: restrict to these difficulties; None = the domain's default mix.

    Returns:
        a ``CheckReport``; ``ok`` is False with ``problems`` filled when any check fails.

    Raises:
        ValueError: ``n < 1``.
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    start = time.perf_counter()
    check = _Check(domain)
    tasks: list[Task] = []
    try:
        for split in ("test", "train"):
            tasks = list(domain.tasks(split, n=n, seed=seed, difficulty=difficulty))
            if tasks:
                again = list(domain.tasks(split, n=n, seed=seed, difficulty=difficulty))
                if [t.to_dict() for t in tasks] != [t.to_dict() for t in again]:
                    check.deterministic = False
                    check.problems.append(f"tasks({split!r}, seed={seed}) differ between calls")
                if domain.split_sizes().get(split) is None:  # procedural: seeds matter
                    other = list(domain.tasks(split, n=n, seed=seed + 1, difficulty=difficulty))
                    if [_content(t) for t in other] == [_content(t) for t in tasks]:
                        check.problems.append(
                            f"tasks({split!r}) gives the same tasks for seeds {seed} and "
                            f"{seed + 1}: a procedural domain must use its seed (training "
                            "asks for fresh tasks with a new seed every draw)")
                break
    except Exception as e:
        check.problems.append(f"tasks() raised {type(e).__name__}: {e}")
    if not tasks and not check.problems:
        check.problems.append("the domain yielded no tasks in either split")

    oracle = [check.oracle(t) for t in tasks]
    empty = [v for t in tasks for v in check.bad(t, EMPTY_ANSWERS, "empty")]
    garbage = [v for t in tasks for v in check.bad(t, GARBAGE_ANSWERS, "garbage")]
    for name, values, want in (("oracle", oracle, 1.0), ("empty", empty, 0.0),
                               ("garbage", garbage, 0.0)):
        wrong = [v for v in values if abs(v - want) > _TOL]
        if wrong:
            check.problems.append(f"{name} rewards {wrong[:4]} on {len(wrong)} cases, want {want}")
    disjoint = _check_disjoint(domain, n, seed, check.problems)

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else 0.0

    return CheckReport(
        id=domain.id,
        n=len(tasks),
        oracle_mean=mean(oracle),
        empty_mean=mean(empty),
        garbage_mean=mean(garbage),
        deterministic=check.deterministic,
        disjoint=disjoint,
        ok=not check.problems,
        problems=check.problems,
        seconds=time.perf_counter() - start,
    )


def _check_disjoint(domain: Domain, n: int, seed: int, problems: list[str]) -> bool | None:
    try:
        sizes = domain.split_sizes()
        seen: dict[str, tuple[set[str], set[str]]] = {}
        for split in ("train", "test"):
            k = sizes.get(split)
            if k == 0:
                return None
            tasks = list(domain.tasks(split, n=k if k is not None else 4 * n, seed=seed))
            if not tasks:
                return None
            seen[split] = ({t.id for t in tasks}, {_fingerprint(t) for t in tasks})
    except Exception as e:
        problems.append(f"train/test disjointness check raised {type(e).__name__}: {e}")
        return False
    shared_ids = seen["train"][0] & seen["test"][0]
    shared_prompts = seen["train"][1] & seen["test"][1]
    if shared_ids or shared_prompts:
        problems.append(
            f"train and test overlap: {len(shared_ids)} ids "
            f"(e.g. {sorted(shared_ids)[:3]}), {len(shared_prompts)} prompts"
        )
        return False
    return True
