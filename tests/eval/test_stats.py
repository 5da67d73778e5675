"""Tests of polyrl.eval.stats against hand-computed values."""

from math import comb

import numpy as np
import pytest

from polyrl.eval.stats import (
    bootstrap_ci,
    ks_for,
    mean_pass_at_k,
    paired_bootstrap_ci,
    pass_at_k,
)


def test_pass_at_k_matches_the_combinatorial_formula():
    for n, c, k in [(10, 3, 1), (10, 3, 5), (20, 0, 4), (5, 5, 2), (7, 2, 6), (100, 1, 10)]:
        want = 1 - comb(n - c, k) / comb(n, k)
        assert pass_at_k(n, c, k) == pytest.approx(want, abs=1e-12)
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)  # pass@1 is the pass fraction
    assert pass_at_k(4, 2, 3) == 1.0  # fewer failures than k: some sample passes


def test_pass_at_k_rejects_bad_counts():
    with pytest.raises(ValueError):
        pass_at_k(5, 6, 1)
    with pytest.raises(ValueError):
        pass_at_k(5, 1, 6)


def test_mean_pass_at_k_averages_tasks():
    verdicts = [[True, False], [False, False], [True, True]]
    assert mean_pass_at_k(verdicts, 1) == pytest.approx((0.5 + 0 + 1) / 3)
    assert mean_pass_at_k(verdicts, 2) == pytest.approx((1 + 0 + 1) / 3)


def test_bootstrap_ci_contains_mean_and_shrinks_with_n():
    rng = np.random.default_rng(1)
    small = rng.uniform(size=20)
    large = rng.uniform(size=2000)
    lo_s, hi_s = bootstrap_ci(small, seed=3)
    lo_l, hi_l = bootstrap_ci(large, seed=3)
    assert lo_s <= small.mean() <= hi_s
    assert lo_l <= large.mean() <= hi_l
    assert hi_l - lo_l < (hi_s - lo_s) / 5
    # normal approximation: half-width ~ 1.96 * sd / sqrt(n)
    half = 1.96 * large.std(ddof=1) / np.sqrt(large.size)
    assert (hi_l - lo_l) / 2 == pytest.approx(half, rel=0.1)


def test_bootstrap_ci_degenerate_inputs():
    assert bootstrap_ci([0.7]) == (0.7, 0.7)
    assert bootstrap_ci([1.0] * 10) == (1.0, 1.0)
    lo, hi = bootstrap_ci([])
    assert np.isnan(lo) and np.isnan(hi)
    with pytest.raises(ValueError):
        bootstrap_ci([0.1, float("nan")])


def test_paired_bootstrap_sees_a_small_consistent_gain_that_unpaired_misses():
    rng = np.random.default_rng(0)
    difficulty = rng.uniform(size=64)  # tasks vary a lot ...
    before = difficulty
    after = difficulty + 0.03  # ... but every task gains 0.03
    lo, hi = paired_bootstrap_ci(before, after)
    assert lo == pytest.approx(0.03) and hi == pytest.approx(0.03)
    b_lo, b_hi = bootstrap_ci(before)
    a_lo, a_hi = bootstrap_ci(after)
    assert a_lo < b_hi  # the unpaired intervals overlap


def test_paired_bootstrap_of_noise_straddles_zero():
    rng = np.random.default_rng(5)
    before = rng.uniform(size=200)
    after = before + rng.normal(0, 0.1, size=200)
    after -= (after - before).mean()  # exactly zero mean difference
    lo, hi = paired_bootstrap_ci(before, after, seed=2)
    assert lo < 0 < hi


def test_paired_bootstrap_needs_equal_lengths():
    with pytest.raises(ValueError, match="differ in length"):
        paired_bootstrap_ci([0.1, 0.2], [0.3])


def test_ks_for():
    assert ks_for(1) == [1]
    assert ks_for(5) == [1, 2, 4, 5]
    assert ks_for(8) == [1, 2, 4, 8]


def test_paired_interval_of_fewer_than_two_tasks_is_nan():
    lo, hi = paired_bootstrap_ci([0.0], [1.0])
    assert np.isnan(lo) and np.isnan(hi)


def test_paired_interval_keeps_its_level_at_small_n():
    # null: before and after exchangeable; "improved" (lo > 0) must stay near 2.5%.
    # The plain percentile interval said "improved" 5.5% of the time at n = 8 tasks
    # (8% at n = 5, 50% at n = 1).
    rng = np.random.default_rng(2024)
    sims = 1500
    hits = 0
    for s in range(sims):
        before, after = rng.uniform(size=8), rng.uniform(size=8)
        hits += paired_bootstrap_ci(before, after, seed=s)[0] > 0
    assert hits / sims < 0.04
