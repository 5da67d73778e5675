"""Completion -> module extraction and lint counting (pure, no sandbox)."""

from __future__ import annotations

from polyrl.domains.code.parse import extract_solution, fenced_blocks, lint_warnings, prompt_prefix

PROMPT = 'from typing import List\n\n\ndef helper(x):\n    return x\n\n\ndef f(xs: List[int]) -> int:\n    """Sum."""\n'


def test_continuation_appends_body_to_prompt() -> None:
    assert extract_solution("    return sum(xs)\n", PROMPT, "f") == PROMPT + "    return sum(xs)\n"


def test_fenced_full_function_keeps_prompt_imports_and_helpers() -> None:
    text = "Here:\n```python\ndef f(xs):\n    return helper(sum(xs))\n```\nDone."
    sol = extract_solution(text, PROMPT, "f")
    assert sol.startswith("from typing import List")
    assert "def helper(x)" in sol and '"""Sum."""' not in sol
    assert sol.rstrip().endswith("return helper(sum(xs))")


def test_last_defining_block_wins_and_unterminated_fence_runs_to_end() -> None:
    text = "```python\ndef f(xs):\n    return 1\n```\nbetter:\n```py\ndef f(xs):\n    return 2\n"
    assert extract_solution(text, PROMPT, "f").rstrip().endswith("return 2")
    assert fenced_blocks("```\nA\n```\n```bash\nls\n```") == ["A\n"]


def test_one_liner_stops_at_newline_and_stop_markers() -> None:
    assert extract_solution("x*3\ngarbage", "def f(x): return ", "f", ["\n"]) == \
        "def f(x): return x*3"
    cont = "    return 1\nif __name__ == '__main__':\n    f()\n"
    assert extract_solution(cont, "def f():\n", "f") == "def f():\n    return 1"


def test_prompt_prefix_drops_only_the_entry_point_stub() -> None:
    pre = prompt_prefix(PROMPT, "f")
    assert "def helper" in pre and "def f(" not in pre


def test_lint_warnings_counts_pyflakes_messages() -> None:
    assert lint_warnings("def f(x):\n    return x\n") == 0
    assert lint_warnings("import os\ndef f(x):\n    return y\n") == 2  # unused os, undefined y
