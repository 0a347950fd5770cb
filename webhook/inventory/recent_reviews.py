"""The reviews of each workload made lately, per replica and node: what the spread guard's
place quotas are counted against (core/spread.place_quotas, shared_room), and which other
replicas are reviewing it at the same moments (its partners: those with a review here).

This replica's own are kept for two echo graces from when it made them; the other replicas'
for `window()` from when the pod watch showed them: a few times the watch's lag, at most one
grace. The proof the quotas rest on: a replica fills at most its quota of a node within its
own window; the others' reviews seen within `window()` were made within it plus a lag, and
those not seen yet within a lag, so together they lie in one own window of theirs and keep
to their quota. Counts are kept as entries come and go, so a read costs what expired since
the last one. Event loop only."""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from webhook.inventory.counting import bump

_NONE: Mapping[str, Mapping[str, int]] = {}
LAG_HALF_LIFE = 10.0  # seconds: how fast a lag learned from an echo fades
PARTNER_LAGS = 4.0  # another replica's review marks it at work for this many watch lags
PARTNER_MIN_SECONDS = 0.1  # and at least this long


def lag_window(lag: float, grace: float) -> float:
    """A few watch lags (PARTNER_LAGS, at least PARTNER_MIN_SECONDS, at most `grace`): how long
    another replica's reviews of the same moment may stay unseen."""
    return min(grace, max(PARTNER_MIN_SECONDS, PARTNER_LAGS * lag))


@dataclass(slots=True)
class _Workload:
    own: deque[tuple[float, str, tuple[str, ...]]] = field(default_factory=deque)
    others: deque[tuple[float, str, tuple[str, ...]]] = field(default_factory=deque)
    own_tokens: dict[str, tuple[str, ...]] = field(default_factory=dict)
    counts: dict[str, dict[str, int]] = field(default_factory=dict)  # replica -> node -> n

    def add(self, replica: str, nodes: tuple[str, ...], delta: int) -> None:
        for name in nodes:
            bump(self.counts, replica, name, delta)


class RecentReviews:
    def __init__(self, me: str, echo_grace: float, clock: Callable[[], float]) -> None:
        self._me = me
        self._grace = echo_grace
        self._own_seconds = 2 * echo_grace
        self._others_seconds = echo_grace
        self._clock = clock
        self._workloads: dict[str, _Workload] = {}
        self._lag = 0.0  # the latest echo's lag, or a larger one fading (LAG_HALF_LIFE)
        self._lag_at = 0.0

    def echoed(self, lag: float) -> None:
        """The watch showed one of this replica's reviews `lag` seconds after it was made."""
        now = self._clock()
        self._lag, self._lag_at = max(self._faded(now), lag), now

    def window(self, waiting: float = 0.0) -> float:
        """How long another replica's review marks it at work on a workload: PARTNER_LAGS
        times the watch's lag lately (or `waiting`, the wait of a review not echoed yet, if
        longer), at least PARTNER_MIN_SECONDS, at most one echo grace (a watch later than
        that is behind, and the replicas keep to their shares instead)."""
        return lag_window(max(self._faded(self._clock()), waiting), self._grace)

    def _faded(self, now: float) -> float:
        return self._lag * math.pow(0.5, (now - self._lag_at) / LAG_HALF_LIFE)

    def own(self, owner: str, token: str, nodes: tuple[str, ...]) -> None:
        """This replica reviewed a pod of `owner` that may land on `nodes`."""
        workload = self._workloads.setdefault(owner, _Workload())
        if token in workload.own_tokens:
            return
        workload.own.append((self._clock(), token, nodes))
        workload.own_tokens[token] = nodes
        workload.add(self._me, nodes, 1)

    def other(self, owner: str, replica: str, nodes: tuple[str, ...]) -> None:
        """The watch showed `replica`'s review of a pod of `owner` that may land on `nodes`."""
        workload = self._workloads.setdefault(owner, _Workload())
        workload.others.append((self._clock(), replica, nodes))
        workload.add(replica, nodes, 1)

    def of(self, owner: str, token: str | None = None, waiting: float = 0.0,
           ) -> Mapping[str, Mapping[str, int]]:
        """`owner`'s reviews lately, replica -> node -> reviews, the asking review's own
        (`token`: a review sent again) left out; the others' within `window(waiting)`.
        Read-only."""
        self._others_seconds = self.window(waiting)
        workload = self._workloads.get(owner)
        if workload is None:
            return _NONE
        if not self._prune(owner, workload, self._clock()):
            return _NONE
        mine = workload.own_tokens.get(token) if token else None
        if mine is None:
            return workload.counts
        counts = dict(workload.counts)
        own = dict(counts.get(self._me, {}))
        for name in mine:
            own[name] -= 1
        counts[self._me] = {name: n for name, n in own.items() if n > 0}
        return counts

    def expire(self) -> None:
        now = self._clock()
        for owner, workload in list(self._workloads.items()):
            self._prune(owner, workload, now)

    def __len__(self) -> int:
        return sum(len(w.own) + len(w.others) for w in self._workloads.values())

    def _prune(self, owner: str, workload: _Workload, now: float) -> bool:
        """Drop what is past its window; False (and the workload forgotten) when none is left."""
        since = now - self._own_seconds
        while workload.own and workload.own[0][0] < since:
            _, token, nodes = workload.own.popleft()
            del workload.own_tokens[token]
            workload.add(self._me, nodes, -1)
        since = now - self._others_seconds
        while workload.others and workload.others[0][0] < since:
            _, replica, nodes = workload.others.popleft()
            workload.add(replica, nodes, -1)
        if workload.own or workload.others:
            return True
        del self._workloads[owner]
        return False
