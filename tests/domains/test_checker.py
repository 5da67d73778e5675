import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from polyrl.domains import Domain, Env, check_domain, run_actions
from polyrl.domains.checker import EMPTY_ANSWERS, GARBAGE_ANSWERS, PROMPT_ECHO, prompt_echo
from polyrl.domains.math import Arithmetic
from polyrl.errors import GraderError
from polyrl.types import Score, Task


class Toy(Arithmetic):
    family = "toy"

    def __init__(self, name="ok"):
        super().__init__(f"toy/{name}-v1")


def test_a_correct_domain_passes():
    report = check_domain(Toy(), n=6)
    assert report.ok, report.problems
    assert (report.n, report.oracle_mean, report.empty_mean, report.garbage_mean) == (6, 1, 0, 0)
    assert report.deterministic and report.disjoint is True
    d = report.to_dict()
    assert {"id", "n", "oracle_mean", "empty_mean", "deterministic", "ok"} <= set(d)


def test_wrong_oracle_fails():
    class BadOracle(Toy):
        def oracle(self, task):
            return str(int(task.reference) + 1)

    report = check_domain(BadOracle("bad"), n=4)
    assert not report.ok and report.oracle_mean < 1
    assert any("oracle rewards" in p for p in report.problems)


def test_reward_for_empty_answer_fails():
    class Generous(Toy):
        def score(self, task, answer):
            s = super().score(task, answer)
            return Score(reward=max(s.reward, 0.25), components=s.components, passed=s.passed)

    report = check_domain(Generous("gen"), n=3)
    assert not report.ok
    assert report.empty_mean == pytest.approx(0.25) and report.garbage_mean == pytest.approx(0.25)


def test_reward_for_an_echoed_prompt_fails():
    class ReadsPromptNumbers(Toy):  # dense credit for any digits: an echo earns it
        def score(self, task, answer):
            text = answer if isinstance(answer, str) else answer.text
            s = super().score(task, answer)
            if s.reward < 1.0 and any(ch.isdigit() for ch in text):
                return Score(reward=0.1, components=s.components, passed=False)
            return s

    report = check_domain(ReadsPromptNumbers("echo"), n=3)
    assert not report.ok and report.garbage_mean == pytest.approx(0.1 / 4)
    assert any("garbage rewards" in p for p in report.problems)


def test_nondeterministic_scoring_and_tasks_fail():
    counter = itertools.count()

    class Flaky(Toy):
        def score(self, task, answer):
            s = super().score(task, answer)
            s.components["calls"] = float(next(counter))
            return s

    report = check_domain(Flaky("flaky"), n=2)
    assert not report.deterministic and not report.ok

    class Unseeded(Toy):
        def tasks(self, split, *, difficulty=None, n=None, seed=0):
            return super().tasks(split, difficulty=difficulty, n=n, seed=next(counter))

    report = check_domain(Unseeded("unseeded"), n=2)
    assert not report.deterministic
    assert any("differ between calls" in p for p in report.problems)


def test_raising_scorer_fails_without_raising():
    class Broken(Toy):
        def score(self, task, answer):
            raise GraderError("verifier binary missing")

    report = check_domain(Broken("broken"), n=2)
    assert not report.ok
    assert any("GraderError: verifier binary missing" in p for p in report.problems)


def test_binary_domain_must_set_passed():
    class NoVerdict(Toy):
        def score(self, task, answer):
            s = super().score(task, answer)
            s.passed = None
            return s

    report = check_domain(NoVerdict("noverdict"), n=2)
    assert any("passed=None, want True" in p for p in report.problems)


class Listed(Domain):
    """A bounded domain whose splits are explicit lists (to test the disjointness check)."""

    id = "toy/listed-v1"
    family = "toy"

    def __init__(self, train_ids, test_ids):
        self.ids = {"train": train_ids, "test": test_ids}

    def _task(self, split, tid):
        return Task(tid, self.id, split, 1, [{"role": "user", "content": f"say {tid}"}], tid)

    def tasks(self, split, *, difficulty=None, n=None, seed=0) -> Iterator[Task]:
        for tid in self.ids[split][:n]:
            yield self._task(split, tid)

    def split_sizes(self):
        return {k: len(v) for k, v in self.ids.items()}

    def score(self, task, answer):
        text = answer if isinstance(answer, str) else answer.text
        return Score(reward=float(text.strip() == task.reference))


def test_overlapping_splits_fail_and_one_split_is_not_judged():
    assert check_domain(Listed(["a", "b"], ["c"])).disjoint is True
    report = check_domain(Listed(["a", "b"], ["b", "c"]))
    assert report.disjoint is False and not report.ok
    assert any("overlap: 1 ids" in p for p in report.problems)
    report = check_domain(Listed(["a", "b"], []))
    assert report.ok and report.disjoint is None and report.n == 2  # falls back to train


