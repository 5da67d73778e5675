from __future__ import annotations

import resource

import pytest

from polyrl.errors import ConfigError
from polyrl.sandbox import PRESETS, Limits, resolve_limits


def test_presets_ordered_and_named():
    assert set(PRESETS) >= {"strict", "default", "build"}
    s, d, b = PRESETS["strict"], PRESETS["default"], PRESETS["build"]
    for name in ("timeout_s", "cpu_s", "memory_mib", "max_pids", "max_file_mib",
                 "max_output_kib"):
        assert getattr(s, name) <= getattr(d, name) <= getattr(b, name), name
    assert not any(p.network for p in PRESETS.values())


def test_resolve_and_validation():
    assert resolve_limits(None) == PRESETS["default"]
    assert resolve_limits("strict") is PRESETS["strict"]
    lim = Limits(timeout_s=1.5)
    assert resolve_limits(lim) is lim
    with pytest.raises(ConfigError, match="unknown preset 'huge'"):
        resolve_limits("huge")
    with pytest.raises(ConfigError, match="memory_mib"):
        Limits(memory_mib=0)
    with pytest.raises(ConfigError, match="timeout_s"):
        Limits().replace(timeout_s=-1)


@pytest.mark.parametrize("field", ["timeout_s", "cpu_s", "memory_mib", "max_file_mib",
                                   "kill_grace_s"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_limits_must_be_finite(field: str, value: float):
    """nan compares false with everything: a nan wall limit or grace period was no limit
    (a program that ignored SIGTERM ran on; --timeout-s nan ran 8 s of 8); inf overflowed
    later with a bare traceback."""
    with pytest.raises(ConfigError, match=f"{field}.*finite"):
        Limits(**{field: value})


def test_rlimits_units():
    lim = Limits(cpu_s=2.2, memory_mib=100, max_pids=9, max_file_mib=3)
    rl = {r: (s, h) for r, s, h in lim.rlimits()}
    assert rl[resource.RLIMIT_CPU] == (3, 3)
    assert rl[resource.RLIMIT_AS] == (100 << 20, 100 << 20)
    assert rl[resource.RLIMIT_NPROC] == (9, 9)
    assert rl[resource.RLIMIT_FSIZE] == (3 << 20, 3 << 20)
    assert lim.max_output_bytes == 256 * 1024


def test_rlimits_beyond_what_the_kernel_holds_mean_no_limit_and_caps_compare():
    """A value past a signed 64-bit rlimit is no limit (setrlimit would overflow), and
    ``rlimits_beyond`` names the fields a child of a capped process cannot get."""
    from polyrl.sandbox.limits import rlimits_beyond

    huge = Limits(memory_mib=10**15, cpu_s=1e20).rlimits()
    rl = {res: hard for res, _, hard in huge}
    assert rl[resource.RLIMIT_AS] == rl[resource.RLIMIT_CPU] == resource.RLIM_INFINITY
    cap = Limits(cpu_s=1e9, memory_mib=1 << 20, max_pids=64).rlimits()
    assert rlimits_beyond(huge, cap) == ["cpu_s", "memory_mib"]
    assert rlimits_beyond(Limits(max_pids=65).rlimits(), cap) == ["max_pids"]
    assert rlimits_beyond(Limits().rlimits(), cap) == []
    assert rlimits_beyond(cap, huge) == []


def test_a_kernel_sigkill_after_half_the_cpu_budget_is_the_cpu_limit():
    """RLIMIT_CPU's tick-sampled clock can kill a busy process while rusage (precise)
    reads well under the budget: a SIGKILL the sandbox did not send is the CPU limit once
    half the budget is used (measured under load: 0.73 s of 1 s, 1.6 s of 2 s)."""
    from polyrl.sandbox.result import to_exec_result
    from polyrl.sandbox.runner import RawRun

    def limit_hit(cpu_s: float, sig: int | None = 9, killed_for: str | None = None):
        raw = RawRun(returncode=None if sig else 0, term_signal=sig, stdout=b"", stderr=b"",
                     stdout_truncated=False, stderr_truncated=False, wall_s=3.0,
                     cpu_s=cpu_s, peak_memory_mib=10.0, killed_for=killed_for)
        return to_exec_result(["p"], raw, Limits(cpu_s=2), 0.0, shell_status=False).limit_hit

    assert limit_hit(1.6) == limit_hit(0.73 * 2) == limit_hit(2.01) == "cpu_s"
    assert limit_hit(0.5) is None  # killed early by something else (itself, the OOM killer)
    assert limit_hit(1.9, sig=None) is None  # finished in time
    assert limit_hit(1.9, killed_for="timeout_s") == "timeout_s"
    # the kernel never sends SIGXCPU (soft == hard): one without the CPU time is the
    # program's own; a shell's exit 137 for its killed child reads as SIGKILL everywhere
    assert limit_hit(0.0, sig=24) is None and limit_hit(1.9, sig=24) == "cpu_s"
    raw = RawRun(returncode=137, term_signal=None, stdout=b"", stderr=b"",
                 stdout_truncated=False, stderr_truncated=False, wall_s=3.0, cpu_s=1.9,
                 peak_memory_mib=10.0, killed_for=None)
    for shell_status in (False, True):
        res = to_exec_result(["sh"], raw, Limits(cpu_s=2), 0.0, shell_status=shell_status)
        assert res.limit_hit == "cpu_s"
