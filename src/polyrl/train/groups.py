"""Groups: the G scored completions of one prompt, and how a step's groups are built.

``build_groups`` turns a task-major list of completions and their scores into
``Group``s with group-relative advantages (``polyrl.train.advantages``): it drops
completions whose score is an infrastructure error (``Score.ok`` False: never
trained on), applies DAPO's overlong penalty, and marks groups that carry no
signal (all rewards equal).
"""

from __future__ import annotations

import hashlib
from collections.abc import Hashable, Sequence
from dataclasses import asdict, dataclass, field

import numpy as np
import torch

from polyrl.train.advantages import STD_EPS, group_advantages, overlong_penalty
from polyrl.types import Completion, Episode, Score, Task


@dataclass
class Group:
    """The G completions of one prompt, scored, with their advantages.

    Attributes:
        task: the prompt's ``Task``.
        arm: the curriculum arm index it was drawn from (-1 = unknown).
        prompt_ids: (prompt_len,) token ids.
        completions: G lists of completion token ids.
        behaviour_logprobs: G lists of sampling-time log-probs (may be empty lists).
        rewards: (G,) rewards in [0, 1] (after any overlong penalty: may be < 0).
        advantages: (G,) advantages.
        policy_version: the optimizer step whose weights sampled it.
        replayed: True when it comes from the replay buffer.
        finish_reasons: G finish reasons (``"stop"``/``"length"``).
        loss_masks: G lists aligned with ``completions``: 1 on tokens the policy
            sampled (trained), 0 on environment/observation tokens of multi-turn
            episodes; empty = every token is trained.

    A group drawn from the replay buffer holds tuples where these are lists: rows it
    shares, read-only, with the buffer (``ReplayBuffer.sample``).
    """

    task: Task
    arm: int
    prompt_ids: list[int]
    completions: list[list[int]]
    behaviour_logprobs: list[list[float]]
    rewards: list[float]
    advantages: list[float]
    policy_version: int
    replayed: bool = False
    finish_reasons: list[str] = field(default_factory=list)
    loss_masks: list[list[int]] = field(default_factory=list)

    def mask(self, i: int) -> list[int]:
        """(len(completions[i]),) loss mask of completion ``i`` (1 = trained)."""
        return self.loss_masks[i] if self.loss_masks else [1] * len(self.completions[i])

    @property
    def key(self) -> str:
        """Identity for de-duplication: domain, task id and the completion tokens (the
        same whether the token rows are lists or tuples, as the replay buffer keeps them)."""
        rows = (list(self.prompt_ids), [list(c) for c in self.completions])
        h = hashlib.sha1(repr(rows).encode()).hexdigest()[:16]
        return f"{self.task.domain}|{self.task.id}|{h}"

    @property
    def priority(self) -> float:
        """p(1-p) of the mean reward p (clamped to [0, 1]), plus 1e-6."""
        p = min(1.0, max(0.0, float(np.mean(self.rewards))))
        return p * (1 - p) + 1e-6

    def to_dict(self) -> dict:
        """JSON-safe form (for checkpoints)."""
        d = asdict(self)
        d["task"] = self.task.to_dict()
        return d

    @classmethod
    def from_dict(cls, data: dict) -> Group:
        """Inverse of ``to_dict``."""
        data = dict(data)
        data["task"] = Task.from_dict(data["task"])
        return cls(**data)


def first_occurrences(keys: Sequence[Hashable | None]) -> tuple[list[int], list[int]]:
    """Collapse repeated keys: the shared mechanism of score and row de-duplication.

    Args:
        keys: n keys; ``None`` never equals anything (always kept).

    Returns:
        ``(kept, owner)``: indices of the first occurrences, in order, and for each of
        the n inputs the position in ``kept`` of the occurrence it repeats (or is).
    """
    kept: list[int] = []
    owner: list[int] = []
    seen: dict[Hashable, int] = {}
    for i, key in enumerate(keys):
        if key is not None and key in seen:
            owner.append(seen[key])
            continue
        if key is not None:
            seen[key] = len(kept)
        owner.append(len(kept))
        kept.append(i)
    return kept, owner


