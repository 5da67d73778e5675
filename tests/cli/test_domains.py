import json
import os
import subprocess
import sys
import textwrap

import pytest


def polyrl(*args, env=None):
    return subprocess.run([sys.executable, "-m", "polyrl", *args], capture_output=True,
                          text=True, env=env, timeout=120)


def last_json(stdout):
    return json.loads(stdout.strip().splitlines()[-1])


def test_list_json_has_ids_families_and_split_sizes():
    r = polyrl("domains", "list", "--json")
    assert r.returncode == 0, r.stderr
    out = last_json(r.stdout)
    rows = {d["id"]: d for d in out["domains"]}
    assert rows["math/arith-v1"]["family"] == "math"
    assert rows["math/arith-v1"]["splits"] == {"train": None, "test": None}  # unbounded
    assert rows["recall/needle-1m-v1"]["description"]
    assert isinstance(out["skipped"], dict)
    gsm = rows["math/gsm8k-v1"]
    assert gsm["splits"] is None or sum(gsm["splits"].values()) == 1319


def test_list_table_is_human_readable():
    r = polyrl("domains", "list")
    assert r.returncode == 0, r.stderr
    assert "math/arith-v1" in r.stdout and "unbounded" in r.stdout


@pytest.mark.parametrize("domain_id", ["math/arith-v1", "math/gsm8k-v1", "recall/needle-v1"])
def test_check_passes_for_math_and_recall(domain_id, shared_data):
    r = polyrl("domains", "check", domain_id, "--n", "4", "--json")
    assert r.returncode == 0, r.stdout + r.stderr
    out = last_json(r.stdout)
    assert out["id"] == domain_id and out["n"] == 4 and out["ok"] is True
    assert out["oracle_mean"] == 1.0 and out["empty_mean"] == 0.0 and out["deterministic"]


def test_check_unknown_id_exits_2_with_suggestion():
    r = polyrl("domains", "check", "math/arth-v1")
    assert r.returncode == 2
    assert "did you mean" in r.stderr and "math/arith-v1" in r.stderr


def test_check_failing_plugin_domain_exits_1(tmp_path):
    (tmp_path / "polyrl_cli_plugin.py").write_text(textwrap.dedent("""
        from polyrl.domains.math import Arithmetic
        class Liar(Arithmetic):
            family = "liar"
            def oracle(self, task):
                return "0"
        def make():
            return [Liar("liar/arith-v1")]
    """))
    dist = tmp_path / "polyrl_cli_plugin-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: polyrl-cli-plugin\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text("[polyrl.domains]\nliar = polyrl_cli_plugin:make\n")
    env = dict(os.environ, PYTHONPATH=str(tmp_path))
    r = polyrl("domains", "check", "liar/arith", "--n", "3", "--json", env=env)
    assert r.returncode == 1, r.stderr
    out = last_json(r.stdout)
    assert out["id"] == "liar/arith-v1" and out["ok"] is False and out["oracle_mean"] < 1
    r = polyrl("domains", "check", "liar/arith-v1", env=env)
    assert r.returncode == 1 and "FAILED" in r.stdout and "problem" in r.stdout


def test_list_without_data_says_unavailable_and_prints_reasons_verbatim(tmp_path):
    data = tmp_path / "data[v2]"  # brackets: Rich markup must not eat them
    data.mkdir()
    env = {**os.environ, "POLYRL_DATA_DIR": str(data), "COLUMNS": "400"}
    r = polyrl("domains", "list", "--json", env=env)
    assert r.returncode == 0, r.stderr
    rows = {d["id"]: d for d in last_json(r.stdout)["domains"]}
    for domain_id in ("code/mbppplus-v1", "finance/tatqa-v1", "math/gsm8k-v1"):
        assert rows[domain_id]["splits"] is None, domain_id  # not an empty domain
        assert "data[v2]" in rows[domain_id]["error"]
        # one line per domain says which, where and why, naming the domain once
        assert domain_id not in rows[domain_id]["error"], rows[domain_id]["error"]
        assert "data not found (set POLYRL_DATA_DIR" in rows[domain_id]["error"]
        assert not rows[domain_id]["error"].startswith("ConfigError")
    table = polyrl("domains", "list", env=env)
    assert table.returncode == 0, table.stderr
    assert "unavailable" in table.stdout and "data[v2]" in table.stdout


@pytest.mark.parametrize("columns", [80, 120])
def test_list_table_fits_the_terminal_with_ids_and_words_whole(columns, tmp_path):
    # an empty data dir: the data-set domains are unavailable, with their reasons
    env = {**os.environ, "POLYRL_DATA_DIR": str(tmp_path), "COLUMNS": str(columns)}
    rows = last_json(polyrl("domains", "list", "--json", env=env).stdout)["domains"]
    r = polyrl("domains", "list", env=env)
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= columns, r.stdout
    words = set(r.stdout.split())
    for row in rows:
        # the id starts its row unbroken; the description is wrapped between words
        assert any(line.startswith(f"{row['id']} ") for line in lines), (row["id"], r.stdout)
        assert set(row["description"].split()) <= words, (row["id"], r.stdout)
        if row["splits"] is None:  # why not: below the table, under its id
            assert any(line.startswith(f"unavailable {row['id']}: ") for line in lines), r.stdout
            assert "".join(row["error"].split()) in "".join(r.stdout.split()), r.stdout  # whole
    assert any(row["splits"] is None for row in rows)
    assert len(lines) <= 3 * len(rows) + 5 * sum(row["splits"] is None for row in rows) + 5


def test_check_takes_difficulty_levels():
    r = polyrl("domains", "check", "math/arith-v1", "--n", "4", "--difficulty", "2", "--json")
    assert r.returncode == 0, r.stderr
    assert last_json(r.stdout)["ok"] is True
    r = polyrl("domains", "check", "math/arith-v1", "--difficulty", "9")
    assert r.returncode == 2 and "--difficulty" in r.stderr + r.stdout
