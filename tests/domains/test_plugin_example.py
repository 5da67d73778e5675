"""The example plugin of docs/writing-a-domain.md (examples/plugin-domain/) works as shipped.

Nothing is built or installed: the example's own entry point (read from its
pyproject.toml) goes into a temporary ``*.dist-info`` on ``sys.path``, the way
``pip install`` would put it, and the registry, the shared checker, the oracle
policy and ``polyrl domains list`` / ``polyrl domains check`` load it from there.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from polyrl.domains import Registry, check_domain
from polyrl.domains.registry import ENTRY_POINT_GROUP

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plugin-domain"
DOMAIN_ID = "units/convert-v1"


def _entry_points() -> dict[str, str]:
    """The example's ``[project.entry-points."polyrl.domains"]`` table."""
    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    project = tomllib.loads((EXAMPLE / "pyproject.toml").read_text())["project"]
    return project["entry-points"][ENTRY_POINT_GROUP]


@pytest.fixture
def site(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A site folder holding the example's dist-info; it and the example are on sys.path."""
    dist = tmp_path / "polyrl_units-0.1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: polyrl-units\nVersion: 0.1.0\n")
    lines = [f"{name} = {value}" for name, value in _entry_points().items()]
    (dist / "entry_points.txt").write_text(f"[{ENTRY_POINT_GROUP}]\n" + "\n".join(lines) + "\n")
    monkeypatch.syspath_prepend(str(EXAMPLE))
    monkeypatch.syspath_prepend(str(tmp_path))
    return tmp_path


def test_entry_point_registers_the_domain_and_it_passes_the_checker(site):
    reg = Registry(modules=[], entry_points=True)
    domain = reg.get("units/convert")  # unversioned: the highest version
    assert domain.id == DOMAIN_ID and domain.family == "units" and domain.binary
    assert not [s for s in reg.skipped() if "units" in s], reg.skipped()
    for difficulty in (None, 1, 2, 3):
        report = check_domain(domain, n=16, difficulty=difficulty)
        assert report.ok, report.problems
        assert report.oracle_mean == 1.0 and report.disjoint is True


def test_oracle_policy_scores_one_and_wrong_answers_score_less(site):
    from polyrl.eval.evaluate import evaluate
    from polyrl.rollout.replay import OraclePolicy

    domain = Registry(modules=[], entry_points=True).get(DOMAIN_ID)
    result = evaluate(OraclePolicy({DOMAIN_ID: domain}), [domain], n=24)
    got = result.domains[DOMAIN_ID]
    assert (got.n, got.mean, got.passed, got.errors) == (24, 1.0, 24, 0)

    task = next(domain.tasks("test", difficulty=3, n=1, seed=0))
    gold = float(task.reference)
    assert domain.score(task, f"{gold * 1.02:.2f}").reward == pytest.approx(0.3 * 0.8, abs=0.01)
    assert domain.score(task, task.prompt[0]["content"] + task.reference).passed is True
    with pytest.raises(ValueError, match="1..3"):
        list(domain.tasks("train", difficulty=4, n=1))


def test_cli_lists_and_checks_the_plugin(site):
    path = [str(site), str(EXAMPLE), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in path if p))

    def polyrl(*args: str) -> dict:
        r = subprocess.run([sys.executable, "-m", "polyrl", "--quiet", *args],
                           capture_output=True, text=True, env=env, timeout=120)
        assert r.returncode == 0, r.stdout + r.stderr
        return json.loads(r.stdout.strip().splitlines()[-1])

    listed = polyrl("domains", "list", "--json")
    assert DOMAIN_ID in {d["id"] for d in listed["domains"]}, listed["skipped"]
    report = polyrl("domains", "check", DOMAIN_ID, "--n", "8", "--json")
    assert report["ok"] is True and report["oracle_mean"] == 1.0


def test_the_guides_minimal_example_keeps_the_contract_it_states():
    """The ``Double`` of docs/writing-a-domain.md, run as written: it passes the checker
    and, as its own contract asks, refuses a level it does not have (it drew level-3
    tasks for ``difficulty=3``, a config's ``difficulty: [3]`` included)."""
    doc = (EXAMPLE.parents[1] / "docs" / "writing-a-domain.md").read_text()
    code = doc.split("```python\n", 1)[1].split("```", 1)[0]
    ns: dict = {}
    exec(compile(code, "writing-a-domain.md", "exec"), ns)
    dom = ns["Double"]()
    assert check_domain(dom, n=32).ok
    assert check_domain(dom, n=8, difficulty=[1, 2]).ok
    for bad in (3, [1, 5]):
        with pytest.raises(ValueError, match="1..2"):
            list(dom.tasks("test", difficulty=bad, n=4))