def test_empty_and_garbage_answers_have_no_digits():
    for text in EMPTY_ANSWERS + GARBAGE_ANSWERS:
        assert not any(ch.isdigit() for ch in text)
    assert PROMPT_ECHO in GARBAGE_ANSWERS  # replaced by each task's own prompt
    task = next(Toy().tasks("test", n=1))
    assert prompt_echo(task) == task.prompt[0]["content"]


class GuessEnv(Env):
    """Guess a secret digit in at most 3 tries; ``done`` gives up."""

    def __init__(self, secret: int, done_rewards: float = 0.0):
        self.secret, self.done_rewards, self.tries, self.closed = secret, done_rewards, 0, False

    def reset(self, *, seed=None) -> tuple[str, dict[str, Any]]:
        self.tries = 0
        return "guess a digit", {}

    def step(self, action):
        self.tries += 1
        if action == self.done_action:
            return "bye", self.done_rewards, True, False, {}
        if action.strip() == str(self.secret):
            return "right", 1.0, True, False, {"tries": self.tries}
        return "wrong", 0.0, False, self.tries >= 3, {"tries": self.tries}

    def close(self):
        self.closed = True


class Guess(Domain):
    id = "toy/guess-v1"
    family = "toy"
    multi_turn = True

    def __init__(self, done_rewards=0.0):
        self.done_rewards = done_rewards

    def split_sizes(self):
        return {"train": 0, "test": None}

    def tasks(self, split, *, difficulty=None, n=None, seed=0):
        for i in range(n if split == "test" else 0):
            secret = (seed + i) % 10
            yield Task(f"{split}/{i}", self.id, split, 1,
                       [{"role": "user", "content": "guess"}], str(secret))

    def env(self, task):
        return GuessEnv(int(task.reference), self.done_rewards)

    def oracle_actions(self, task):
        return ["7" if task.reference != "7" else "8", task.reference]  # one miss, then right

    def score(self, task, answer):
        return Score(reward=float(answer_text_last(answer) == task.reference))


def answer_text_last(answer):
    text = answer if isinstance(answer, str) else answer.text
    return text.strip().splitlines()[-1] if text.strip() else ""


def test_run_actions_replays_until_the_episode_ends():
    env = GuessEnv(secret=4)
    ep = run_actions(env, ["1", "4", "9"], seed=0, task_id="t")
    assert ep.reward == 1.0 and ep.terminated and not ep.truncated
    assert [(t.role, t.content, t.trainable) for t in ep.turns] == [
        ("assistant", "1", True), ("user", "wrong", False),
        ("assistant", "4", True), ("user", "right", False),
    ]  # "9" is never sent
    assert ep.info["steps"] == 2 and ep.info["initial_observation"] == "guess a digit"
    ep = run_actions(GuessEnv(secret=4), ["1"])
    assert ep.truncated and ep.info["actions_exhausted"] and ep.reward == 0.0
    ep = run_actions(GuessEnv(secret=4), ["1", "2", "3", "4"])
    assert ep.truncated and not ep.terminated and "actions_exhausted" not in ep.info


def test_multi_turn_domain_is_checked_through_its_env():
    report = check_domain(Guess(), n=5)
    assert report.ok, report.problems
    assert report.oracle_mean == 1.0 and report.empty_mean == 0.0 and report.disjoint is None
    report = check_domain(Guess(done_rewards=1.0), n=3)  # giving up must not pay
    assert not report.ok and report.empty_mean == 1.0


def test_n_must_be_positive():
    with pytest.raises(ValueError, match="n must be >= 1"):
        check_domain(Toy(), n=0)


def test_a_procedural_domain_that_ignores_its_seed_fails():
    """Training draws fresh tasks with a new seed every time: a generator that ignored
    its seed trained on the same n tasks forever, and the check said ok."""
    class SeedBlind(Toy):
        def tasks(self, split, *, difficulty=None, n=None, seed=0):
            return super().tasks(split, difficulty=difficulty, n=n, seed=0)

    report = check_domain(SeedBlind("blind"), n=6, seed=3)
    assert not report.ok
    assert any("same tasks for seeds 3 and 4" in p for p in report.problems), report.problems
    assert check_domain(Toy(), n=6, seed=3).ok  # the same domain, seed used


@pytest.mark.parametrize("reward", [float("nan"), float("inf"), 1.5, -0.2])
def test_a_reward_outside_0_1_is_a_grader_error_not_a_reward(reward):
    """A domain's own score() (a plugin's) returning NaN stopped the whole evaluation
    after every sample was scored, with an error naming neither domain nor task; any
    reward outside [0, 1] would have been trained on."""
    class Broken(Toy):
        def score(self, task, answer):
            return Score(reward=reward)

    domain = Broken("broken")
    task = next(iter(domain.tasks("test", n=1)))
    score = domain.safe_score(task, "1")
    assert score.error == "GraderError" and not score.ok and score.reward == 0.0
    assert "toy/broken-v1" in score.error_message and task.id in score.error_message
    assert Toy().safe_score(task, domain.oracle(task)).ok
