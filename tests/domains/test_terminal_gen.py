"""terminal/gen-v1: generated tasks pass with their oracle and fail with an empty episode."""

from __future__ import annotations

from pathlib import Path

import pytest

from polyrl.domains.checker import check_domain, run_actions
from polyrl.domains.terminal.domain import TerminalGenDomain
from polyrl.domains.terminal.gen import CATEGORIES, generate


def test_generation_is_seeded_and_split() -> None:
    a = generate("text", 3, seed=1, index=4)
    assert a == generate("text", 3, seed=1, index=4)
    assert a != generate("text", 3, seed=2, index=4)
    assert a[1]["tests/check.py"].count("lambda:") == 3


def test_check_domain_passes(tmp_path: Path) -> None:
    report = check_domain(TerminalGenDomain(cache_dir=tmp_path), n=3)
    assert report.ok, report.problems


@pytest.mark.slow
def test_forty_tasks_across_categories(tmp_path: Path) -> None:
    domain = TerminalGenDomain(cache_dir=tmp_path)
    tasks = list(domain.tasks("train", n=42, seed=0))
    assert {t.metadata["category"] for t in tasks} == set(CATEGORIES)
    assert {t.difficulty for t in tasks} == {1, 2, 3, 4, 5}
    assert len(list(tmp_path.iterdir())) == 42  # written as task directories
    for task in tasks:
        with domain.env(task) as env:
            oracle = run_actions(env, domain.oracle_actions(task))
        with domain.env(task) as env:
            empty = run_actions(env, [env.done_action])
        assert oracle.reward == 1.0, (task.id, oracle.turns[-1].content)
        assert empty.reward == 0.0, (task.id, empty.turns[-1].content)



def test_cached_task_dirs_of_another_generator_are_not_reused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Task dirs were cached by task id (crc of task.yaml): checks fixed in the generator
    # kept running their stale cached copy, holes included.
    import polyrl.domains.terminal.domain as module

    fresh = next(TerminalGenDomain(cache_dir=tmp_path / "fresh").tasks("train", n=1, seed=3))
    real = module.generate

    def older(*args: object) -> tuple[str, dict, str]:
        task_id, files, split = real(*args)
        return task_id, {**files, "tests/check.py": "print('ok 1 - stale')\n"}, split

    monkeypatch.setattr(module, "generate", older)
    stale = next(TerminalGenDomain(cache_dir=tmp_path).tasks("train", n=1, seed=3))
    assert stale.metadata["tests"] != fresh.metadata["tests"]
    monkeypatch.setattr(module, "generate", real)
    again = next(TerminalGenDomain(cache_dir=tmp_path).tasks("train", n=1, seed=3))
    assert again.id == fresh.id and again.metadata["tests"] == fresh.metadata["tests"]


def _generated(tmp_path: Path, category: str, text: str, k: int) -> list:
    """The first ``k`` difficulty-1 tasks of ``category`` whose task.yaml holds ``text``."""
    from polyrl.domains.terminal.gen import write_task_dir
    from polyrl.domains.terminal.taskdir import load_task_dir

    out = []
    for index in range(2000):
        task_id, files, split = generate(category, 1, 0, index)
        if text in files["task.yaml"]:
            path = write_task_dir(tmp_path / task_id, files)
            out.append(load_task_dir(path, domain="terminal/gen-v1", split=split,
                                     task_id=task_id))
            if len(out) == k:
                break
    return out


HEDGE_STATS = """cat > stats.py <<'EOF'
for k in ("count", "sum", "min", "max"):
    for v in range(5000):
        print(f"{k}={v}")
for c in range(50000):
    print(f"mean={round(c / 100, 2)}")
EOF"""


def test_a_stats_script_printing_every_candidate_fails(tmp_path: Path) -> None:
    # One fixed command (no reading, no fixing) passed all 207 train debug tasks.
    domain = TerminalGenDomain(cache_dir=tmp_path)
    tasks = _generated(tmp_path, "debug", "stats.py", 4)
    for task in tasks:
        assert domain.score(task, task.reference).reward == 1.0
        assert domain.score(task, HEDGE_STATS).reward == 0.0


def test_deleting_the_repository_fails_the_tag_step(tmp_path: Path) -> None:
    # Both sides of the tag check were '' once repo/ was gone: 'rm -rf repo' passed
    # every difficulty-1 tag task (and 1/d of any git task with a tag step).
    domain = TerminalGenDomain(cache_dir=tmp_path)
    tasks = _generated(tmp_path, "git", "create a tag", 3)
    for task in tasks:
        assert domain.score(task, task.reference).reward == 1.0
        for attack in ("rm -rf repo", "rm -rf repo/.git"):
            assert domain.score(task, attack).reward == 0.0


def test_a_fixed_product_count_is_rarely_right(tmp_path: Path) -> None:
    # The products count was 5 or 6 in 84% of tasks (6 product names): 'echo 5 >
    # products.txt', without reading stock.csv, passed 44% of these steps.
    import random
    from collections import Counter

    from polyrl.domains.terminal.steps_b import d_products

    counts = Counter(d_products(random.Random(i)).check.rsplit("==", 1)[1].strip()
                     for i in range(1000))
    assert max(counts.values()) < 200, counts
    domain = TerminalGenDomain(cache_dir=tmp_path)
    for task in _generated(tmp_path, "data", "distinct products", 3):
        assert domain.score(task, task.reference).reward == 1.0
        assert domain.score(task, "echo 0 > products.txt").reward == 0.0
