"""Retry rules: labelled failures, backoff bounds, the retry budget, end to end counts."""

from __future__ import annotations

import errno
import random
import urllib.error

import pytest
import sched_jobs

from polyrl import errors
from polyrl.scheduler import (
    ErrorKind,
    JobFailedError,
    MemoryStore,
    RetryBudget,
    RetryPolicy,
    Scheduler,
    classify_error,
)

T, F, P, U = ErrorKind.TRANSIENT, ErrorKind.FINAL, ErrorKind.PREEMPTED, ErrorKind.UNKNOWN


class _Resp:
    def __init__(self, status_code: int) -> None:
        self.status_code = status_code


class HTTPStatusError(Exception):
    """Shaped like httpx/requests errors: the status lives on ``.response``."""

    def __init__(self, code: int) -> None:
        super().__init__(f"HTTP {code}")
        self.response = _Resp(code)


LABELLED = [
    (errors.SandboxError("bwrap failed to start"), T),
    (errors.WorkerLostError("worker OOM-killed"), T),
    (errors.PolicyServerError("connection reset"), T),
    (errors.JobTimeoutError("deadline"), T),
    (ConnectionRefusedError("policy server down"), T),
    (TimeoutError("read timed out"), T),
    (MemoryError(), T),
    (urllib.error.URLError("connection refused"), T),
    (urllib.error.HTTPError("http://x", 503, "unavailable", None, None), T),  # type: ignore[arg-type]
    (HTTPStatusError(408), T),
    (HTTPStatusError(429), T),
    (HTTPStatusError(500), T),
    (HTTPStatusError(502), T),
    (HTTPStatusError(400), F),
    (HTTPStatusError(404), F),
    (urllib.error.HTTPError("http://x", 413, "too large", None, None), F),  # type: ignore[arg-type]
    (errors.ParseError("no boxed answer"), F),
    (errors.PromptTooLongError("5000 > 4096"), F),
    (errors.ModelCodeError("NameError in model code"), F),
    (errors.TaskError("test failed"), F),
    (errors.ConfigError("x.yaml", "a", "bad"), F),
    (errors.SandboxUnavailableError("no user namespaces"), F),
    (errors.PreemptedError("spot node reclaimed"), P),
    (BlockingIOError(errno.EAGAIN, "fork: Resource temporarily unavailable"), T),
    (OSError(errno.ENOMEM, "Cannot allocate memory"), T),
    (OSError(errno.EMFILE, "Too many open files"), T),
    (FileNotFoundError(errno.ENOENT, "no such file"), U),
    (PermissionError(errno.EACCES, "denied"), U),
    (errors.GraderError("grader crashed"), U),
    (ValueError("odd"), U),
    (KeyError("k"), U),
    (RuntimeError("?"), U),
]


@pytest.mark.parametrize(("exc", "kind"), LABELLED, ids=[type(e).__name__ for e, _ in LABELLED])
def test_classify_labelled_failures(exc: BaseException, kind: ErrorKind) -> None:
    assert classify_error(exc) is kind


def test_attempts_allowed_per_kind() -> None:
    p = RetryPolicy()
    assert [p.attempts_allowed(k) for k in (T, F, P, U)] == [3, 1, 1, 2]


def test_backoff_is_exponential_with_bounded_jitter() -> None:
    p = RetryPolicy(backoff_base_s=1.0, backoff_max_s=8.0)
    rng = random.Random(0)
    for n, d in [(1, 1.0), (2, 2.0), (3, 4.0), (4, 8.0), (6, 8.0)]:
        delays = [p.backoff_s(n, rng) for _ in range(200)]
        assert min(delays) >= d / 2 and max(delays) <= d
        assert max(delays) - min(delays) > d / 4  # jitter spreads retries out


def test_retry_budget_caps_extra_load() -> None:
    b = RetryBudget(ratio=0.1, floor=0)
    for _ in range(100):
        b.record_first()
    spent = sum(b.try_spend() for _ in range(100))
    assert spent == 10


def test_bad_policy_values_are_refused() -> None:
    with pytest.raises(ValueError, match="max_attempts"):
        RetryPolicy(max_attempts=0)


def _run(name: str, times: int, **kw) -> tuple[object, object]:
    sched = Scheduler(MemoryStore(), workers=2, retry=RetryPolicy(backoff_base_s=0.01,
                                                                  backoff_max_s=0.02), **kw)
    job_id = sched.submit(sched_jobs.fail_times, name, times, kind="t")
    try:
        out: object = sched.result(job_id, timeout=20)
    except JobFailedError as exc:
        out = exc.failure
    row = sched.store.get(job_id)
    sched.close()
    return out, row


@pytest.mark.parametrize("name", ["ParseError", "PromptTooLongError", "ModelCodeError"])
def test_task_errors_are_never_retried(name: str) -> None:
    out, row = _run(name, 5)
    assert row.attempts == 1 and row.failures == 1 and row.status == "failed"
    assert out.error_class == name and not out.quarantined


@pytest.mark.parametrize("name", ["SandboxError", "WorkerLostError", "PolicyServerError",
                                  "ConnectionError"])
def test_transient_errors_retry_up_to_three_attempts(name: str) -> None:
    out, row = _run(name, 2)
    assert out == 7 and row.attempts == 3 and row.status == "done"
    out, row = _run(name, 3)
    assert row.attempts == 3 and row.status == "failed" and not row.quarantined


def test_unknown_error_retried_once_then_quarantined() -> None:
    out, row = _run("ValueError", 1)
    assert out == 7 and row.attempts == 2
    out, row = _run("ValueError", 5)
    assert row.attempts == 2 and row.status == "failed" and row.quarantined == 1
    assert out.quarantined and out.error_class == "ValueError"


def test_preempted_requeued_without_counting_as_failure() -> None:
    out, row = _run("PreemptedError", 3)
    assert out == 7 and row.status == "done"
    assert row.preemptions == 3 and row.failures == 0 and row.attempts == 1


def test_retry_gets_adapted_hints() -> None:
    sched = Scheduler(workers=2, retry=RetryPolicy(backoff_base_s=0.01, backoff_max_s=0.02))
    got = sched.result(sched.submit(sched_jobs.hints_seen, 0), timeout=10)
    sched.close()
    assert got["attempt"] == 2 and got["fresh_sandbox"] is True
    assert got["memory_scale"] == 2.0 and got["last_error"] == "WorkerLostError"
    assert got["avoid_worker"].startswith("w")


def test_retry_storm_stays_within_ten_percent() -> None:
    n = 300
    sched = Scheduler(workers=4, retry=RetryPolicy(backoff_base_s=0.001, backoff_max_s=0.002,
                                                   budget_floor=3))
    ids = [sched.submit(sched_jobs.fail_times, "SandboxError", 9, kind="storm")
           for _ in range(n)]
    assert sched.join(timeout=30)
    failures = []
    for job_id in ids:
        with pytest.raises(JobFailedError) as info:
            sched.result(job_id)
        failures.append(info.value.failure)
    sched.close()
    assert all(f.error_class == "SandboxError" for f in failures)
    assert sum("retry budget exhausted" in f.error_message for f in failures) > n / 2
    total = sched.metrics()["storm"]["attempts"]["total"]
    assert n < total <= 1.1 * n + 3, total
