"""Which webhook replicas are at work, as this one's pod watch shows their reviews: the other
replicas active lately (any workload), and per workload whether this replica and which others
reviewed it lately (the spread guard's last-place and in-flight rules read them). Bounded:
one entry per other replica, and per workload reviewed within `burst_seconds`. Event loop
only."""

from __future__ import annotations

import math
import sys
from collections.abc import Callable


class ReplicaPresence:
    def __init__(self, active_seconds: float, burst_seconds: float,
                 clock: Callable[[], float]) -> None:
        """Another replica counts as active for `active_seconds` after one of its reviews is
        seen, and at work on a workload for `burst_seconds`; so does this one after the
        watch shows one of its own reviews of it."""
        self._active_seconds = active_seconds
        self._burst_seconds = burst_seconds
        self._clock = clock
        self._active: dict[str, float] = {}  # other replica -> when a review of it was last seen
        # owner -> other replica -> when its review of it was last seen
        self._owner_active: dict[str, dict[str, float]] = {}
        self._own_seen: dict[str, float] = {}  # owner -> when the watch last showed its own review
        # owner -> until when this replica's reviews of it are new (see `new_to`)
        self._new_until: dict[str, float] = {}

    def other(self, owner: str, replica: str) -> None:
        """The watch showed `replica`'s review of a pod of `owner`."""
        now = self._active[replica] = self._clock()
        self._owner_active.setdefault(sys.intern(owner), {})[replica] = now

    def own(self, owner: str, pause: float, new_for: float) -> float:
        """The watch showed one of this replica's reviews of `owner`; returns the time. One
        shown more than `pause` seconds after the previous starts a new stretch, whose
        reviews stay new for `new_for` seconds more (see `new_to`)."""
        now = self._clock()
        if self._own_seen.get(owner, -math.inf) < now - pause:
            self._new_until[owner] = now + new_for
        self._own_seen[owner] = now
        return now

    def new_to(self, owner: str, pause: float) -> bool:
        """Whether this replica's reviews of `owner` are new: the watch has shown none in the
        last `pause` seconds, or the first of this stretch only a moment ago. Another replica
        that began on the workload at the same moment may be reviewing it unseen until
        then."""
        now = self._clock()
        if self._own_seen.get(owner, -math.inf) < now - pause:
            return True
        return now < self._new_until[owner]

    def active(self) -> tuple[str, ...]:
        """The other replicas whose reviews were seen in the last `active_seconds`, sorted."""
        since = self._clock() - self._active_seconds
        return tuple(sorted(r for r, seen in self._active.items() if seen >= since))

    def on_workload(self, owner: str) -> tuple[bool, tuple[str, ...]]:
        """Whether this replica is at work on `owner`, and which others are (sorted)."""
        since = self._clock() - self._burst_seconds
        established = self._own_seen.get(owner, -math.inf) >= since
        others = self._owner_active.get(owner)
        if not others:
            return established, ()
        return established, tuple(sorted(r for r, seen in others.items() if seen >= since))

    def lately(self, owner: str, seconds: float) -> tuple[str, ...]:
        """The others whose reviews of `owner` were seen in the last `seconds`, sorted."""
        others = self._owner_active.get(owner)
        if not others:
            return ()
        since = self._clock() - seconds
        return tuple(sorted(r for r, seen in others.items() if seen >= since))

    def expire(self, now: float) -> None:
        since = now - self._active_seconds
        for replica in [r for r, seen in self._active.items() if seen < since]:
            del self._active[replica]
        since = now - self._burst_seconds
        for owner in [o for o, seen in self._own_seen.items() if seen < since]:
            del self._own_seen[owner]
            del self._new_until[owner]
        for owner in [o for o, peers in self._owner_active.items()
                      if max(peers.values()) < since]:
            del self._owner_active[owner]
