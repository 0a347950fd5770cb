"""Where each workload's pods are: per controller (owner uid), pods per node. In memory.

Two sources feed it: the pod watch (`bound`, `gone`; a relist reports what went as gone) and this
replica's own reviews (`reserve`): a pod reviewed here counts on the node it preferred most
("pending") until it is seen bound, or `pending_seconds` pass. A review sees bound + pending,
so replicas created in one burst, all reviewed before the scheduler binds any, see each other.

Controller-made pods reach admission with no name or uid, so a bind is matched to its pending
entry by the decision's id (`token`), which the pod carries in its decision annotation.
Memory: two dict entries per bound pod with an owner (interned strings), one counter per
(owner, node) pair with pods, one entry per pending review (capped by `max_pending`).
Mutated and read on the event loop only.
"""

from __future__ import annotations

import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass

_NONE: Mapping[str, int] = {}


@dataclass(frozen=True, slots=True)
class _Pending:
    owner: str
    node: str
    expires: float


class SiblingTracker:
    def __init__(
        self,
        pending_seconds: float = 60.0,
        max_pending: int = 50_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._pending_seconds = pending_seconds
        self._max_pending = max_pending
        self._clock = clock
        # pod uid -> owner, and -> node: two dicts, not one of (owner, node) tuples: a
        # tuple per pod costs twice a dict entry (150,000 running pods at 5,000 nodes)
        self._owner_of: dict[str, str] = {}
        self._node_of: dict[str, str] = {}
        self._counts: dict[str, dict[str, int]] = {}  # owner -> node -> bound + pending
        self._pending: OrderedDict[str, _Pending] = OrderedDict()  # token -> entry, by age
        self._unconfirmed: dict[str, int] = {}  # owner -> its pending entries

    # -- what reviews read -------------------------------------------------------------------

    def counts(self, owner: str, token: str | None = None) -> Mapping[str, int]:
        """Pods of `owner` per node (bound + pending); nodes without any are absent.

        `token`: the asking review's own decision id. A review the API server sends again
        (the same uid, so the same token) must not see its own pending entry as a sibling:
        it would steer the pod away from the node it is counted on, where the next sibling
        is then sent too. It sees what the first review saw (a copy, only in that case)."""
        counts = self._counts.get(owner, _NONE)
        entry = self._pending.get(token) if token else None
        if entry is None or entry.owner != owner:
            return counts
        own = dict(counts)
        if own.get(entry.node, 0) > 1:
            own[entry.node] -= 1
        else:
            own.pop(entry.node, None)
        return own

    def unconfirmed(self, owner: str, token: str | None = None) -> int:
        """How many of `owner`'s pending entries (reviews whose bind is not seen yet) there
        are, the asking review's own (`token`) left out."""
        count = self._unconfirmed.get(owner, 0)
        entry = self._pending.get(token) if token else None
        return count - 1 if entry is not None and entry.owner == owner else count

    @property
    def bound_pods(self) -> int:
        return len(self._owner_of)

    @property
    def pending(self) -> int:
        return len(self._pending)

    @property
    def owners(self) -> int:
        return len(self._counts)

    # -- reviews -------------------------------------------------------------------------------

    def reserve(self, owner: str, node: str, token: str) -> None:
        """Count a reviewed pod on `node` until its bind is seen (or it expires)."""
        if not token or token in self._pending:
            return
        while len(self._pending) >= self._max_pending:
            self._release(next(iter(self._pending)))
        entry = _Pending(sys.intern(owner), sys.intern(node),
                         self._clock() + self._pending_seconds)
        self._pending[token] = entry
        self._unconfirmed[entry.owner] = self._unconfirmed.get(entry.owner, 0) + 1
        self._add(entry.owner, entry.node, 1)

    def expire(self) -> int:
        """Drop pending entries past their time; returns how many."""
        now = self._clock()
        dropped = 0
        # Entries share one lifetime, so insertion order is expiry order.
        while self._pending:
            token, entry = next(iter(self._pending.items()))
            if entry.expires > now:
                break
            self._release(token)
            dropped += 1
        return dropped

    # -- the pod watch ---------------------------------------------------------------------

    def bound(self, pod_uid: str, owner: str, node: str, token: str | None = None) -> None:
        """A pod of `owner` runs on `node`; `token` is the id of the decision it carries."""
        if token:
            self._release(token)
        owner, node = sys.intern(owner), sys.intern(node)
        if self._owner_of.get(pod_uid) == owner and self._node_of.get(pod_uid) == node:
            return
        self.gone(pod_uid)
        self._owner_of[pod_uid] = owner
        self._node_of[pod_uid] = node
        self._add(owner, node, 1)

    def gone(self, pod_uid: str) -> None:
        """The pod was deleted or finished."""
        owner = self._owner_of.pop(pod_uid, None)
        if owner is not None:
            self._add(owner, self._node_of.pop(pod_uid), -1)

    def release(self, token: str) -> None:
        """The reviewed pod will not be seen running (it finished before it was seen bound)."""
        self._release(token)

    def _release(self, token: str) -> None:
        entry = self._pending.pop(token, None)
        if entry is not None:
            left = self._unconfirmed[entry.owner] - 1
            if left:
                self._unconfirmed[entry.owner] = left
            else:
                del self._unconfirmed[entry.owner]
            self._add(entry.owner, entry.node, -1)

    def _add(self, owner: str, node: str, delta: int) -> None:
        nodes = self._counts.setdefault(owner, {})
        count = nodes.get(node, 0) + delta
        if count > 0:
            nodes[node] = count
        else:
            nodes.pop(node, None)
            if not nodes:
                del self._counts[owner]
