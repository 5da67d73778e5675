"""Eval: measure and explain -- held-out evaluation, statistics, headroom, the main job, report.

Public API::

    from polyrl.eval import evaluate, report, bootstrap_ci, paired_bootstrap_ci, pass_at_k
    from polyrl.eval.headroom import headroom
    from polyrl.eval.pipeline import new_run, run_main_job

The names above are imported on first use (module ``__getattr__``): ``evaluate`` and
``report`` pull in torch and transformers (seconds), which the light submodules
(``polyrl.eval.rundir``, ``polyrl.eval.stats``) do not need: ``polyrl resume`` of a
finished run reads its state through ``rundir`` and answers without them.
"""

from __future__ import annotations

import sys
import types
from typing import Any

from polyrl.lazy import lazy_exports

_LAZY = {
    "DomainResult": "evaluate",
    "EvalReport": "evaluate",
    "SampleRow": "evaluate",
    "evaluate": "evaluate",
    "heldout_tasks": "evaluate",
    "report": "report",
    "bootstrap_ci": "stats",
    "mean_pass_at_k": "stats",
    "paired_bootstrap_ci": "stats",
    "pass_at_k": "stats",
}
"""Public name -> the submodule of ``polyrl.eval`` that defines it."""

__all__ = sorted(_LAZY)


__getattr__, __dir__ = lazy_exports(__name__, _LAZY)


class _Package(types.ModuleType):
    """``polyrl.eval`` itself: importing the submodule ``polyrl.eval.evaluate`` (or
    ``.report``) binds the package attribute of that name to the module, which would
    hide the function ``evaluate`` (``report``) of the public API once any code
    imported the submodule first; this keeps the function."""

    def __setattr__(self, name: str, value: Any) -> None:
        if isinstance(value, types.ModuleType) and _LAZY.get(name) == name:
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
