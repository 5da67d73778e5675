"""Reading financial answers: final line, items, parentheses, scales, percent."""

from __future__ import annotations

import pytest

from polyrl.domains.finance.answer import (
    Value,
    final_answer,
    format_number,
    parse_value,
    split_items,
)


@pytest.mark.parametrize(("text", "value"), [
    ("(1,234.5)", Value(-1234.5, "", 1)),
    ("$ (1,234.5) thousand", Value(-1234.5, "thousand", 1)),
    ("$1,496.5 million", Value(1496.5, "million", 1)),
    ("-3.2 bn", Value(-3.2, "billion", 1)),
    ("12.3%", Value(12.3, "percent", 1)),
    ("0.123", Value(0.123, "", 3)),
    ("2019", Value(2019.0, "", 0)),
])
def test_parse_value(text: str, value: Value) -> None:
    assert parse_value(text) == value


def test_text_items_are_not_numbers() -> None:
    assert parse_value("fixed-price type") is None
    assert parse_value("September 30, 2019") is None


def test_final_answer_prefers_answer_line_then_boxed_then_last_line() -> None:
    assert final_answer("work...\nAnswer: 12.5%\nThanks") == "12.5%"
    assert final_answer("so \\boxed{1{,}234} it is") == "1{,}234"
    assert final_answer("thinking\n\n  42 million  \n") == "42 million"
    assert final_answer("   ") == ""


def test_split_items_and_format_number() -> None:
    assert split_items("a | b\nc") == ["a", "b", "c"]
    assert split_items('["x", "y"]') == ["x", "y"]
    assert split_items("fees; consultations") == ["fees; consultations"]
    assert format_number(-1234.5) == "-1,234.5" and format_number(3.0) == "3"
