"""``terminal/gen-v1`` (generated shell tasks) and ``terminal/tbench-v1`` (a task folder).

Both are multi-turn: ``env(task)`` is a ``TerminalEnv``; ``oracle_actions`` =
``[solution.sh, "done"]``. ``score(task, answer)`` replays an ``Episode``'s assistant
turns through a fresh env (then ``done``); a plain string is run as one command
(so ``score(task, oracle(task))`` runs the solution script).
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from polyrl.domains.base import Answer, Domain, Env, procedural_levels
from polyrl.domains.terminal.env import DONE, TerminalEnv
from polyrl.domains.terminal.gen import CATEGORIES, cache_root, generate, write_task_dir
from polyrl.domains.terminal.taskdir import load_task_dir, scan_tasks
from polyrl.types import Episode, Score, Task


class _ShellDomain(Domain):
    """Shared env/oracle/score of the terminal domains."""

    family = "terminal"
    multi_turn = True
    binary = True

    def __init__(self, sandbox: Any = None) -> None:
        self.sandbox = sandbox

    def env(self, task: Task) -> Env:
        """A fresh ``TerminalEnv`` (sandbox session) for ``task``."""
        return TerminalEnv(task, self.sandbox)

    def oracle_actions(self, task: Task) -> list[str]:
        """Run ``solution.sh`` as one command, then finish."""
        return [task.reference, DONE]

    def score(self, task: Task, answer: Answer) -> Score:
        """Replay ``answer`` in a fresh env and run the tests (see module docstring).

        Raises:
            SandboxError: the sandbox failed. GraderError: setup or tests are broken.
        """
        if isinstance(answer, Episode):
            actions = [t.content for t in answer.turns if t.role == "assistant"]
        else:
            text = answer if isinstance(answer, str) else answer.text
            actions = [text] if text.strip() else []
        with self.env(task) as env:
            env.reset()
            for action in [*actions, DONE]:
                _, _, term, trunc, info = env.step(action)
                if term or trunc:
                    return info["score"]
        raise AssertionError("unreachable: the done action always ends the episode")


class TerminalGenDomain(_ShellDomain):
    """Generated shell tasks in seven categories; difficulty = number of steps.

    Args:
        sandbox: a ``polyrl.sandbox.Sandbox``; default a shared one.
        cache_dir: where task directories are written (default ``gen.cache_root()``).
    """

    id = "terminal/gen-v1"
    description = "generated shell tasks: files, text, scripts, archives, git, data, debug"

    def __init__(self, sandbox: Any = None, cache_dir: str | Path | None = None) -> None:
        super().__init__(sandbox)
        self.cache_dir = Path(cache_dir) if cache_dir else None

    def tasks(
        self,
        split: str,
        *,
        difficulty: int | Sequence[int] | None = None,
        n: int | None = None,
        seed: int = 0,
    ) -> Iterator[Task]:
        """``n`` tasks of ``split``, cycling categories and ``difficulty`` (default 1..5)."""
        levels = procedural_levels(self.id, split, difficulty, n)
        root = self.cache_dir or cache_root()
        made, index = 0, 0
        while made < n:
            category = CATEGORIES[index % len(CATEGORIES)]
            level = levels[(index // len(CATEGORIES)) % len(levels)]
            task_id, files, task_split = generate(category, level, seed, index)
            index += 1
            if task_split != split:
                continue
            # the folder is named by its content too: a task dir cached by an older
            # generator (same task.yaml, other checks) is never reused
            digest = zlib.crc32(json.dumps(files, sort_keys=True).encode())
            path = write_task_dir(root / f"{task_id}-{digest:08x}", files)
            made += 1
            yield load_task_dir(path, domain=self.id, split=split, task_id=task_id)


class TbenchDomain(_ShellDomain):
    """Tasks from a folder of Terminal-Bench-layout task directories.

    Args:
        path: the folder (each subfolder with a ``task.yaml`` is a task).
        sandbox: a ``polyrl.sandbox.Sandbox``; default a shared one.
        train_fraction: share of tasks (by sorted name) put in ``train``.

    ``skipped`` maps task names to why they cannot run in the sandbox.
    """

    id = "terminal/tbench-v1"
    description = "Terminal-Bench-layout task folder (tasks needing containers are skipped)"

    def __init__(self, path: str | Path, sandbox: Any = None,
                 train_fraction: float = 0.0) -> None:
        super().__init__(sandbox)
        self.path = Path(path)
        self.train_fraction = train_fraction
        self._tasks: list[Task] | None = None
        self.skipped: dict[str, str] = {}

    def _all(self) -> list[Task]:
        if self._tasks is None:
            tasks, self.skipped = scan_tasks(self.path, domain=self.id)
            n_train = int(len(tasks) * self.train_fraction)
            for i, t in enumerate(tasks):
                t.split = "train" if i < n_train else "test"
            self._tasks = tasks
        return self._tasks

    def tasks(
        self,
        split: str,
        *,
        difficulty: int | Sequence[int] | None = None,
        n: int | None = None,
        seed: int = 0,
    ) -> Iterator[Task]:
        """Tasks of ``split`` in name order (``seed`` unused)."""
        if split not in ("train", "test"):
            raise ValueError(f"unknown split {split!r}: use 'train' or 'test'")
        want = {difficulty} if isinstance(difficulty, int) else difficulty
        picked = [t for t in self._all() if t.split == split
                  and (want is None or t.difficulty in want)]
        yield from picked[:n] if n is not None else picked

    def split_sizes(self) -> dict[str, int | None]:
        """Tasks per split in the folder."""
        tasks = self._all()
        return {s: sum(1 for t in tasks if t.split == s) for s in ("train", "test")}
