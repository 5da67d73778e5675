"""The documented modelling subset (polyrl.domains.cad.subset) and the in-process builder."""

from __future__ import annotations

import pytest

from polyrl.domains.cad import dsl
from polyrl.domains.cad.subset import check_program

ALLOWED = frozenset(dsl.NAMES)


def test_accepts_language_programs() -> None:
    prog = ("p = box(10, 10, 2)\nfor i in range(3):\n    p -= cylinder(1, 4).translate(i, 0, 0)\n"
            "result = union(p, sphere(2).rotate(0, 0, 45).scale(1, 1, 0.5)) & box(20, 20, 20)\n")
    assert check_program(prog, ALLOWED) is None
    assert dsl.build(prog).m.volume() > 0


@pytest.mark.parametrize("prog, reason", [
    ("import os\nresult = box(1, 1, 1)", "Import"),
    ("result = box(1, 1, 1).__class__", "attribute"),
    ("result = open('x')", "unknown function open()"),
    ("x = 'text'\nresult = box(1, 1, 1)", "numeric constants"),
    ("_x = 1\nresult = box(1, 1, 1)", "starts with '_'"),
    ("for i in [1, 2]:\n    pass\nresult = box(1, 1, 1)", "range"),
    ("x = box(1, 1, 1)", "never assigns `result`"),
    ("result = (lambda: box(1, 1, 1))()", "only named functions"),
    ("result = box(1, 1", "syntax error"),
])
def test_refuses_outside_the_subset(prog: str, reason: str) -> None:
    why = check_program(prog, ALLOWED)
    assert why is not None and reason in why


def test_bad_sizes_raise() -> None:
    with pytest.raises(ValueError, match="positive"):
        dsl.box(1, -1, 1)


@pytest.mark.parametrize("prog", [
    "sin = chr\ncos = exec\ncos(sin(112))\nresult = box(1, 1, 1)",  # rebinding a language name
    "f = print\nresult = box(1, 1, 1)",                             # a builtin read by name
    "x = emit\nresult = box(1, 1, 1)",                               # the prelude's emit
    "result = box(1, 1, 1).translate(np, 0, 0)",                     # the prelude's numpy
])
def test_refuses_names_outside_the_language(prog: str) -> None:
    assert check_program(prog, ALLOWED) is not None
