"""Where each workload's pods are: per controller (owner uid), pods per node. In memory.

Two sources feed it. The pod watch: bound pods (`bound`, `gone`; a relist reports what went
as gone), and pods stored but not bound yet (`seen_pending`), whichever webhook replica
reviewed them: every pod the API server admits is stored at once, carrying its decision
annotation (the decision's id, the replica that made it, the node it preferred), so each
replica sees the others' reviews a few milliseconds after they are made. And this replica's
own reviews (`reserve`), counted at once, before the watch echoes them. A review sees
bound + pending, so replicas created in one burst, all reviewed before the scheduler binds
any, see each other whichever replica reviewed them.

Controller-made pods reach admission with no name or uid, so a pod's pending entry is keyed
by its decision's id (`token`), which the pod carries in its decision annotation; a pod seen
unbound without one (a review that got no decision, or none) is keyed by its uid and counted
as unconfirmed on no node. Memory: two dict entries per bound pod with an owner (interned
strings), one counter per (owner, node) pair with pods, one entry per pending review (capped
by `max_pending`), one per other replica seen active. Event loop only.
"""

from __future__ import annotations

import hashlib
import os
import socket
import sys
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace

from webhook.inventory.counting import bump as _bump
from webhook.inventory.counting import drop as _drop
from webhook.inventory.counting import spread_alike, without
from webhook.inventory.recent_reviews import RecentReviews, lag_window
from webhook.inventory.replica_presence import ReplicaPresence
from webhook.inventory.sibling_view import SiblingView
from webhook.inventory.unmarked_reviews import UnmarkedReviews

_NONE: Mapping[str, int] = {}
# Another replica whose review of a workload was seen this recently may be reviewing its
# next pods now: longer than the review windows (a burst's reviews come a second apart under
# load, and a replica that drops out of the quotas between two of them takes a last place).
PARTNER_SECONDS = 2.0
_UID = "uid/"  # the key prefix of a pending entry without a decision id


def new_replica_id() -> str:
    """An id for this webhook process (8 hex digits): its host (the pod's name), process and
    start, hashed; a restarted replica is a new one."""
    seed = f"{socket.gethostname()}/{os.getpid()}/{time.time_ns()}"
    return hashlib.blake2b(seed.encode(), digest_size=4).hexdigest()


@dataclass(frozen=True, slots=True)
class _Pending:
    owner: str
    node: str  # "": unconfirmed, counted on no node
    also: tuple[str, ...]  # other nodes weighed alike: the scheduler may bind it there
    expires: float
    by: str  # the replica that reviewed it ("": unknown)
    echoed: bool  # seen in the pod watch (this replica's own reviews start unseen)
    near: tuple[str, ...] = ()  # other nodes weighed nearly as much (counted, not spread)


