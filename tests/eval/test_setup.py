"""The base-model cache follows what the domains generate, not only their ids."""

from __future__ import annotations

from polyrl.config import TinyModelSection
from polyrl.domains.math.sequence import NumberSequence
from polyrl.domains.registry import get_domain
from polyrl.eval.setup import domains_fingerprint
from polyrl.models.warmstart import cache_key


def test_fingerprint_changes_with_a_domains_split_under_the_same_id():
    arith = get_domain("math/arith-v1")
    now = domains_fingerprint([arith, NumberSequence()], seed=0)
    assert now == domains_fingerprint([NumberSequence(), arith], seed=0)  # order-free
    # the same id with another split: the old base may have trained on today's test tasks
    old_split = domains_fingerprint([arith, NumberSequence(test_per_10=1)], seed=0)
    assert old_split != now
    assert domains_fingerprint([arith, NumberSequence()], seed=1) != now
    tiny = TinyModelSection()
    ids = ["math/arith-v1", "math/sequence-v1"]
    assert cache_key(tiny, ids, 0, now) != cache_key(tiny, ids, 0, old_split)
    assert cache_key(tiny, ids, 0, now) == cache_key(tiny, ids, 0, now)
