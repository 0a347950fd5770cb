"""`decide._score` splits the overlap groups where siblings make nodes differ, without a sort:
it must order the parts exactly as sorting them by (most bytes, not excluded, fewest extra
siblings) would, and step each part's weight by its extra siblings beyond the fewest of any
node holding at least as many bytes. Checked against that plain definition on random groups
and spread states; weighed from what a node lacks (lack_bytes), each part's weight counts
from the most bytes a node the guard leaves open holds."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import lack_weight_of
from webhook.core.decide import _score
from webhook.core.scoring import MiB, ScoringPolicy, spread_weight
from webhook.core.spend import ScoredGroup
from webhook.core.spread import SpreadState

# The groups' weights as given (no lack_bytes: _score re-weighs nothing): the split alone.
POLICY = ScoringPolicy(lack_bytes=0)
LACK = ScoringPolicy()


class SlotIndex:
    """Node `k` sits at slot k."""

    def bit(self, name: str) -> int:
        return 1 << int(name)


def by_sorting(groups: list[tuple[int, int, int]], spread: SpreadState,
               policy: ScoringPolicy = POLICY) -> list[ScoredGroup]:
    extra = {int(name): e for name, e in spread.extra.items()}
    extra.update({int(name): -1 for name in spread.excluded})
    parts: dict[tuple[int, int], int] = {}
    for bytes_present, _weight, mask in groups:
        for slot in range(mask.bit_length()):
            if mask >> slot & 1:
                key = (bytes_present, extra.get(slot, 0))
                parts[key] = parts.get(key, 0) | 1 << slot
    weights = {b: w for b, w, _ in groups}
    # the fewest extra siblings of any node holding at least `b` bytes (excluded ones aside)
    fewest = {b: min((e for (bb, e) in parts if bb >= b and e >= 0), default=0)
              for b in weights}

    def weight(b: int, e: int) -> int:
        return 0 if e < 0 else spread_weight(weights[b], e - fewest[b], policy)

    return sorted((ScoredGroup(b, e, weight(b, e), m) for (b, e), m in parts.items()),
                  key=lambda g: (-g.bytes_present, g.extra_siblings < 0, g.extra_siblings))


@given(assign=st.lists(st.integers(0, 4), min_size=1, max_size=40),
       weights=st.lists(st.integers(0, 100), min_size=5, max_size=5),
       siblings=st.lists(st.integers(-1, 3), min_size=40, max_size=40))
def test_the_split_is_ordered_as_a_sort_would(assign: list[int], weights: list[int],
                                              siblings: list[int]) -> None:
    groups = []
    for g in range(5):
        mask = sum(1 << slot for slot, group in enumerate(assign) if group == g)
        if mask:
            groups.append((1000 - g, weights[g], mask))  # most bytes first, one per count
    nodes = range(len(assign))
    spread = SpreadState(3, 0, {str(k): siblings[k] for k in nodes if siblings[k] > 0},
                         frozenset(str(k) for k in nodes if siblings[k] < 0), {})
    index: Any = SlotIndex()  # the one LayerIndex method _score uses
    assert _score(groups, spread, index, POLICY)[0] == by_sorting(groups, spread)


@given(assign=st.lists(st.integers(0, 4), min_size=1, max_size=40),
       siblings=st.lists(st.integers(-1, 3), min_size=40, max_size=40))
def test_weights_from_what_a_node_lacks_count_from_the_best_open_node(
        assign: list[int], siblings: list[int]) -> None:
    """Groups 10 MiB apart (some below the floor, some lacking more than lack_bytes beyond
    others): each weighs what it lacks beyond the most bytes of a node not excluded,
    whatever weights it came with; the split and the steps as above."""
    open_bytes = []
    groups = []
    for g in range(5):
        slots = [slot for slot, group in enumerate(assign) if group == g]
        if slots:
            bytes_present = (60 - 10 * g) * MiB
            groups.append((bytes_present, 100, sum(1 << slot for slot in slots)))
            if any(siblings[slot] >= 0 for slot in slots):
                open_bytes.append(bytes_present)
    best = max(open_bytes, default=0)
    nodes = range(len(assign))
    spread = SpreadState(3, 0, {str(k): siblings[k] for k in nodes if siblings[k] > 0},
                         frozenset(str(k) for k in nodes if siblings[k] < 0), {})
    weighed = [(b, lack_weight_of(b, best, LACK) if best else 0, m) for b, _, m in groups]
    index: Any = SlotIndex()
    assert _score(groups, spread, index, LACK)[0] == by_sorting(weighed, spread, LACK)
