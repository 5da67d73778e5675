"""Eval: measure and explain -- held-out evaluation, statistics, headroom, the main job, report.

Public API::

    from polyrl.eval import evaluate, report, bootstrap_ci, paired_bootstrap_ci, pass_at_k
    from polyrl.eval.headroom import headroom
    from polyrl.eval.pipeline import new_run, run_main_job
"""

from polyrl.eval.evaluate import DomainResult, EvalReport, SampleRow, evaluate, heldout_tasks
from polyrl.eval.report import report
from polyrl.eval.stats import bootstrap_ci, mean_pass_at_k, paired_bootstrap_ci, pass_at_k

__all__ = [
    "DomainResult",
    "EvalReport",
    "SampleRow",
    "bootstrap_ci",
    "evaluate",
    "heldout_tasks",
    "mean_pass_at_k",
    "paired_bootstrap_ci",
    "pass_at_k",
    "report",
]
