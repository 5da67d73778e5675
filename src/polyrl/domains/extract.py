"""Shared answer extraction: numbers, ``\\boxed{}``, ``#### 42``, fenced code blocks.

Every domain that grades a free-text answer imports from here, so that the
same completion is read the same way everywhere.

Number rules (documented once, tested in ``tests/domains/test_extract.py``):

- Thousands separators are commas between groups of exactly three digits:
  ``1,234.5`` is 1234.5; ``1,23`` is two numbers (1 and 23).
- A leading ``-`` (or the Unicode minus ``−``) is a sign only when it does not
  follow a digit, letter or closing bracket: in ``16-3`` the last number is 3.
- Fractions ``a/b`` and LaTeX ``\\frac{a}{b}`` (``\\dfrac``, ``\\tfrac``) are exact
  rationals; decimals and ``1e5`` exponents are read exactly too (``Fraction``).
- A percent sign (``%``, ``\\%``, or the word ``percent``) marks the number. An
  answer is read at its face value, marked or not: ``18%`` matches a gold ``18``
  (GSM8K writes the answer to "what percent ..." bare), but ``1800%`` does not. A
  marked answer reads as a percent only where the gold is a percent: a marked gold
  ``12.3%`` matches ``12.3``, ``12.3%`` and its fraction ``0.123``; a bare gold ``0.123``
  does not match ``12.3%``, and a bare ``0.123`` does not match a gold ``12.3``.
- A number with more than ``MAX_DIGITS`` digits, or an exponent past ``+-MAX_DIGITS``,
  is no number (skipped): no answer is that large, and reading ``1e999999999`` exactly
  would take the grader hours (``9`` x 5000 raised ``ValueError`` from ``int``).
- Tolerance: ``|pred - gold| <= rel_tol * max(1, |gold|)`` with
  ``rel_tol = 1e-6`` by default, so ``0.3333333`` matches ``1/3`` but ``0.33``
  does not, and integers must be exact up to about a million.

Answer in ``extract_answer``: the final answer marker wins, whichever its format:
of the last ``\\boxed{...}`` and the last ``#### x`` line, the one written later
(``\\boxed{18} ... #### 19`` reads 19, ``#### 18 ... \\boxed{23}`` reads 23). A marker
must hold exactly one number: ``#### 17 or 18`` is a hedge and reads as no answer;
working shown in it counts from its last ``=`` (``\\boxed{3 \\times 6 = 18}`` reads 18).
Without a marker the answer is the last number in the text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

DEFAULT_REL_TOL = 1e-6
"""Default relative tolerance of ``numbers_match`` (see the module docstring)."""
MAX_DIGITS = 1000
"""Longest digit string, and largest exponent magnitude, read as a number."""

_NUM = (
    r"(?<![\w.)\]}])(?P<sign>-)?\s?\$?\s?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
    r"(?:[eE](?P<exp>[-+]?\d+))?"
    r"(?:\s?/\s?(?P<den>\d+(?:\.\d+)?))?"
    r"(?P<pct>\s?(?:%|percent\b))?"
)
_NUMBER_RE = re.compile(_NUM)
_HASH_RE = re.compile(r"####\s*([^\n]*)")
_FRAC_RE = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")
_FENCE_RE = re.compile(
    r"^[ \t]*```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:(?P<close>^[ \t]*```[ \t]*$)|\Z)", re.M | re.S
)


@dataclass(frozen=True)
class ParsedNumber:
    """A number read from text.

    Attributes:
        value: the exact value (``Fraction``); a percentage keeps its face value
            (``12.3%`` -> 12.3) and sets ``percent``.
        percent: True when written with ``%``/``\\%``/``percent``.
        text: the matched source text, e.g. ``"-1,234.5"``.
    """

    value: Fraction
    percent: bool = False
    text: str = ""

    @property
    def is_integer(self) -> bool:
        """True when the face value is a whole number."""
        return self.value.denominator == 1

    def candidates(self) -> tuple[Fraction, ...]:
        """Values this number may stand for as a gold: face value, plus value / 100 if a
        percent (an answer is only ever read at its face value, see ``numbers_match``)."""
        if self.percent:
            return (self.value, self.value / 100)
        return (self.value,)


def _normalise(text: str) -> str:
    """Unicode minus to ``-``, LaTeX fractions to ``a/b``, ``\\%`` to ``%``, no ``\\!``/``\\,``."""
    text = text.replace("\u2212", "-").replace("\\%", "%").replace("\\$", "$")
    text = text.replace("\\!", "").replace("\\,", ",").replace("{,}", ",")
    prev = None
    while prev != text:  # innermost-first for nested \frac
        prev = text
        text = _FRAC_RE.sub(lambda m: f"({m.group(1).strip()})/({m.group(2).strip()})", text)
    # "(1)/(2)" -> "1/2" when both sides are plain numbers; "-(1)/(2)" keeps its sign
    text = re.sub(r"\((-?[\d.,]+)\)/\(([\d.,]+)\)", r"\1/\2", text)
    return text


def find_numbers(text: str) -> list[ParsedNumber]:
    """All numbers in ``text``, in order (see the module docstring for the rules).

    Returns:
        a list of ``ParsedNumber``; a ``/0`` fraction, and a number past ``MAX_DIGITS``
        (digits or exponent), are skipped (no value).
    """
    out: list[ParsedNumber] = []
    for m in _NUMBER_RE.finditer(_normalise(text)):
        exp = m.group("exp") or "0"
        if max(len(m.group("num")), len(m.group("den") or "")) > MAX_DIGITS or \
                len(exp.lstrip("+-")) > 5 or abs(int(exp)) > MAX_DIGITS:
            continue
        value = Fraction(m.group("num").replace(",", ""))
        if m.group("exp"):
            value *= Fraction(10) ** int(m.group("exp"))
        if m.group("den"):
            den = Fraction(m.group("den"))
            if den == 0:
                continue
            value /= den
        if m.group("sign"):
            value = -value
        out.append(ParsedNumber(value, bool(m.group("pct")), m.group(0).strip()))
    return out


def parse_number(text: str) -> ParsedNumber | None:
    """The last number in ``text`` (``"$1,234.50"`` -> 1234.5), or None when there is none."""
    found = find_numbers(text)
    return found[-1] if found else None


def extract_boxed(text: str) -> str | None:
    """Content of the last ``\\boxed{...}`` (or ``\\fbox{...}``), braces balanced; else None.

    An unclosed final box (truncated completion) yields None.
    """
    starts = [m.end() for m in re.finditer(r"\\(?:boxed|fbox)\s*\{", text)]
    for start in reversed(starts):
        depth = 1
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i]
    return None


def extract_hash_answer(text: str) -> str | None:
    """The text after the last ``####`` marker on its line (GSM8K style), stripped; else None."""
    found = _HASH_RE.findall(text)
    if not found:
        return None
    answer = found[-1].strip()
    return answer or None


