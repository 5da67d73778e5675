"""A signal in the seconds between a run directory being made and the main job taking
over (the imports of torch and the pipeline) leaves a resumable run and says so."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from polyrl.eval.rundir import read_state


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_before_the_main_job_leaves_a_resumable_run(tmp_path: Path,
                                                             sig: signal.Signals) -> None:
    """Before: SIGTERM there ended the process with 143 (Ctrl-C with click's 'Aborted!',
    exit 1) and no word of the run directory it had just made."""
    run_dir = tmp_path / "run"
    p = subprocess.Popen([sys.executable, "-m", "polyrl", "run", "--run-dir", str(run_dir)],
                         stderr=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert p.stderr is not None
        seen = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = p.stderr.readline()
            seen.append(line)
            if "run directory:" in line or not line:
                break
        assert "run directory:" in seen[-1], "".join(seen)
        p.send_signal(sig)  # the pipeline's imports take seconds: the signal lands in them
        out, err = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    err = "".join(seen) + err
    assert p.returncode == 130, (p.returncode, err[-2000:])
    assert f"polyrl resume {run_dir}" in err, err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    read_state(run_dir)  # a run directory `polyrl resume` takes
