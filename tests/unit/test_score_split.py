"""`decide._score` splits the overlap groups where siblings make nodes differ, without a sort:
it must order the parts exactly as sorting them by (most bytes, not excluded, fewest extra
siblings) would, and step each part's weight by its extra siblings beyond the fewest of any
node holding at least as many bytes. Checked against that plain definition on random groups
and spread states."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from webhook.core.decide import _score
from webhook.core.scoring import ScoringPolicy, spread_weight
from webhook.core.spend import ScoredGroup
from webhook.core.spread import SpreadState

POLICY = ScoringPolicy()


class SlotIndex:
    """Node `k` sits at slot k."""

    def bit(self, name: str) -> int:
        return 1 << int(name)


def by_sorting(groups: list[tuple[int, int, int]], spread: SpreadState) -> list[ScoredGroup]:
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
        return 0 if e < 0 else spread_weight(weights[b], e - fewest[b], POLICY)

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