def _last_boxed_at(text: str) -> int:
    """Start of the last ``\\boxed{`` whose braces close (-1 when none)."""
    for m in reversed(list(re.finditer(r"\\(?:boxed|fbox)\s*\{", text))):
        depth = 1
        for ch in text[m.end():]:
            depth += {"{": 1, "}": -1}.get(ch, 0)
            if depth == 0:
                return m.start()
    return -1


def _last_hash(text: str) -> tuple[int, str]:
    """Start and content of the last non-empty ``####`` answer line (-1, "" when none)."""
    found = [m for m in _HASH_RE.finditer(text) if m.group(1).strip()]
    return (found[-1].start(), found[-1].group(1).strip()) if found else (-1, "")


def _one_number(text: str) -> ParsedNumber | None:
    """The single number of a marker's content; None when it holds none or several.
    Working shown before a last ``=`` is read past (``\boxed{3 \times 6 = 18}``: 18),
    so only what the marker finally states counts."""
    if "=" in text:
        text = text.rsplit("=", 1)[1]
    found = find_numbers(text)
    return found[0] if len(found) == 1 else None


def extract_answer(text: str) -> ParsedNumber | None:
    """The final numeric answer: the later of the last ``\\boxed{}`` and the last
    ``####`` line, else the last number (rules in the module docstring).

    Returns None when the final marker does not hold exactly one number (``\\boxed{x}``,
    ``#### 17 or 18``) or, with no marker, when the text has no number.
    """
    box_at, (hash_at, marked) = _last_boxed_at(text), _last_hash(text)
    if box_at > hash_at:
        boxed = extract_boxed(text[box_at:])
        return _one_number(_strip_latex_text(boxed or ""))
    if hash_at >= 0:
        return _one_number(marked)
    return parse_number(text)


