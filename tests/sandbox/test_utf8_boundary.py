"""What cannot cross the sandbox boundary (``polyrl.sandbox.utf8``, ``workspace._safe_rel``)
is refused the same way on every path (warm, warm-unscoped, cold; sessions): a clear
ConfigError before anything runs, or the program's own failure (126) for a command over
the kernel's limit, never a bare ValueError / OSError, a crashed warm server, or a
silent exit 125."""

from __future__ import annotations

import pytest

from polyrl.errors import ConfigError
from polyrl.sandbox import Sandbox
from polyrl.sandbox.workspace import NAME_MAX_BYTES, PATH_MAX_BYTES

from .conftest import is_warm


@pytest.mark.parametrize("argv, env", [
    (["sh", "-c", "env"], {"A=B": "c"}),  # execve: A = "B=c"; warm: exit 125, no stderr
    (["sh", "-c", "env"], {"": "c"}),
    (["sh", "-c", "env"], {"A": "c\0d"}),  # cold: bare ValueError from subprocess
    (["sh", "-c", "env"], {"A\0": "c"}),
    (["sh", "-c", "env"], {"A": "\ud800"}),  # cold: bare UnicodeEncodeError
    (["echo", "a\0b"], None),
    (["echo", "\ud800"], None),
])
def test_a_command_no_program_can_be_given_is_a_config_error(sb: Sandbox, argv, env):
    with pytest.raises(ConfigError):
        sb.run(argv, env=env)
    with pytest.raises(ConfigError):
        sb.run(argv, env=env, raise_errors=False)
    with sb.session() as s:
        with pytest.raises(ConfigError):
            s.run(argv, env=env)
    assert sb.run(["true"]).exit_code == 0  # nothing spoiled


def test_a_session_command_string_with_a_nul_is_a_config_error(sb: Sandbox):
    with sb.session() as s, pytest.raises(ConfigError):
        s.run("echo a\0b")


def test_surrogate_escapes_still_pass(sb: Sandbox):
    res = sb.run(["sh", "-c", 'printf %s "$A" | od -An -tx1'], env={"A": "\udcff"})
    assert (res.exit_code, res.stdout.split()) == (0, ["ff"]), res


@pytest.mark.parametrize("size", [200_000, 3_000_000])
def test_a_command_over_the_kernel_limit_is_the_programs_failure(sb: Sandbox, size: int):
    """One argument over MAX_ARG_STRLEN, or an environment over the whole limit: a warm
    execution reported 126, a cold one raised SandboxError (bwrap could not start)."""
    want = (126, "polyrl sandbox: true: Argument list too long\n")
    res = sb.run(["true", "x" * size])
    assert (res.exit_code, res.stderr) == want, res
    res = sb.run(["true"], env={"BIG": "x" * size})
    assert (res.exit_code, res.stderr) == want, res
    with sb.session() as s:
        res = s.run(["true", "x" * size])
        assert (res.exit_code, res.stderr) == want, res


def test_a_command_of_many_arguments_runs_on_every_path(sb: Sandbox):
    """bubblewrap takes at most 9000 arguments, its options included: a cold execution
    of ``echo`` with 20,000 raised SandboxError ("Exceeded maximum number of
    arguments") where a warm one ran. Now it runs, with the same environment, pid and
    descriptors as a short command, and a program not found is still 127."""
    many = [f"a{i}" for i in range(20_000)]
    probe = "echo $# \"$1\" \"${20000}\" $$; ls /proc/self/fd; env | sort"
    short = sb.run(["sh", "-c", probe, "sh"], env={"FOO": "bar", "LANG": "C"})
    res = sb.run(["sh", "-c", probe, "sh", *many], env={"FOO": "bar", "LANG": "C"})
    assert (res.exit_code, res.error) == (0, None), res
    head, rest = res.stdout.split("\n", 1)
    n, first, last, pid = head.split()
    assert (n, first, last) == ("20000", "a0", "a19999")
    short_head, short_rest = short.stdout.split("\n", 1)
    assert rest == short_rest
    if not is_warm(sb):  # a cold program's pid is fixed (2 under the cold init)
        assert pid == short_head.split()[-1]
    res = sb.run(["no-such-program", *many])
    assert (res.exit_code, res.stderr) == (
        127, "polyrl sandbox: no-such-program: No such file or directory\n"), res
    over = ["x" * 20] * 150_000  # 3 MB of arguments: past the kernel's limit
    res = sb.run(["true", *over])
    assert (res.exit_code, res.stderr) == (126, "polyrl sandbox: true: Argument list too long\n")
    with sb.session() as s:
        res = s.run(["sh", "-c", "echo $#", "sh", *many])
        assert (res.exit_code, res.stdout) == (0, "20000\n"), res


@pytest.mark.parametrize("name", [
    "y" * (NAME_MAX_BYTES + 1),  # cold: bare OSError (ENAMETOOLONG)
    "é" * 128,  # 256 UTF-8 bytes in 128 characters
    "/".join(["d" * 200] * 20),  # cold took it, warm: SandboxError
])
def test_file_names_no_path_can_hold_are_config_errors(sb: Sandbox, name: str):
    with pytest.raises(ConfigError, match="too long"):
        sb.run(["true"], files={name: "x"})
    with pytest.raises(ConfigError, match="too long"):
        sb.run(["true"], collect=[name])


def test_the_longest_and_deepest_names_work_on_every_path(sb: Sandbox):
    """At the limits: a 255-byte component, and ~1900 levels (a warm sandbox's server
    made them with os.makedirs, recursive: RecursionError past ~1000 levels killed it,
    'fork-server exited (status 1)')."""
    deep = "d/" * ((PATH_MAX_BYTES - 1) // 2) + "d"
    long = "/".join(["e" * NAME_MAX_BYTES] * 10)
    assert len(deep.encode()) <= PATH_MAX_BYTES and len(long.encode()) <= PATH_MAX_BYTES
    for name in (deep, long):
        res = sb.run(["sh", "-c", "find . -type f | wc -c"], files={name: "x"}, collect=[name])
        assert (res.exit_code, res.files) == (0, {name: b"x"}), res
        assert int(res.stdout) == len(name.encode()) + 3, res  # "./" + name + "\n"
