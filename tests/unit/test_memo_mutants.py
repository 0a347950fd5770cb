"""The decision memo's keys and byte estimate: what counts as the same question, and bytes
that follow what the entries hold, whenever they are counted."""

from __future__ import annotations

import sys
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import AMD64, image, node_object, pod
from webhook.core.decide import finish
from webhook.core.index import LayerIndex
from webhook.core.memo import PrepareMemo, _int_bytes
from webhook.core.nodes import node_from_object
from webhook.core.prepare import Prepared
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.inventory.static import build_index
from webhook.registry.catalog import StaticCatalog

APP = image("r.example.com/t/app:1", {AMD64: [("base", 50 * MiB), ("app", 30 * MiB)]})
LIB = image("r.example.com/t/lib:1", {AMD64: [("base", 50 * MiB), ("lib", 40 * MiB)]})
OTHER = image("r.example.com/t/other:1", {AMD64: [("other", 60 * MiB)]})
CATALOG = StaticCatalog([APP, LIB, OTHER])


def index_of(held: list[list[Any]]) -> LayerIndex:
    """Node n holds the images held[n]."""
    index, _ = build_index([node_from_object(node_object(f"n{n:03}", images))
                            for n, images in enumerate(held)], CATALOG)
    return index


# Three groups for APP: the nodes holding it, those holding only its base (via LIB), none.
MIXED = index_of([[APP]] * 6 + [[LIB]] * 6 + [[OTHER]] * 6)


def test_a_new_memo_holds_nothing() -> None:
    memo = PrepareMemo()
    assert (len(memo), memo.bytes, memo.hits, memo.misses) == (0, 0, 0, 0)


def test_a_memo_of_one_entry_answers_the_repeated_question() -> None:
    memo = PrepareMemo(max_entries=1)
    policy = ScoringPolicy()
    first = memo.prepare([APP], [], MIXED, policy)
    assert memo.prepare([APP], [], MIXED, policy) is first
    assert (memo.hits, memo.misses, len(memo)) == (1, 1, 1)
    memo.prepare([LIB], [], MIXED, policy)  # the one entry is now LIB's
    assert memo.prepare([APP], [], MIXED, policy) is not first
    assert (memo.hits, memo.misses, len(memo)) == (1, 3, 1)


def test_an_equal_policy_is_the_same_policy() -> None:
    """A Mutator keeps its policy; a caller passing an equal copy asks the same question."""
    memo = PrepareMemo()
    first = memo.prepare([APP], [], MIXED, ScoringPolicy(max_nodes=7))
    assert memo.prepare([APP], [], MIXED, ScoringPolicy(max_nodes=7)) is first
    assert memo.hits == 1


def test_tolerations_are_the_same_question_in_any_key_order() -> None:
    memo = PrepareMemo()
    policy = ScoringPolicy()
    first = memo.prepare([APP], [{"key": "k", "operator": "Exists", "effect": "NoSchedule"}],
                         MIXED, policy)
    again = memo.prepare([APP], [{"effect": "NoSchedule", "operator": "Exists", "key": "k"}],
                         MIXED, policy)
    assert again is first and memo.hits == 1
    assert memo.prepare([APP], [{"key": "j", "operator": "Exists"}], MIXED, policy) is not first


@given(st.integers(min_value=1, max_value=1 << 40_000))
def test_an_int_is_estimated_at_what_cpython_holds(value: int) -> None:
    """A whole number of bytes, at least sys.getsizeof's and at most one 30-bit digit more
    (the estimate counts 4 bytes per 30 bits without rounding up, on a 28-byte header)."""
    estimate = _int_bytes(value)
    assert isinstance(estimate, int)
    assert sys.getsizeof(value) <= estimate <= sys.getsizeof(value) + 4


def test_a_full_30_bit_digit_is_estimated_one_digit_high() -> None:
    """Where the bounds above meet: 30 and 60 bits fill their digits exactly."""
    for bits in (30, 60, 3000):
        value = (1 << bits) - 1
        assert _int_bytes(value) == sys.getsizeof(value) + 4
        assert _int_bytes(value + 1) == sys.getsizeof(value + 1)


def test_an_entry_counts_more_bytes_for_more_nodes_and_more_groups() -> None:
    policy = ScoringPolicy()

    def entry_bytes(index: LayerIndex, images: list[Any]) -> int:
        memo = PrepareMemo()
        memo.prepare(images, [], index, policy)
        return memo.bytes

    for held in ([[APP]], [[APP], []]):  # one group, then two: the same groups, more nodes
        assert entry_bytes(index_of(held * 2000), [APP]) > entry_bytes(index_of(held * 2), [APP])
    one_group = index_of([[APP]] * 30)
    three_groups = index_of([[APP]] * 10 + [[LIB]] * 10 + [[OTHER]] * 10)
    assert entry_bytes(three_groups, [APP]) > entry_bytes(one_group, [APP])


def listable_groups(prepared: Prepared, policy: ScoringPolicy) -> list[Any]:
    groups, _ = prepared.plain(policy)
    return [g for g in groups if g.mask.bit_count() > 2]


def grow(prepared: Prepared, step: str, policy: ScoringPolicy) -> None:
    """One thing a review leaves on an entry: a pick list under a salt, or a listing."""
    kind, _, arg = step.partition(":")
    if kind == "finish":
        finish(pod([APP.ref]), prepared, MIXED, policy, salt=arg)
    else:
        prepared.picks(MIXED, listable_groups(prepared, policy)[int(arg)], 2, "s")


def test_the_bytes_do_not_depend_on_when_the_entry_is_looked_up() -> None:
    """Picks and listings left on an entry are counted at its next lookup: looked up after
    every review, or once after all of them, the entry ends up counting the same bytes."""
    policy = ScoringPolicy(max_nodes=2)
    steps = ["finish:pod-0", "picks:0", "finish:pod-1", "finish:pod-7", "picks:1"]
    eager, lazy = PrepareMemo(), PrepareMemo()
    prepared = eager.prepare([APP], [], MIXED, policy)
    sizes = [eager.bytes]
    for step in steps:
        grow(prepared, step, policy)
        assert eager.prepare([APP], [], MIXED, policy) is prepared
        sizes.append(eager.bytes)
    assert sizes == sorted(set(sizes)), "every step left something to count"
    late = lazy.prepare([APP], [], MIXED, policy)
    for step in steps:
        grow(late, step, policy)
    assert lazy.prepare([APP], [], MIXED, policy) is late
    assert len(late.spent) == len(prepared.spent) >= 2
    assert len(late.listings) == len(prepared.listings) == 2
    assert lazy.bytes == eager.bytes
    # and nothing more is counted when nothing more was left
    assert eager.prepare([APP], [], MIXED, policy) is prepared and eager.bytes == sizes[-1]
