"""Read financial answers: the final answer line, items, numbers with scale and sign.

Formats understood (documented once, tested in ``tests/domains/test_finance_answer.py``):
    - thousands separators and currency: ``$1,234.5`` -> 1234.5;
    - parentheses as negatives: ``(1,234.5)`` -> -1234.5; a leading ``-``/``−`` too;
    - a scale word after the number: ``thousand(s)``/``k``, ``million(s)``/``m``/``mn``,
      ``billion(s)``/``bn``/``b`` -> multiplier 1e3 / 1e6 / 1e9;
    - a percent sign or the word ``percent`` -> scale ``percent``;
    - an exponent: ``-1.26e7`` -> -12,600,000;
    - a currency word around the number: ``usd``, ``dollar(s)``, ``eur``, ``euro(s)`` ...;
    - several answers separated by `` | `` (or newlines), or a JSON list.
The final answer is the text after the last ``Answer:``, else the last ``\\boxed{}``,
else the last non-empty line; a ``\\boxed{...}`` wrapping the whole answer line
(``Answer: \\boxed{-12.6}``) is unwrapped.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

SCALES: dict[str, float] = {"": 1.0, "thousand": 1e3, "million": 1e6, "billion": 1e9,
                            "percent": 1.0}
"""Scale name -> multiplier (``percent`` keeps the number in percent units)."""

_SCALE_WORDS = {
    "thousand": "thousand", "thousands": "thousand", "k": "thousand", "000s": "thousand",
    "million": "million", "millions": "million", "m": "million", "mn": "million",
    "mm": "million", "billion": "billion", "billions": "billion", "bn": "billion",
    "b": "billion", "percent": "percent", "%": "percent", "pct": "percent",
}
_NUMBER = re.compile(
    r"(?P<open>\()?\s*(?P<sign>[-−–])?\s*[$€£¥]?\s*(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
    r"|\.\d+)(?P<exp>[eE][-+]?\d+)?\s*(?P<close>\))?\s*(?P<pct>%)?")
_CURRENCY_WORDS = frozenset({"usd", "us", "eur", "gbp", "rmb", "dollar", "dollars", "euro",
                             "euros", "pound", "pounds"})
_ANSWER = re.compile(r"answer\s*(?:is)?\s*[:：]\s*", re.IGNORECASE)


@dataclass(frozen=True)
class Value:
    """A number read from an answer item.

    Attributes:
        value: the signed number as written (scale not applied).
        scale: ``""``, ``"thousand"``, ``"million"``, ``"billion"`` or ``"percent"``;
            ``""`` means no scale was written.
        decimals: digits after the decimal point as written.
    """

    value: float
    scale: str
    decimals: int


def final_answer(text: str) -> str:
    """The final-answer part of a completion (see module docstring); "" when blank."""
    matches = list(_ANSWER.finditer(text))
    if matches:
        rest = text[matches[-1].end():].strip()
        line = rest.splitlines()[0].strip() if rest else ""
        boxed = re.fullmatch(r"\\boxed\s*\{(.*)\}\.?", line)
        return boxed.group(1).strip() if boxed else line
    boxed = text.rfind("\\boxed{")
    if boxed != -1:
        depth, start = 0, boxed + len("\\boxed{")
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                if depth == 0:
                    return text[start:i].strip()
                depth -= 1
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def split_items(answer: str) -> list[str]:
    """Answer items: a JSON list, or text split on `` | `` or newlines."""
    answer = answer.strip()
    if answer.startswith("[") and answer.endswith("]"):
        try:
            items = json.loads(answer)
            if isinstance(items, list):
                return [str(x).strip() for x in items if str(x).strip()]
        except json.JSONDecodeError:
            pass
    parts = re.split(r"\s*\|\s*|\n+", answer)
    return [p.strip() for p in parts if p.strip()]


def parse_value(item: str) -> Value | None:
    """The number an item states, or None when the item is not a number.

    An item is a number when, besides one number, it holds only a currency sign,
    a scale word, a percent sign and punctuation (``"$ (1,234.5) million"``).
    """
    text = item.strip().rstrip(".")
    m = _NUMBER.search(text)
    if m is None:
        return None
    rest = (text[: m.start()] + " " + text[m.end():]).lower()
    scale = "percent" if m.group("pct") else ""
    words = re.findall(r"[a-z%0-9]+", rest)
    for w in words:
        if w in _SCALE_WORDS and not scale:
            scale = _SCALE_WORDS[w]
        elif w in _SCALE_WORDS or w in _CURRENCY_WORDS:
            continue
        else:
            return None
    raw = m.group("num").replace(",", "")
    value = float(raw + (m.group("exp") or ""))
    negative = bool(m.group("sign")) or bool(m.group("open") and m.group("close"))
    decimals = len(raw.split(".")[1]) if "." in raw else 0
    return Value(-value if negative else value, scale, decimals)


def format_number(value: float, decimals: int = 2) -> str:
    """``value`` with thousands separators and at most ``decimals`` decimals (no trailing 0s)."""
    text = f"{value:,.{decimals}f}"
    if "." in text:
        text = text.rstrip("0").rstrip(".")
    return "0" if text in ("-0", "") else text
