"""Turn a completion into a Python module to test, and count static-analysis warnings.

Completions come in three shapes, all supported:
    1. a chat answer with fenced code blocks (```python ... ```), holding either the
       full function or only its body;
    2. a full function written without fences (``def entry_point(...)`` at column 0);
    3. a continuation of the prompt's code (HumanEval style: the body only).
In 1 (full function) and 2 the prompt's imports and helper definitions are kept
(its stub of the entry point is dropped); in 3 the module is prompt code + completion.
"""

from __future__ import annotations

import ast
import io
import re

_FENCE = re.compile(r"```[ \t]*([\w+-]*)[^\n]*\n(.*?)(?:```|\Z)", re.DOTALL)
_CODE_LANGS = {"", "python", "py", "python3", "py3"}
_CONTINUATION_STOPS = ("\nif __name__", "\nprint(", "\nassert ", "\n```")


def fenced_blocks(text: str) -> list[str]:
    """Python (or untagged) fenced code blocks of ``text``, in order.

    An unterminated last fence (a completion cut at ``max_tokens``) runs to the end.
    """
    return [m.group(2) for m in _FENCE.finditer(text) if m.group(1).lower() in _CODE_LANGS]


def _defines(code: str, entry_point: str) -> bool:
    return re.search(rf"^(async\s+)?def\s+{re.escape(entry_point)}\s*\(", code, re.M) is not None


def prompt_prefix(prompt_code: str, entry_point: str) -> str:
    """``prompt_code`` without its stub of ``entry_point`` (imports, helpers, constants)."""
    try:
        tree = ast.parse(prompt_code)
    except SyntaxError:
        m = re.search(rf"^def\s+{re.escape(entry_point)}\s*\(", prompt_code, re.M)
        return prompt_code[: m.start()] if m else ""
    lines = prompt_code.splitlines(keepends=True)
    drop: set[int] = set()
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == entry_point:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            drop.update(range(start - 1, node.end_lineno or node.lineno))
    return "".join(line for i, line in enumerate(lines) if i not in drop)


def truncate(text: str, stops: tuple[str, ...] | list[str]) -> str:
    """``text`` cut at the first occurrence of any stop string."""
    cut = len(text)
    for s in stops:
        i = text.find(s)
        if i != -1:
            cut = min(cut, i)
    return text[:cut]


def extract_solution(
    completion: str, prompt_code: str, entry_point: str, stop: list[str] | None = None
) -> str:
    """The Python module to test for ``completion``.

    Args:
        completion: the model's text (chat answer or continuation).
        prompt_code: the code the prompt ends with (signature, docstring, helpers).
        entry_point: the function under test.
        stop: extra stop strings for continuations (e.g. ``["\\n"]`` for one-liners).

    Returns:
        Python source (possibly invalid: compiling it is the test's job).
    """
    blocks = fenced_blocks(completion)
    if blocks:
        full = [b for b in blocks if _defines(b, entry_point)]
        if full:
            return prompt_prefix(prompt_code, entry_point) + "\n" + full[-1]
        return prompt_code + blocks[0]
    if _defines(completion, entry_point):
        return prompt_prefix(prompt_code, entry_point) + "\n" + completion
    return prompt_code + truncate(completion, tuple(stop or ()) + _CONTINUATION_STOPS)


def lint_warnings(source: str) -> int:
    """Number of pyflakes warnings in ``source`` (a syntax error counts as 1).

    pyflakes only parses the code; nothing is executed, so this is safe in-process.
    """
    from pyflakes.api import check
    from pyflakes.reporter import Reporter

    out, err = io.StringIO(), io.StringIO()
    n = check(source, "<solution>", Reporter(out, err))
    return int(n)
