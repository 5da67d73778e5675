import subprocess
import sys

import yaml

from polyrl.config import config_from_dict


def polyrl(*args):
    return subprocess.run([sys.executable, "-m", "polyrl", *args], capture_output=True, text=True)


def test_help_lists_seven_commands():
    r = polyrl("--help")
    assert r.returncode == 0
    for cmd in ("run", "resume", "eval", "headroom", "domains", "sandbox", "report"):
        assert f" {cmd} " in r.stdout, cmd


def test_every_command_has_help():
    for cmd in (["run"], ["resume"], ["eval"], ["headroom"], ["domains", "list"], ["domains", "check"], ["sandbox", "exec"], ["sandbox", "doctor"], ["report"]):
        r = polyrl(*cmd, "--help")
        assert r.returncode == 0, (cmd, r.stderr)


def test_print_config_prints_resolved_config_to_stdout():
    r = polyrl("run", "--print-config", "--set", "train.steps=3")
    assert r.returncode == 0, r.stderr
    cfg = config_from_dict(yaml.safe_load(r.stdout))
    assert cfg.train.steps == 3