def after_echo(text: str, shown: str) -> str:
    """The part of ``text`` after the last verbatim copy of ``shown`` (the prompt, or
    the question that ends it), so numbers echoed from the prompt are never read as
    the answer; ``text`` itself when it holds no copy (or ``shown`` is blank).

    An answer stated *before* a restated question (``662502 (you asked: ...)``) counts:
    when nothing after the last copy holds a digit and the text before the first copy
    holds exactly one number, that text is returned. An echoed list or context holds
    several numbers, so echoing the prompt still reads no answer."""
    shown = shown.strip()
    if not shown:
        return text
    at = text.rfind(shown)
    if at < 0:
        return text
    after = text[at + len(shown):]
    if not re.search(r"\d", after):
        before = text[:text.find(shown)]
        if len(re.findall(r"\d[\d,.]*", before)) == 1:
            return before
    return after


def _strip_latex_text(s: str) -> str:
    """Drop ``\\text{...}`` / ``\\mathrm{...}`` units inside a box (``18\\text{ dollars}``)."""
    return re.sub(r"\\(?:text|mathrm|textbf|mbox)\s*\{[^{}]*\}", " ", s)


def numbers_match(
    pred: ParsedNumber | None, gold: ParsedNumber | None, rel_tol: float = DEFAULT_REL_TOL
) -> bool:
    """True when ``pred`` equals ``gold`` under the percent rule and tolerance of this module:
    ``pred`` at its face value against each of ``gold.candidates()``.

    Args:
        pred: the extracted answer (None = no answer, never matches).
        gold: the reference answer.
        rel_tol: relative tolerance; the bound is ``rel_tol * max(1, |gold|)``.
    """
    if pred is None or gold is None:
        return False
    for g in gold.candidates():
        bound = Fraction(str(rel_tol)) * max(Fraction(1), abs(g))  # decimal-exact tolerance
        if abs(pred.value - g) <= bound:
            return True
    return False


def format_number(value: Fraction) -> str:
    """Canonical text of a value: ``68``, ``-3``, ``1234.5``, or ``1/3`` (no finite decimal)."""
    if value.denominator == 1:
        return str(value.numerator)
    den = value.denominator
    while den % 2 == 0:
        den //= 2
    while den % 5 == 0:
        den //= 5
    if den != 1:
        return f"{value.numerator}/{value.denominator}"
    places = 0
    while (value * 10**places).denominator != 1:
        places += 1
    return f"{float(value):.{places}f}" if places <= 15 else str(value)


def positional_match(pred: str, gold: str, *, align: str = "left") -> float:
    """Dense partial credit: fraction of positions where ``pred`` and ``gold`` agree.

    ``matches / max(len(pred), len(gold))`` with the strings aligned at the start
    (``align="left"``) or the end (``"right"``, place value for integers). Both
    empty gives 1.0; one empty gives 0.0. E.g. ``("69", "68")`` -> 0.5;
    ``("168", "68", align="right")`` -> 2/3.

    Raises:
        ValueError: ``align`` is not ``"left"`` or ``"right"``.
    """
    if align not in ("left", "right"):
        raise ValueError(f"align must be 'left' or 'right', got {align!r}")
    if not pred and not gold:
        return 1.0
    if align == "right":
        pred, gold = pred[::-1], gold[::-1]
    matches = sum(a == b for a, b in zip(pred, gold, strict=False))
    return matches / max(len(pred), len(gold))


@dataclass(frozen=True)
class CodeBlock:
    """One fenced code block: ``language`` (lower-case, ``""`` if none), ``code``, ``closed``."""

    language: str
    code: str
    closed: bool = True


def extract_code_blocks(text: str) -> list[CodeBlock]:
    """All fenced (triple-backtick) code blocks in ``text``, in order.

    An unterminated last fence (a completion cut at ``max_tokens``) is returned
    with ``closed=False`` and runs to the end of the text.
    """
    blocks = []
    for m in _FENCE_RE.finditer(text):
        closed = m.group("close") is not None
        blocks.append(CodeBlock(m.group(1).lower(), m.group(2).rstrip("\n"), closed))
    return blocks


def extract_code(
    text: str, language: str | None = None, *, fallback_to_text: bool = False
) -> str | None:
    """The last fenced block in ``language`` (or unlabeled), or of any language when None.

    Args:
        text: the completion.
        language: e.g. ``"python"`` (aliases ``py``/``python3`` accepted); None = any.
        fallback_to_text: with no fenced block, return the whole text stripped
            instead of None.
    """
    aliases = {"py": "python", "python3": "python", "sh": "bash", "shell": "bash"}
    want = aliases.get(language.lower(), language.lower()) if language else None
    for block in reversed(extract_code_blocks(text)):
        lang = aliases.get(block.language, block.language)
        if want is None or lang in (want, ""):
            return block.code
    if fallback_to_text:
        return text.strip()
    return None