@dataclass
class BuildStats:
    """What ``build_groups`` dropped or found.

    Attributes:
        score_errors: completions whose score was an infrastructure/grader error.
        dropped_groups: groups left with fewer than 2 valid completions.
        rewards_by_domain: domain id -> list of raw rewards of valid completions.
    """

    score_errors: int = 0
    dropped_groups: int = 0
    rewards_by_domain: dict[str, list[float]] = field(default_factory=dict)


def build_groups(
    picks: Sequence[tuple[Task, int]],
    completions: Sequence[Completion | Episode],
    scores: Sequence[Score],
    *,
    group_size: int,
    version: int,
    scale: str = "group",
    max_tokens: int = 0,
    overlong_buffer_tokens: int = 0,
) -> tuple[list[Group], BuildStats]:
    """Assemble scored, task-major completions into groups with advantages.

    Args:
        picks: n ``(task, curriculum arm)`` pairs, in the order they were generated.
        completions: n * group_size completions (or multi-turn episodes), task-major
            (task 0's G first).
        scores: one ``Score`` per completion.
        group_size: G.
        version: the policy version (optimizer step) that sampled them.
        scale: advantage std scaling: "group", "batch", "none" (``group_advantages``) or
            "domain" (the pooled within-group std of each domain's groups in the step).
        max_tokens: the generation limit (for the overlong penalty), tokens: per
            completion, or per model turn of a multi-turn episode (whose penalty is
            then taken on its longest model turn, the one the limit applies to).
        overlong_buffer_tokens: DAPO's overlong window; 0 = no penalty.

    Returns:
        ``(groups, stats)``; groups keep the pick order; completions with a failed
        score are left out of their group (never trained on).

    Raises:
        ValueError: the numbers of completions / scores do not match ``picks * G``.
    """
    n = len(picks) * group_size
    if len(completions) != n or len(scores) != n:
        raise ValueError(f"expected {n} completions and scores ({len(picks)} tasks x G="
                         f"{group_size}), got {len(completions)} and {len(scores)}")
    stats = BuildStats()
    groups: list[Group] = []
    for i, (task, arm) in enumerate(picks):
        block = range(i * group_size, (i + 1) * group_size)
        valid = [j for j in block if scores[j].ok]
        stats.score_errors += group_size - len(valid)
        stats.rewards_by_domain.setdefault(task.domain, []).extend(
            scores[j].reward for j in valid)
        if len(valid) < 2:
            stats.dropped_groups += 1
            continue
        prompt, rows, lps, masks, finish = _sequences([completions[j] for j in valid])
        lengths = torch.tensor([_limited_length(completions[j]) for j in valid])
        rewards = torch.tensor([scores[j].reward for j in valid], dtype=torch.float32)
        rewards = rewards + overlong_penalty(lengths, max_tokens, overlong_buffer_tokens)
        groups.append(Group(
            task=task, arm=arm, prompt_ids=prompt, completions=rows, behaviour_logprobs=lps,
            rewards=rewards.tolist(), advantages=[], policy_version=version,
            finish_reasons=finish, loss_masks=masks))
    _set_advantages(groups, scale)
    return groups, stats


def _limited_length(answer: Completion | Episode) -> int:
    """Tokens the generation limit applies to: the completion's, or an episode's
    longest model turn (``max_new_tokens`` is a per-turn limit)."""
    if isinstance(answer, Episode):
        return max((len(t.token_ids) for t in answer.turns if t.trainable), default=0)
    return len(answer.token_ids)


