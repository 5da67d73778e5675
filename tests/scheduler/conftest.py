"""Puts this folder on sys.path so ``sched_jobs`` is importable by a stable top-level name
(durable jobs are recorded as ``sched_jobs:<function>``; subprocesses and Ray workers get
the same folder through PYTHONPATH)."""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))
