"""Prepared.picks (the memo's listing of a group's nodes, for the pods after the first): always
the nodes index.picks gives, in the same order, for any group, limit and salt, whether the
group is one of the entry's own, a part of one (the spread guard splits groups) or too large
to list."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import AMD64, image, inventory, node_object
from webhook.core.affinity import PreferredTerm
from webhook.core.index import LayerIndex
from webhook.core.prepare import LISTED_NODES, Prepared, Spent, listing_bytes, prepare, spent_bytes
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.core.spend import ScoredGroup
from webhook.registry.catalog import StaticCatalog

APP = image("registry.example.com/team/app:v1", {AMD64: [("base", 80 * MiB), ("code", 20 * MiB)]})
BASE = image("registry.example.com/team/base:v1", {AMD64: [("base", 80 * MiB)]})
CATALOG = StaticCatalog([APP, BASE])
POLICY = ScoringPolicy()
ALTERNATE = int("01" * 400, 2)  # every other slot: a part of a group


def prepared_for(holds: list[int]) -> tuple[LayerIndex, Prepared, list[ScoredGroup]]:
    _, index = inventory([node_object(f"n{k:03d}", [[], [BASE], [APP]][h])
                          for k, h in enumerate(holds)], CATALOG)
    prepared = prepare([APP], [], index, POLICY)
    return index, prepared, [ScoredGroup(b, 0, w, m) for b, w, m in prepared.groups]


def names(nodes: object) -> list[str]:
    return [node.name for node in nodes]  # type: ignore[attr-defined]


@settings(max_examples=150, deadline=None)
@given(holds=st.lists(st.sampled_from([0, 1, 2]), min_size=1, max_size=40),
       asks=st.lists(st.tuples(st.integers(-1, 45), st.text(max_size=4), st.booleans()),
                     min_size=1, max_size=8))
def test_prepared_picks_are_the_index_picks(
    holds: list[int], asks: list[tuple[int, str, bool]]
) -> None:
    index, prepared, own = prepared_for(holds)
    for limit, salt, split in asks:  # one pod after another, sharing the entry
        for group in own:
            if split:  # a part of the group, with its bytes
                group = ScoredGroup(group.bytes_present, 1, group.weight,
                                    group.mask & ALTERNATE)
                if not group.mask:
                    continue
            assert names(prepared.picks(index, group, limit, salt)) == names(
                index.picks(group.mask, limit, salt)), (limit, salt, split)


def test_a_group_too_large_to_list_is_picked_from_the_index() -> None:
    index, prepared, own = prepared_for([2] * (LISTED_NODES + 40) + [0])
    (large,) = [group for group in own if group.mask.bit_count() > LISTED_NODES]
    for salt in ("a", "b", "c", "d", "e", "f"):
        for _ in range(2):
            assert names(prepared.picks(index, large, 30, salt)) == names(
                index.picks(large.mask, 30, salt))
    assert not prepared.listings
    index, prepared, own = prepared_for([2] * LISTED_NODES + [0])
    (listable,) = [group for group in own if group.mask.bit_count() == LISTED_NODES]
    prepared.picks(index, listable, 30, "a")
    assert prepared.listings  # exactly LISTED_NODES: listed


def test_the_memo_byte_estimates_grow_with_what_is_cached() -> None:
    """listing_bytes and spent_bytes bound the decision memo (memo.py): each more node,
    run, term or hostname cached is counted, and nothing costs less than nothing."""
    index, prepared, own = prepared_for([2] * 10 + [1] * 5 + [0])
    assert listing_bytes(prepared) == 0
    prepared.picks(index, own[0], 3, "a")
    one = listing_bytes(prepared)
    prepared.picks(index, own[1], 3, "a")
    assert 0 < one < listing_bytes(prepared)
    bigger_index, bigger, bigger_own = prepared_for([2] * 20 + [0])
    bigger.picks(bigger_index, bigger_own[0], 3, "a")
    assert listing_bytes(bigger) > one  # a listing of 20 nodes against one of 10

    nodes = tuple(node for node in index.picks(own[0].mask, 10, ""))
    term = PreferredTerm(100, tuple(node.hostname for node in nodes[:2]))

    def spent(named: int, runs: int, terms: int, hostnames: int) -> int:
        term_of = PreferredTerm(100, tuple(node.hostname for node in nodes[:hostnames]))
        return spent_bytes(Spent(nodes[:named], ((1, 0, 100),) * runs, 0, (term_of,) * terms))

    base = spent(2, 1, 1, 2)
    assert base > 0 and spent_bytes(Spent(nodes[:2], ((1, 0, 100),), 0, (term,))) == base
    assert spent(3, 1, 1, 2) > base and spent(2, 2, 1, 2) > base
    assert spent(2, 1, 2, 2) > base and spent(2, 1, 1, 3) > base