class SiblingTracker:
    def __init__(
        self,
        pending_seconds: float = 60.0,
        max_pending: int = 50_000,
        clock: Callable[[], float] = time.monotonic,
        replica: str = "",
        active_seconds: float = 300.0,
        echo_grace: float = 1.0,
        echo_timeout: float = 5.0,
        burst_seconds: float = 60.0,
        started: float | None = None,
    ) -> None:
        """`replica`: this replica's id, as its decisions carry it (`by`). Another replica
        counts as active for `active_seconds` after a pending pod it reviewed is seen.
        The watch is behind when one of this replica's reviews is not echoed within
        `echo_grace` seconds (one not echoed within `echo_timeout` is taken as never stored:
        the API server refused the pod after admission). `started`: when this replica began
        serving (default: its first review); for `active_seconds` from then it is young."""
        self._pending_seconds = pending_seconds
        self._max_pending = max_pending
        self._clock = clock
        self.replica = replica
        self._echo_grace = echo_grace
        self._echo_timeout = echo_timeout
        # Young (the other replicas not seen at work may be beginning too) until then; from
        # the first review when `started` is not given (after the first lists, however long).
        self._active_seconds = active_seconds
        self._young_until = None if started is None else started + active_seconds
        # pod uid -> owner, and -> node: two dicts, not one of (owner, node) tuples: a
        # tuple per pod costs twice a dict entry (150,000 running pods at 5,000 nodes)
        self._owner_of: dict[str, str] = {}
        self._node_of: dict[str, str] = {}
        self._counts: dict[str, dict[str, int]] = {}  # owner -> node -> bound + pending
        self._pending: OrderedDict[str, _Pending] = OrderedDict()  # token -> entry, by age
        self._on_node: dict[str, dict[str, int]] = {}  # owner -> node -> pending entries
        self._unconfirmed: dict[str, int] = {}  # owner -> its pending entries (any node)
        self._unplaced: dict[str, int] = {}  # owner -> its pending entries on no node
        self._maybe: dict[str, dict[str, int]] = {}  # owner -> node -> entries also there
        # owner -> the nodes an entry may be bound to (its node and `also`, sorted) -> entries:
        # the scheduler spreads entries weighed alike over their nodes (see `counting.spread_alike`)
        self._groups: dict[str, dict[tuple[str, ...], int]] = {}
        self._unechoed: dict[str, dict[str, int]] = {}  # owner -> node -> own, not echoed
        self._unechoed_since: OrderedDict[str, float] = OrderedDict()  # own token -> reserved
        self._presence = ReplicaPresence(active_seconds, burst_seconds, clock)
        self._unmarked = UnmarkedReviews(echo_grace, max_pending, clock)
        self._recent = RecentReviews(replica, echo_grace, clock)

    # -- what reviews read -------------------------------------------------------------------

    def counts(self, owner: str, token: str | None = None) -> Mapping[str, int]:
        """Pods of `owner` per node (bound + pending), the asking review's own left out (as
        `view` gives them); nodes without any are absent."""
        return self.view(owner, token).counts

    def unconfirmed(self, owner: str, token: str | None = None) -> int:
        """How many of `owner`'s pending entries (pods not seen bound yet) there are, the
        asking review's own (`token`) left out."""
        return self.view(owner, token).unconfirmed

    def view(self, owner: str, token: str | None = None) -> SiblingView:
        """Everything a review of `owner` reads, its own pending entry (`token`) left out.

        `token`: the asking review's own decision id. A review the API server sends again
        (the same uid, so the same token) must not see its own pending entry as a sibling:
        it would steer the pod away from the node it is counted on, where the next sibling
        is then sent too. It sees what the first review saw (copies, only in that case).

        `in_flight`: this replica's reviews of `owner` the watch has not echoed yet, per node,
        times the other replicas active on `owner`: while this replica's own reviews are
        unseen, the others' made at the same moment are unseen here too, and are taken to be
        as many (the spread guard keeps room for them)."""
        own = self._own(owner, token)
        unechoed = self._unechoed.get(owner, _NONE)
        own_node = (own.node,) if own is not None and own.node else ()
        if own is not None and not own.echoed and own.node:
            unechoed = without(unechoed, _where(own))
        active = self.active()
        others = len(active)
        in_flight = {node: n * others for node, n in unechoed.items()} if others else _NONE
        unplaced = self._unplaced.get(owner, 0) - (own is not None and not own.node)
        unmarked = self._unmarked.of(owner, token)
        unplaced += unmarked
        maybe = without(self._maybe.get(owner, _NONE),
                         (*own.also, *own.near) if own is not None else ())
        groups = self._groups.get(owner)
        if groups:
            maybe = spread_alike(maybe, groups, _group(own) if own is not None else ())
        return SiblingView(without(self._counts.get(owner, _NONE), own_node),
                           without(self._on_node.get(owner, _NONE), own_node),
                           self._unconfirmed.get(owner, 0) - (own is not None) + unmarked,
                           unplaced,
                           maybe, in_flight, self.watch_behind(), others,
                           *self._presence.on_workload(owner), active, self.recent(owner, token),
                           self._presence.lately(owner, PARTNER_SECONDS),
                           self._presence.new_to(owner, PARTNER_SECONDS),
                           self._young())

    def _young(self) -> bool:
        now = self._clock()
        if self._young_until is None:
            self._young_until = now + self._active_seconds
        return now < self._young_until

    def recent(self, owner: str, token: str | None = None) -> Mapping[str, Mapping[str, int]]:
        """`owner`'s reviews lately, per replica and node they may land on, the asking
        review's own left out (RecentReviews.of: what place quotas are counted against)."""
        return self._recent.of(owner, token, self._waiting())

    def partner_seconds(self) -> float:
        """How long another replica's review of a workload marks it at work on it alongside
        this one (RecentReviews.window)."""
        return self._recent.window(self._waiting())

    def _waiting(self) -> float:
        """How long the oldest of this replica's reviews not echoed yet has waited."""
        since = self._unechoed_since
        return self._clock() - next(iter(since.values())) if since else 0.0

    def others(self) -> int:
        """Other replicas seen reviewing (any workload) in the last `active_seconds`: any of
        them may be reviewing this workload's next pods now, before its first is seen."""
        return len(self.active())

    def active(self) -> tuple[str, ...]:
        """The other replicas `others` counts, sorted."""
        return self._presence.active()

    def watch_behind(self) -> bool:
        """Whether one of this replica's reviews has waited longer than `echo_grace` for the
        watch to show its pod (those older than `echo_timeout` no longer count)."""
        since = self._unechoed_since
        now = self._clock()
        while since:
            reserved = next(iter(since.values()))
            if now - reserved <= self._echo_timeout:
                return now - reserved > self._echo_grace
            since.popitem(last=False)
        return False

    @property
    def bound_pods(self) -> int:
        return len(self._owner_of)

    @property
    def pending(self) -> int:
        return len(self._pending) + len(self._unmarked)

    @property
    def owners(self) -> int:
        return len(self._counts)

    # -- reviews -------------------------------------------------------------------------------

    def reserve(self, owner: str, node: str, token: str, also: tuple[str, ...] = (),
                near: tuple[str, ...] = ()) -> None:
        """Count a pod this replica reviewed on `node` ("": on no node, unconfirmed only),
        and for the guard on the `also` nodes weighed alike and the `near` ones weighed nearly
        as much, where it may be bound instead, until its bind is seen (or it expires)."""
        if not token or token in self._pending or token in self._unmarked:
            return
        if not node:
            # Its stored pod carries no decision: the watch shows it as a pending pod on no
            # node (by uid) within milliseconds, and this entry only covers the meantime.
            self._unmarked.add(owner, token)
            return
        entry = self._add_pending(token, owner, node, self.replica, echoed=False, also=also,
                                  near=near)
        self._recent.own(entry.owner, token, _where(entry))
        self._unechoed_since[token] = self._clock()
        if entry.node:
            for name in _where(entry):
                _bump(self._unechoed, entry.owner, name, 1)

    def expire(self) -> int:
        """Drop pending entries past their time, and replicas no longer active; returns how
        many entries were dropped."""
        now = self._clock()
        dropped = 0
        self._unmarked.expire(now)
        # Entries share one lifetime, so insertion order is expiry order.
        while self._pending:
            token, entry = next(iter(self._pending.items()))
            if entry.expires > now:
                break
            self._release(token)
            dropped += 1
        self._recent.expire()
        self._presence.expire(now)
        return dropped

    # -- the pod watch ---------------------------------------------------------------------

    def seen_pending(self, pod_uid: str, owner: str, token: str | None, node: str,
                     by: str, also: tuple[str, ...] = (), near: tuple[str, ...] = ()) -> None:
        """A pod of `owner` stored and not bound yet: reviewed by replica `by`, which
        preferred `node` ("": none), and as much the `also` nodes, under decision `token`
        (None: no decision)."""
        key = token or _UID + pod_uid
        entry = self._pending.get(key)
        if entry is not None:
            if not entry.echoed:  # this replica's own review, now seen stored
                self._echo(key, entry)
            return
        if pod_uid in self._owner_of:
            return  # seen bound already (an older event, replayed)
        if token and token in self._unmarked:  # own, given no node: the watch's entry now
            self._unmarked.remove(token)
        entry = self._add_pending(key, owner, node, by, echoed=True, also=also, near=near)
        if by and by != self.replica:
            if entry.node:
                self._recent.other(entry.owner, by, _where(entry))
            self._presence.other(owner, by)

    def bound(self, pod_uid: str, owner: str, node: str, token: str | None = None) -> None:
        """A pod of `owner` runs on `node`; `token` is the id of the decision it carries."""
        if token:
            self._release(token)
        self._release(_UID + pod_uid)
        owner, node = sys.intern(owner), sys.intern(node)
        if self._owner_of.get(pod_uid) == owner and self._node_of.get(pod_uid) == node:
            return
        self.gone(pod_uid)
        self._owner_of[pod_uid] = owner
        self._node_of[pod_uid] = node
        _bump(self._counts, owner, node, 1)

    def gone(self, pod_uid: str) -> None:
        """The pod was deleted or finished."""
        self._release(_UID + pod_uid)
        owner = self._owner_of.pop(pod_uid, None)
        if owner is not None:
            _bump(self._counts, owner, self._node_of.pop(pod_uid), -1)

    def release(self, token: str) -> None:
        """The reviewed pod will not be seen running (deleted, or it finished before it was
        seen bound)."""
        self._release(token)
        self._unmarked.remove(token)

    def _own(self, owner: str, token: str | None) -> _Pending | None:
        entry = self._pending.get(token) if token else None
        return entry if entry is not None and entry.owner == owner else None

    def _add_pending(self, key: str, owner: str, node: str, by: str,
                     echoed: bool, also: tuple[str, ...] = (),
                     near: tuple[str, ...] = ()) -> _Pending:
        while len(self._pending) >= self._max_pending:
            self._release(next(iter(self._pending)))
        also = tuple(sys.intern(name) for name in also if name and name != node) if node else ()
        near = tuple(sys.intern(name) for name in near
                     if name and name != node and name not in also) if node else ()
        entry = _Pending(sys.intern(owner), sys.intern(node), also,
                         self._clock() + self._pending_seconds, by, echoed, near)
        self._pending[key] = entry
        self._unconfirmed[entry.owner] = self._unconfirmed.get(entry.owner, 0) + 1
        if entry.node:
            _bump(self._counts, entry.owner, entry.node, 1)
            _bump(self._on_node, entry.owner, entry.node, 1)
        else:
            self._unplaced[entry.owner] = self._unplaced.get(entry.owner, 0) + 1
        for name in (*entry.also, *entry.near):
            _bump(self._maybe, entry.owner, name, 1)
        if entry.also:
            _bump(self._groups, entry.owner, _group(entry), 1)
        return entry

    def _echo(self, key: str, entry: _Pending) -> None:
        reserved = self._unechoed_since.pop(key, None)
        lag = self._clock() - reserved if reserved is not None else 0.0
        # New until a few of the first echo's lags later (as long as another replica's review
        # marks it a partner): another replica's reviews of the same moment are shown by then.
        self._presence.own(entry.owner, PARTNER_SECONDS,
                           lag_window(lag, self._echo_grace))
        self._pending[key] = replace(entry, echoed=True)  # keeps its place (expiry order)
        if reserved is not None:
            self._recent.echoed(lag)
        if entry.node:
            for name in _where(entry):
                _bump(self._unechoed, entry.owner, name, -1)

    def _release(self, token: str) -> None:
        entry = self._pending.pop(token, None)
        if entry is None:
            return
        if not entry.echoed:
            self._unechoed_since.pop(token, None)
            if entry.node:
                for name in _where(entry):
                    _bump(self._unechoed, entry.owner, name, -1)
        _drop(self._unconfirmed, entry.owner)
        if entry.node:
            _bump(self._counts, entry.owner, entry.node, -1)
            _bump(self._on_node, entry.owner, entry.node, -1)
        else:
            _drop(self._unplaced, entry.owner)
        for name in (*entry.also, *entry.near):
            _bump(self._maybe, entry.owner, name, -1)
        if entry.also:
            _bump(self._groups, entry.owner, _group(entry), -1)


def _where(entry: _Pending) -> tuple[str, ...]:
    """Every node a pending entry may be bound to: its node, and those weighed alike or
    nearly as much."""
    return (entry.node, *entry.also, *entry.near)


def _group(entry: _Pending) -> tuple[str, ...]:
    """The nodes a pending entry may be bound to, sorted (() when only its own node)."""
    return tuple(sorted((entry.node, *entry.also))) if entry.also else ()
