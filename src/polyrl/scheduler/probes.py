"""Small importable job functions for benchmarks, health checks and tests.

They are top-level functions with JSON-safe arguments, so they are durable
(re-creatable by ``resume()``) and importable inside Ray workers.
"""

from __future__ import annotations

import time
from collections.abc import Generator
from typing import Any


def noop(x: Any = None) -> Any:
    """Return ``x`` unchanged (measures pure scheduling overhead)."""
    return x


def sleep_s(seconds: float) -> float:
    """Sleep ``seconds`` (releases the GIL, like waiting on a sandbox or server); return it."""
    time.sleep(seconds)
    return seconds


def sliced_sleep(total_s: float, slice_s: float = 0.1,
                 resume_state: float | None = None) -> Generator[float, None, float]:
    """A sliced job: sleep ``total_s`` seconds in slices of ``slice_s``, yielding between.

    Yields the seconds done so far (its state); re-created with ``resume_state`` it
    continues from there. Returns ``total_s``.
    """
    done = float(resume_state or 0.0)
    while done < total_s - 1e-9:
        step = min(slice_s, total_s - done)
        time.sleep(step)
        done += step
        if done < total_s - 1e-9:
            yield done
    return total_s