def _sequences(answers: Sequence[Completion | Episode]) -> tuple[
        list[int], list[list[int]], list[list[float]], list[list[int]], list[str]]:
    """Token rows of one group: (shared prompt, completions, logprobs, loss masks, finish).

    A multi-turn ``Episode`` contributes its model and environment turns (mask 0 on
    the latter). When the samples' prompts differ (an env whose first observation
    varies), the group's prompt is their longest common prefix and each sample's
    rest of prompt leads its completion with mask 0.

    Raises:
        ValueError: the samples share no prompt token.
    """
    flat = []
    for a in answers:
        if isinstance(a, Episode):
            ids, lps, mask = a.flat_tokens()
            finish = "length" if a.truncated else "stop"
            if any(len(t.logprobs) != len(t.token_ids) for t in a.turns if t.trainable):
                lps = []  # a model turn without sampling logprobs: flat_tokens' 0.0 fill
                # would read as log mu = 0 and weigh a replayed row by pi instead of pi/mu
        else:
            ids, lps, mask = list(a.token_ids), list(a.logprobs), [1] * len(a.token_ids)
            finish = a.finish_reason
            if len(lps) != len(ids):
                lps = []  # a backend without logprobs
        flat.append((list(a.prompt_token_ids), ids, lps, mask, finish))
    common = flat[0][0]
    for p, *_ in flat[1:]:
        n = 0
        while n < min(len(common), len(p)) and common[n] == p[n]:
            n += 1
        common = common[:n]
    if not common:
        raise ValueError("the samples of a group share no prompt token")
    rows, lps_out, masks, finishes = [], [], [], []
    for p, ids, lps, mask, finish in flat:
        extra = p[len(common):]
        rows.append(extra + ids)
        lps_out.append([0.0] * len(extra) + lps if lps else [])
        masks.append([0] * len(extra) + mask)
        finishes.append(finish)
    return list(common), rows, lps_out, masks, finishes


def _set_advantages(groups: list[Group], scale: str) -> None:
    """Fill ``advantages`` of each group (groups may differ in size).

    ``scale="domain"``: each group's centred rewards are divided by the pooled
    within-group std of its domain's groups in this step,
    ``sqrt(sum_g sum_i (r_gi - mean_g)^2 / (n_d - groups_d))``. Every domain's
    advantages then have unit scale whatever its reward scale (per-task normalisation
    of multi-task RL, after PopArt, Hessel et al., arXiv 1809.04474), while a group whose
    rewards differ by a hair keeps small advantages (per-group std scaling blows those
    up to +-1, the bias Dr. GRPO, arXiv 2503.20783, points out).
    """
    if not groups:
        return
    divisor: dict[int, float] = {}  # id(group) -> std its centred rewards are divided by
    if scale == "batch":
        every = np.array([r for g in groups for r in g.rewards])
        std = float(every.std(ddof=1)) if every.size > 1 else 0.0
        divisor = {id(g): std for g in groups}
    elif scale == "domain":
        by_domain: dict[str, list[Group]] = {}
        for g in groups:
            by_domain.setdefault(g.task.domain, []).append(g)
        for gs in by_domain.values():
            sq = sum(float(((np.asarray(g.rewards) - np.mean(g.rewards)) ** 2).sum()) for g in gs)
            dof = sum(len(g.rewards) for g in gs) - len(gs)
            std = (sq / dof) ** 0.5 if dof > 0 else 0.0
            divisor.update({id(g): std for g in gs})
    for g in groups:
        r = torch.tensor(g.rewards, dtype=torch.float32).unsqueeze(0)  # (1, G)
        if id(g) in divisor:
            adv = group_advantages(r, "none") / (divisor[id(g)] + STD_EPS)
        else:
            adv = group_advantages(r, scale)
        g.advantages = adv.squeeze(0).tolist()


def has_signal(group: Group, atol: float = 1e-6) -> bool:
    """True when the group's rewards are not all equal (it carries a gradient)."""
    r = np.asarray(group.rewards)
    return bool(np.abs(r - r[0]).max() > atol)
