"""polyrl's ``str`` API is UTF-8 on every host (``polyrl.sandbox.utf8``).

The host Python runs as a subprocess under an ISO-8859-1 locale (generated with
``localedef``), where ``os.fsencode`` made ``"é"`` the byte 0xE9 (programs saw invalid
UTF-8, the output came back as U+FFFD) and refused ``"✓"``: every path must give what
it gives on a UTF-8 host.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from polyrl.sandbox import utf8

ARG, VAL, NAME, SUB = "héllo ✓", "ünï", "naïve ✓.txt", "dé ✓"
PROBE = 'printf "%s|%s|" "$1" "$X"; cat -- "$2"'
EXPECTED_PROBE = f"{ARG}|{VAL}|x"

_CHILD = r"""  # ASCII: the child decodes its -c with the host's Latin-1
import json, os, sys
from polyrl.sandbox import ForkServer, Limits, Sandbox
ARG, VAL, NAME, SUB, PROBE = json.loads(sys.argv[1])
out = {"fsencoding": sys.getfilesystemencoding()}

def record(key, fn):
    try:
        out[key] = fn()
    except Exception as e:
        out[key] = "raised %s: %s" % (type(e).__name__, e)

lim = Limits(timeout_s=10, cpu_s=10)
boxes = {"cold": Sandbox(limits=lim, warm=False), "warm": Sandbox(limits=lim),
         "process": Sandbox("process", limits=lim)}
for mode, sb in boxes.items():
    def run():
        r = sb.run(["bash", "-c", PROBE, "x", ARG, NAME], env={"X": VAL},
                   files={NAME: "x"}, collect=[NAME])
        return [r.stdout, r.stderr, {k: v.decode() for k, v in r.files.items()}]
    record(mode + " run", run)
    record(mode + " python", lambda: sb.run_python("print(%r)" % ARG).stdout)
    record(mode + " cwd", lambda: sb.run(["bash", "-c", "pwd; ls"], cwd=SUB,
                                         files={SUB + "/" + NAME: ""}).stdout)
for mode in ("cold", "process"):
    def session():
        with boxes[mode].session() as s:
            s.write_file(NAME, "x")
            steps = [s.run(["bash", "-c", PROBE, "x", ARG, NAME], env={"X": VAL}).stdout,
                     s.read_file(NAME).decode()]
            s.run(["bash", "-c", "mkdir -p -- \"$1\"", "x", SUB])
            steps.append(s.run("cd -- '%s' && echo '%s' > in" % (SUB, ARG)).stderr)
            steps.append(s.cwd)
            snap = s.snapshot()
            s.run("cd /workspace && rm -rf -- *")
            s.restore(snap)
            steps += [s.cwd, s.run("pwd; cat in; ls ..").stdout]
            return steps
    record(mode + " session", session)
def forkserver():
    with ForkServer(limits=lim, workers=1) as fs:
        r = fs.run_python("import os; print(os.listdir('.'), open(%r).read())" % NAME,
                          files={NAME: "x"})
        return r.stdout + r.stderr
record("forkserver", forkserver)
print(json.dumps(out))
"""


def _latin1_env(tmp: str) -> dict[str, str]:
    """The environment of a host Python whose locale is ISO-8859-1 (``LOCPATH``)."""
    if shutil.which("localedef") is None:  # pragma: no cover - hosts without glibc tools
        pytest.skip("localedef is not installed: no ISO-8859-1 locale to test under")
    loc = os.path.join(tmp, "en_US.ISO-8859-1")
    r = subprocess.run(["localedef", "-i", "en_US", "-f", "ISO-8859-1", loc],
                       capture_output=True, text=True)
    if not os.path.isdir(loc):  # pragma: no cover - no en_US source / charmap here
        pytest.skip(f"localedef could not make an ISO-8859-1 locale: {r.stderr[-300:]}")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("LC_", "PYTHONUTF8", "PYTHONIOENCODING"))}
    return {**env, "LOCPATH": tmp, "LANG": "en_US.ISO-8859-1", "LC_ALL": "en_US.ISO-8859-1",
            "PYTHONUTF8": "0"}


@pytest.fixture(scope="module")
def latin1_host(tmp_path_factory) -> dict:
    """What every path returned to a host Python running under ISO-8859-1."""
    env = _latin1_env(str(tmp_path_factory.mktemp("locale")))
    r = subprocess.run([sys.executable, "-c", _CHILD, json.dumps([ARG, VAL, NAME, SUB, PROBE])],
                       env=env, capture_output=True, text=True, encoding="utf-8",
                       errors="replace", timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    out = json.loads(r.stdout.splitlines()[-1])
    assert out["fsencoding"] == "iso8859-1"  # the host really encodes names as Latin-1
    return out


@pytest.mark.parametrize("mode", ["cold", "warm", "process"])
def test_argv_env_files_are_utf8_under_a_latin1_host(latin1_host: dict, mode: str):
    assert latin1_host[f"{mode} run"] == [EXPECTED_PROBE, "", {NAME: "x"}]
    assert latin1_host[f"{mode} python"] == f"{ARG}\n"  # model code with non-ASCII
    assert latin1_host[f"{mode} cwd"].endswith(f"{SUB}\n{NAME}\n")


@pytest.mark.parametrize("mode", ["cold", "process"])
def test_session_is_utf8_under_a_latin1_host(latin1_host: dict, mode: str):
    steps = latin1_host[f"{mode} session"]
    assert isinstance(steps, list), steps
    assert steps[:3] == [f"{ARG}|{VAL}|x", "x", ""]
    assert steps[3] == steps[4] == f"/workspace/{SUB}"  # the cwd survives snapshot/restore
    assert steps[5].splitlines()[1:] == [ARG, SUB, NAME]


def test_forkserver_under_a_latin1_host(latin1_host: dict):
    assert latin1_host["forkserver"] == f"[{NAME!r}] x\n"


def test_encode_is_utf8_and_bytes_pass_through():
    assert utf8.encode("é✓") == "é✓".encode()
    assert utf8.encode(b"\xe9") == b"\xe9"
    assert utf8.encode("a\udcff") == b"a\xff"  # a surrogate escape: its byte back
    assert utf8.encode_env({"X": "ü", b"Y": b"\xff"}) == {b"X": "ü".encode(), b"Y": b"\xff"}
    with pytest.raises(UnicodeEncodeError):
        utf8.encode("\ud800")
