"""The report's PNG plots, drawn with matplotlib (Agg backend: no display needed).

Each function takes plain data (lists of metric records, the summary dict) and a
path, writes one PNG, and returns the path -- or None when there is nothing to
plot (e.g. no training steps were recorded).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from polyrl.eval.summary import signed  # noqa: E402

DPI = 110
"""Resolution of every PNG (dots per inch)."""


def _series(records: Sequence[dict[str, Any]], key: str) -> tuple[list[int], list[float]]:
    """``(steps, values)`` of metric ``key`` over records where it is a number."""
    xs, ys = [], []
    for r in records:
        v = r.get(key)
        if isinstance(v, (int, float)) and "step" in r:
            xs.append(int(r["step"]))
            ys.append(float(v))
    return xs, ys


def _smooth(ys: list[float], window: int) -> list[float]:
    """Trailing moving average over ``window`` points."""
    out = []
    for i in range(len(ys)):
        part = ys[max(0, i - window + 1) : i + 1]
        out.append(sum(part) / len(part))
    return out


def domain_keys(records: Sequence[dict[str, Any]], prefix: str) -> list[str]:
    """Domain ids found as ``<prefix>/<domain id>`` keys (no deeper ``/d<k>`` arms)."""
    ids: dict[str, None] = {}
    for r in records:
        for k in r:
            if not k.startswith(prefix + "/"):
                continue
            rest = k[len(prefix) + 1 :]
            if rest == "mean" or rest.count("/") != 1:
                continue
            ids[rest] = None
    return sorted(ids)


def plot_reward(records: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """Training reward per domain over steps (raw, faint, and a moving average of
    ``max(5, steps // 25)`` steps)."""
    doms = domain_keys(records, "reward")
    if not doms:
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    window = max(5, len(records) // 25)
    for i, dom in enumerate(doms):
        xs, ys = _series(records, f"reward/{dom}")
        color = f"C{i % 10}"
        ax.plot(xs, ys, color=color, alpha=0.2, linewidth=1)
        ax.plot(xs, _smooth(ys, window), color=color, linewidth=2, label=dom)
    ax.set(xlabel="RL step", ylabel="mean training reward", title="Reward per domain",
           ylim=(-0.02, 1.02))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))  # never over a curve
    return _save(fig, path)


def plot_curriculum(records: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """Curriculum sampling weight of each domain over steps (stacked areas sum to 1).

    The weights are recomputed every step from that step's noisy statistics, so the
    areas show a moving average of ``max(5, steps // 25)`` steps (as the reward plot);
    a moving average of weights that sum to 1 still sums to 1."""
    doms = domain_keys(records, "curriculum")
    if not doms:
        return None
    steps = [int(r["step"]) for r in records if "step" in r]
    window = max(5, len(steps) // 25)
    stack = [_smooth([float(r.get(f"curriculum/{d}") or 0.0) for r in records if "step" in r],
                     window) for d in doms]
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    ax.stackplot(steps, stack, labels=doms, alpha=0.85)
    ax.set(xlabel="RL step", ylabel="sampling probability",
           title=f"Curriculum weights (moving average of {window} steps)", ylim=(0, 1))
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    return _save(fig, path)


LABEL_CHARS = 28
"""Longest domain id shown whole under a bar; longer ones keep their two ends."""


def short_label(name: str) -> str:
    """``name`` broken after its ``/``; over ``LABEL_CHARS`` characters, its middle is
    replaced by an ellipsis (a 150-character id ran under every other bar)."""
    if len(name) > LABEL_CHARS:
        half = (LABEL_CHARS - 1) // 2
        name = name[:half] + "\u2026" + name[-half:]
    return name.replace("/", "/\n", 1)


def bar_values(doms: dict[str, dict[str, Any]],
               stage: str) -> tuple[list[float], list[float], list[float]]:
    """``(means, below, above)`` of ``stage`` (``"baseline"``/``"post"``) per domain, in
    order: the bar heights (NaN, no bar, where the mean is n/a) and the error-bar
    lengths down to ``<stage>_ci95[0]`` and up to ``[1]`` (0 where n/a)."""
    nan = float("nan")
    means = [nan if v.get(stage) is None else float(v[stage]) for v in doms.values()]
    cis = [v.get(f"{stage}_ci95") or [None, None] for v in doms.values()]
    lo = [0.0 if m != m or c[0] is None else max(0.0, m - c[0])
          for m, c in zip(means, cis, strict=True)]
    hi = [0.0 if m != m or c[1] is None else max(0.0, c[1] - m)
          for m, c in zip(means, cis, strict=True)]
    return means, lo, hi


def delta_labels(summary: dict[str, Any]) -> list[str]:
    """The text over each domain's bars: its signed delta, `` *`` when improved, or
    ``n/a``."""
    imp = set(summary.get("improved_domains") or [])
    out = []
    for d, v in (summary.get("domains") or {}).items():
        delta = v.get("delta")
        out.append("n/a" if delta is None else f"{signed(delta)}{' *' if d in imp else ''}")
    return out


def plot_baseline_vs_post(summary: dict[str, Any], path: Path) -> Path | None:
    """Grouped bars: held-out mean reward before and after RL per domain, 95% intervals.

    A mean that is n/a (no task scored) gets no bar and an ``n/a`` label: it was drawn
    as a bar of height 0, a reward of 0 to the eye."""
    doms = summary.get("domains") or {}
    if not doms:
        return None
    names = list(doms)
    fig, ax = plt.subplots(figsize=(max(6.0, 1.4 * len(names) + 2), 4.4))
    width = 0.38
    for j, (stage, color) in enumerate((("baseline", "#8c8c8c"), ("post", "#1f77b4"))):
        means, lo, hi = bar_values(doms, stage)
        xs = [i + (j - 0.5) * width for i in range(len(names))]
        ax.bar(xs, means, width, yerr=[lo, hi], capsize=4, color=color,
               label="baseline" if stage == "baseline" else "post-RL")
    for i, text in enumerate(delta_labels(summary)):
        ax.text(i, 1.02, text, ha="center", fontsize=8)
    ax.set_xticks(range(len(names)), [short_label(n) for n in names], fontsize=8)
    ax.set(ylabel="held-out mean reward", ylim=(0, 1.1),
           title="Baseline vs post-RL (95% bootstrap intervals; * = paired CI above 0)")
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    ax.grid(axis="y", alpha=0.3)
    return _save(fig, path)


def plot_throughput(records: Sequence[dict[str, Any]], path: Path) -> Path | None:
    """Panels of the training run's own figures: scoring (sandbox) and generation
    seconds per step, trained tokens per second, and, when the records hold
    ``replay/mib`` (the trainer logs it), the replay buffer's memory in MiB with its
    group count (``replay/size``) on a second axis."""
    xs_s, sandbox = _series(records, "sandbox_s")
    xs_t, tps = _series(records, "tokens_per_s")
    xs_m, mib = _series(records, "replay/mib")
    if not xs_s and not xs_t and not xs_m:
        return None
    fig, axes = plt.subplots(1, 3 if xs_m else 2, figsize=(13.5 if xs_m else 9.5, 3.6))
    a1, a2 = axes[0], axes[1]
    a1.plot(xs_s, sandbox, color="C3")
    xs_g, gen = _series(records, "time/generate_s")
    if xs_g:
        a1.plot(xs_g, gen, color="C0", label="generate")
        a1.plot([], [], color="C3", label="score (sandbox)")
        a1.legend(fontsize=8)
    a1.set(xlabel="RL step", ylabel="seconds per step", title="Scoring and generation time")
    a1.grid(alpha=0.3)
    a2.plot(xs_t, tps, color="C2")
    a2.set(xlabel="RL step", ylabel="tokens / s", title="Update throughput")
    a2.grid(alpha=0.3)
    if xs_m:
        _plot_replay(axes[2], records, xs_m, mib)
    return _save(fig, path)


def has_replay_memory(records: Sequence[dict[str, Any]]) -> bool:
    """Whether any record holds a number for ``replay/mib`` (``plot_throughput`` then
    draws its replay panel)."""
    return bool(_series(records, "replay/mib")[0])


def _plot_replay(ax: Any, records: Sequence[dict[str, Any]], xs: list[int],
                 mib: list[float]) -> None:
    """The replay buffer's memory (``replay/mib``, MiB) over steps on ``ax``, and its
    size in groups (``replay/size``) dashed on a second y axis when logged."""
    ax.plot(xs, mib, color="C4", label="memory (MiB)")
    ax.set(xlabel="RL step", ylabel="MiB", title="Replay buffer", ylim=(0, None))
    ax.grid(alpha=0.3)
    xs_n, size = _series(records, "replay/size")
    if xs_n:
        twin = ax.twinx()
        twin.plot(xs_n, size, color="C5", linestyle="--")
        twin.set(ylabel="groups", ylim=(0, None))
        ax.plot([], [], color="C5", linestyle="--", label="size (groups)")
    ax.legend(fontsize=8, loc="upper left")


def _save(fig: Any, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=DPI)
    plt.close(fig)
    return path
