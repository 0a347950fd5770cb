"""This replica's reviews that gave no node: their stored pods carry no decision, so the pod
watch cannot echo them by token; it shows each as a pending pod on no node, by uid, within
milliseconds. Until then each is counted on no node for its workload, for `grace` seconds
(the spread guard keeps its headroom while one is). Bounded by `limit` entries. Event loop
only."""

from __future__ import annotations

import sys
from collections import OrderedDict
from collections.abc import Callable

from webhook.inventory.counting import drop


class UnmarkedReviews:
    def __init__(self, grace: float, limit: int, clock: Callable[[], float]) -> None:
        self._grace = grace
        self._limit = limit
        self._clock = clock
        self._entries: OrderedDict[str, tuple[str, float]] = OrderedDict()  # token -> owner, until
        self._by_owner: dict[str, int] = {}

    def __contains__(self, token: str) -> bool:
        return token in self._entries

    def __len__(self) -> int:
        return len(self._entries)

    def add(self, owner: str, token: str) -> None:
        while len(self._entries) >= self._limit:
            drop(self._by_owner, self._entries.popitem(last=False)[1][0])
        owner = sys.intern(owner)
        self._entries[token] = (owner, self._clock() + self._grace)
        self._by_owner[owner] = self._by_owner.get(owner, 0) + 1

    def remove(self, token: str) -> None:
        """Seen by the watch, or given up on."""
        entry = self._entries.pop(token, None)
        if entry is not None:
            drop(self._by_owner, entry[0])

    def of(self, owner: str, token: str | None) -> int:
        """`owner`'s entries within their grace, the asking review's own left out."""
        if not self._entries:
            return 0
        self.expire(self._clock())
        mine = self._entries.get(token) if token else None
        return self._by_owner.get(owner, 0) - (mine is not None and mine[0] == owner)

    def expire(self, now: float) -> None:
        # One grace for all: insertion order is expiry order.
        while self._entries and next(iter(self._entries.values()))[1] <= now:
            drop(self._by_owner, self._entries.popitem(last=False)[1][0])
