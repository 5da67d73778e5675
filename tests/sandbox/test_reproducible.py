"""What a program sees does not depend on the host: its umask, the modes of its input
files and of what a session restores, and Python's string hashes (set orders)."""

from __future__ import annotations

import subprocess
import sys

_PROBE = r"""
import os, resource, sys
os.umask(int(sys.argv[1], 8))  # the host's umask and stack limit
resource.setrlimit(resource.RLIMIT_STACK, (int(sys.argv[2]), resource.RLIM_INFINITY))
from polyrl.sandbox import ForkServer, Limits, Sandbox
probe = ("mkfifo p; touch f; mkdir d; stat -c '%n %a' p f d in.txt in2 in2/g; umask; "
         "ulimit -s; ulimit -Hs")
files = {"in.txt": "x", "in2/g": "y"}
out = []
for name, sb in (("warm", Sandbox(backend="bwrap")),
                 ("cold", Sandbox(backend="bwrap", warm=False)),
                 ("process", Sandbox(backend="process"))):
    r = sb.run(["sh", "-c", probe], files=files)
    out.append(name + ": " + (r.stdout + r.stderr).replace("\n", " "))
    with sb.session() as s:
        s.run("mkfifo q; chmod 640 q")
        snap = s.snapshot()
        s.run("rm q")
        s.restore(snap)
        out.append(name + " session: " + s.run("stat -c '%n %a' q").stdout.strip())
with ForkServer(limits=Limits(timeout_s=10)) as fs:
    r = fs.run_python("import subprocess\n"
                      f"print(subprocess.run(['sh', '-c', {probe!r}], capture_output=True,"
                      " text=True).stdout.replace('\\n', ' '))", files=files)
    out.append("forkserver: " + r.stdout.strip() + r.stderr)
print("\n".join(out))
"""


def _probe(umask: str, stack: int) -> list[str]:
    res = subprocess.run([sys.executable, "-c", _PROBE, umask, str(stack)],
                         capture_output=True, text=True, timeout=240)
    assert res.returncode == 0, res.stderr[-3000:]
    return res.stdout.splitlines()


def test_modes_and_stack_are_the_same_whatever_the_hosts_umask_and_ulimit():
    """With a host umask of 077 the bwrap backend failed as root (the host view's
    directories were 0700 to the private uids), programs started with umask 077, input
    files were 0600 in warm and fork-server executions and 0644 in cold ones, and a
    restored fifo lost its group bit. Under a host's ``ulimit -s unlimited`` programs
    had an unlimited stack."""
    modes = "p 644 f 644 d 755 in.txt 644 in2 755 in2/g 644 0022 8192 8192"
    want = [f"warm: {modes} ", "warm session: q 640", f"cold: {modes} ",
            "cold session: q 640", f"process: {modes} ", "process session: q 640",
            f"forkserver: {modes}"]
    assert _probe("077", -1) == want  # -1: RLIM_INFINITY
    assert _probe("022", 8 << 20) == want


def test_local_time_is_utc_whatever_the_hosts_zone(sb, fs):
    """The sandbox's /etc/localtime is the host's: TZ sets the zone (this host's zone is
    likely UTC already, hence the check of TZ itself)."""
    code = ("import os, time\n"
            "print(os.environ.get('TZ'), time.strftime('%Z %z', time.localtime(0)))")
    assert sb.run_python(code).stdout == "UTC UTC +0000\n"
    assert fs.run_python(code).stdout == "UTC UTC +0000\n"


def test_string_hashes_are_the_same_in_every_execution(sb, fs):
    from polyrl.sandbox import Sandbox

    code = "print(list({'apple', 'banana', 'cherry', 'date', 'elder', 'fig'}))"
    outs = {sb.run_python(code).stdout for _ in range(3)}
    outs |= {fs.run_python(code).stdout, Sandbox(backend="process").run_python(code).stdout}
    assert len(outs) == 1, outs
