"""Generate shell tasks as Terminal-Bench-layout directories (difficulty = number of steps).

Seven categories: files (paths, permissions, links), text (grep/sed/awk/sort),
scripts, archives (tar/gzip/zip), git, data (csv/json) and debug (fix a buggy
script). A task of difficulty d combines d steps of one category; its check
(``tests/check.py``) prints one TAP line per step, so the reward is the fraction of
steps done, and every step's check is False before the step is done (an empty
episode scores 0). Tasks are written under a cache folder and read back with
``taskdir.load_task_dir``, so generated tasks go through the same loader as
downloaded ones.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile
import zlib
from pathlib import Path

import yaml

from polyrl.domains.terminal.steps_a import ARCHIVES, FILES, SCRIPTS, TEXT, Step
from polyrl.domains.terminal.steps_b import DATA, GIT, debug_steps

CATEGORIES = ("files", "text", "scripts", "archives", "git", "data", "debug")
_POOLS = {"files": FILES, "text": TEXT, "scripts": SCRIPTS, "archives": ARCHIVES,
          "git": GIT, "data": DATA}

CHECK_PRELUDE = '''"""Generated check: one TAP line per requirement."""
import glob, gzip, json, os, subprocess, tarfile, zipfile
os.chdir("/workspace")


def read(p):
    with open(p) as f:
        return f.read()


def mode(p):
    return os.stat(p, follow_symlinks=False).st_mode & 0o777


def sh(cmd):
    return subprocess.run(cmd, shell=True, capture_output=True, text=True, timeout=20).stdout


def pipe(cmd, text):
    return subprocess.run(cmd, shell=True, input=text, capture_output=True, text=True,
                          timeout=20).stdout


'''

CHECK_LOOP = '''
print("1..%d" % len(CHECKS))  # the TAP plan: a report cut short fails what it lacks
for i, (name, fn) in enumerate(CHECKS, 1):
    try:
        ok = bool(fn())
    except Exception:
        ok = False
    print(("ok" if ok else "not ok"), i, "-", name)
'''


def cache_root() -> Path:
    """``$POLYRL_CACHE_DIR/terminal-gen`` (default ``~/.cache/polyrl/terminal-gen``)."""
    base = os.environ.get("POLYRL_CACHE_DIR") or os.path.join(
        os.path.expanduser("~"), ".cache", "polyrl")
    return Path(base) / "terminal-gen-v1"


def make_steps(category: str, difficulty: int, rng: random.Random) -> list[Step]:
    """``difficulty`` distinct steps of ``category``.

    Raises:
        ValueError: unknown category or difficulty outside 1..5.
    """
    if not 1 <= difficulty <= 5:
        raise ValueError(f"difficulty must be in 1..5, got {difficulty}")
    if category == "debug":
        return debug_steps(rng, difficulty)
    if category not in _POOLS:
        raise ValueError(f"unknown category {category!r}; known: {CATEGORIES}")
    return [fn(rng) for fn in rng.sample(_POOLS[category], difficulty)]


def task_files(category: str, difficulty: int, steps: list[Step]) -> dict[str, str]:
    """The files of one task directory (relative path -> text)."""
    lines = "\n".join(f"{i}. {s.instruction}" for i, s in enumerate(steps, 1))
    instruction = f"In /workspace, do the following ({category}):\n{lines}"
    meta = {"instruction": instruction, "difficulty": difficulty, "category": category,
            "max_agent_timeout_sec": 60 + 30 * difficulty, "max_test_timeout_sec": 60,
            "max_turns": 6 + 4 * difficulty, "author": "polyrl generator"}
    checks = "CHECKS = [\n" + "".join(
        f"    ({s.name!r}, lambda: {s.check}),\n" for s in steps) + "]\n"
    setup = "\n".join(s.setup for s in steps if s.setup)
    return {
        "task.yaml": yaml.safe_dump(meta, sort_keys=False, width=1000),
        "setup.sh": f"set -e\ncd /workspace\n{setup}\n" if setup else "",
        "solution.sh": "cd /workspace\n" + "\n".join(s.solution for s in steps if s.solution)
        + "\n",
        "tests/check.py": CHECK_PRELUDE + checks + CHECK_LOOP,
    }


def write_task_dir(root: Path, files: dict[str, str]) -> Path:
    """Write ``files`` into ``root`` atomically (kept when already present)."""
    if (root / "task.yaml").is_file():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=root.parent))
    for rel, text in files.items():
        if not text:
            continue
        path = tmp / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    try:
        tmp.rename(root)
    except OSError:  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)
    return root


def generate(category: str, difficulty: int, seed: int, index: int) -> tuple[str, dict, str]:
    """``(task_id, files, split)`` of generated task ``index`` (split by instruction hash)."""
    rng = random.Random(f"terminal:{seed}:{category}:{difficulty}:{index}")
    files = task_files(category, difficulty, make_steps(category, difficulty, rng))
    digest = zlib.crc32(files["task.yaml"].encode())
    split = "test" if digest % 5 == 0 else "train"
    task_id = f"{category}-d{difficulty}-s{seed}-{index}-{digest:08x}"
    return task_id, files, split
