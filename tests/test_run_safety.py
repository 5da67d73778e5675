"""Bad input and crash leftovers give one clear line, and a run directory has one owner."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest
import torch

from polyrl.config import load_config
from polyrl.errors import CheckpointError, ConfigError
from polyrl.eval.pipeline import RunBusyError, new_run
from polyrl.eval.rundir import run_lock
from polyrl.train.checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint


def test_set_value_that_is_not_yaml_names_the_key():
    with pytest.raises(ConfigError, match=r"^--set: train\.lr: value '\[1' is not a YAML"):
        load_config(None, ["train.lr=[1"])


def test_config_that_is_not_utf8_names_the_file(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_bytes(b"run:\n  name: \xff\xfe\n")
    with pytest.raises(ConfigError, match="bad.yaml: not UTF-8"):
        load_config(p)


def test_eval_difficulty_out_of_range_fails_at_load():
    with pytest.raises(ConfigError, match=r"eval\.difficulty: must be ints in 1\.\.5"):
        load_config(None, ["eval.difficulty=[7]"])


def _ckpts(root, steps):
    model = torch.nn.Linear(2, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for s in steps:
        save_checkpoint(root, s, model, opt, {})


def test_truncated_checkpoint_file_is_named_with_the_older_ones(tmp_path):
    _ckpts(tmp_path, [1, 2, 3])
    (tmp_path / "step-3" / "model.pt").write_bytes(b"PK\x03\x04torn")
    with pytest.raises(CheckpointError, match=r"step-3/model\.pt: unreadable checkpoint file.*"
                                              r"older checkpoints: step-1, step-2"):
        load_checkpoint(tmp_path)


def test_empty_or_escaping_pointer_is_a_clear_error(tmp_path):
    _ckpts(tmp_path, [1])
    for text in ("", "../.."):
        (tmp_path / "latest").write_text(text)
        with pytest.raises(FileNotFoundError, match="points at missing checkpoint"):
            latest_checkpoint(tmp_path)


def test_new_run_never_writes_into_a_foreign_directory(tmp_path):
    cfg = load_config(None)
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "config.yaml").write_text("precious")
    with pytest.raises(FileExistsError, match="not an empty directory"):
        new_run(cfg, tmp_path / "mine")
    assert (tmp_path / "mine" / "config.yaml").read_text() == "precious"
    (tmp_path / "empty").mkdir()
    assert new_run(cfg, tmp_path / "empty") == tmp_path / "empty"


def test_a_second_session_on_one_run_directory_is_refused(tmp_path):
    holder = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; "
         "from polyrl.eval.rundir import run_lock\n"
         "with run_lock(Path(sys.argv[1])):\n print('held', flush=True); time.sleep(30)",
         str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(RunBusyError, match=f"in use by another polyrl process "
                                               f"\\(pid {holder.pid}\\)"):
            with run_lock(tmp_path):
                pass
    finally:
        holder.kill()
        holder.wait()
    deadline = time.monotonic() + 5
    while True:  # the kernel drops a dead holder's lock (kill -9 included)
        try:
            with run_lock(tmp_path):
                break
        except RunBusyError:
            assert time.monotonic() < deadline
            time.sleep(0.05)


def test_a_clean_finish_leaves_no_lock_file_and_the_lock_still_excludes(tmp_path):
    with run_lock(tmp_path):
        assert (tmp_path / ".lock").read_text() == f"{os.getpid()}\n"
    assert not (tmp_path / ".lock").exists()
    racers = [subprocess.Popen(  # many sessions at once: at most one holds it at any time
        [sys.executable, "-c", "import os, sys, time; from pathlib import Path\n"
         "from polyrl.eval.rundir import RunBusyError, run_lock\n"
         "d = Path(sys.argv[1]); n = 0\n"
         "end = time.monotonic() + 1.5\n"
         "while time.monotonic() < end:\n"
         "    try:\n"
         "        with run_lock(d):\n"
         "            fd = os.open(d / 'inside', os.O_CREAT | os.O_EXCL | os.O_WRONLY)\n"
         "            os.close(fd); os.unlink(d / 'inside'); n += 1\n"
         "    except RunBusyError:\n"
         "        pass\n"
         "print(n)", str(tmp_path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for _ in range(3)]
    outs = [r.communicate(timeout=60) for r in racers]
    assert all(r.returncode == 0 for r in racers), [o[1][-400:] for o in outs]
    assert sum(int(o[0]) for o in outs) > 0


def test_cli_bad_set_value_is_one_line_exit_2():
    out = subprocess.run([sys.executable, "-m", "polyrl", "run", "--set", "train.lr=[1",
                          "--print-config"], capture_output=True, text=True)
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert out.stderr.strip().startswith("error: --set: train.lr:")


def test_a_killed_writers_half_checkpoint_is_removed_by_the_next_save(tmp_path):
    """A writer killed mid-save left `.tmp-step-N-<pid>` (a whole checkpoint's size)
    for good: its pid is in the name, so no later save ever reused it."""
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    stale = tmp_path / f".tmp-step-7-{dead.pid}"
    stale.mkdir()
    (stale / "model.pt").write_bytes(b"x" * 1000)
    live = tmp_path / f".tmp-step-8-{os.getppid()}"  # another writer, still saving
    live.mkdir()
    _ckpts(tmp_path, [1])
    assert not stale.exists() and live.exists()
    assert latest_checkpoint(tmp_path) == tmp_path / "step-1"


def test_a_resume_may_change_how_long_it_runs_not_what_it_computes(tmp_path):
    """config.yaml edited between sessions: a new learning rate from step 38 on was used
    silently (and config.yaml then described no step before it)."""
    from polyrl.eval.rundir import check_resume_config, read_state

    run = new_run(load_config(None), tmp_path / "run")
    state = read_state(run)
    assert check_resume_config(run, load_config(run / "config.yaml"), state) == []
    with pytest.raises(ConfigError, match=r"config\.yaml: train\.lr: changed since the run "
                                          r"began \(train\.lr: [0-9.e-]+ -> 0\.5\)"):
        check_resume_config(run, load_config(run / "config.yaml", ["train.lr=0.5"]), state)
    longer = load_config(run / "config.yaml", ["train.steps=90"])
    steps = state["config"]["train"]["steps"]
    assert check_resume_config(run, longer, state) == [f"train.steps: {steps} -> 90"]
    assert state["config"]["train"]["steps"] == 90  # the run's configuration from now on
    assert check_resume_config(run, longer, {"done": []}) == []  # runs older than the check


def test_a_damaged_run_state_is_one_clear_error(tmp_path):
    from polyrl.eval.rundir import read_state

    run = new_run(load_config(None), tmp_path / "run")
    (run / "run_state.json").write_text('{"done": ')
    with pytest.raises(ConfigError, match="run_state.json: not valid JSON"):
        read_state(run)
    (run / "run_state.json").write_text('{"status": "done"}')
    with pytest.raises(ConfigError, match="run_state.json: done: missing"):
        read_state(run)


def test_settings_no_run_can_use_fail_at_load():
    """lr=inf trained to nan weights and exited 0; device=tpu failed in torch after the
    run folder was made; group_size=0 said 'must be >= 1' though 2 are needed."""
    for item, says in (("train.lr=.inf", "train.lr: must be a finite number"),
                       ("rollout.temperature=.nan", "rollout.temperature: must be a finite"),
                       ("model.device=tpu", "model.device: must be 'auto', 'cpu'"),
                       ("rollout.group_size=0", "rollout.group_size: must be at least 2")):
        with pytest.raises(ConfigError, match=f"^--set: {says}"):
            load_config(None, [item])
    assert load_config(None, ["model.device=cuda:1"]).model.device == "cuda:1"


@pytest.mark.parametrize("args, says", [
    (["eval", "--n", "2", "--samples", "0"], "--samples: must be >= 1, got 0"),
    (["eval", "--n", "2", "--max-tokens", "0"], "--max-tokens: must be >= 1, got 0"),
    (["eval", "--n", "2", "--results-out", "/"], "--results-out: / is a directory"),
    (["headroom", "--policy", "tiny", "--probe-steps", "-3"], "--probe-steps: must be >= 1"),
    (["headroom", "--policy", "tiny", "--n", "0"], "--n: must be >= 1, got 0"),
])
def test_cli_numbers_out_of_range_are_one_line_exit_2(args, says):
    if "--policy" not in args:
        args = [*args, "--policy", "oracle"]
    out = subprocess.run([sys.executable, "-m", "polyrl", *args, "--domains", "math/arith-v1"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and out.stderr.strip().startswith(f"error: {says}"), out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
