"""The sandbox starts from a host process whose forks are multi-threaded.

A process that ran torch ops on 2+ threads forks children that already hold a second
thread, and the kernel refuses ``setns`` into the host view (EINVAL) in those. This
is the trainer's own situation (rewards are scored after the policy has run), so the
sandbox must start there anyway, limits and private uid intact (``bwrap.popen``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

PROGRAM = r"""
import json, torch
torch.set_num_threads(2)
torch.ones(10).sum()
(torch.randn(64, 64) @ torch.randn(64, 64)).sum()
from polyrl.sandbox import ForkServer, Limits, Sandbox
from polyrl.sandbox import bwrap
probe = "import os, resource; print(os.getuid(), resource.getrlimit(resource.RLIMIT_NPROC)[0])"
lim = Limits(timeout_s=20, cpu_s=10, max_pids=17)
res = Sandbox(backend="bwrap", limits=lim).run_python(probe)
fs = ForkServer(limits=lim, workers=1)
try:
    fres = fs.run_python("print(6 * 7)")
finally:
    fs.close()
print(json.dumps({"run": [res.exit_code, res.stdout, res.error], "fs": [fres.exit_code, fres.stdout],
                  "fallback": bwrap._preexec_failed}))
"""


def test_sandbox_and_fork_server_start_from_a_torch_threaded_process():
    p = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True,
                       timeout=240)
    assert p.returncode == 0, p.stderr[-2000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    code, stdout, error = out["run"]
    assert code == 0 and error is None, out
    uid, nproc = (int(x) for x in stdout.split())
    assert uid != 0
    if os.geteuid() == 0:  # a private uid: the pid limit is exactly the execution's own
        assert nproc == 17
    else:  # RLIMIT_NPROC counts the user's other processes too (bwrap.prepare adds them)
        assert nproc >= 17
    assert out["fs"] == [0, "42\n"]
