"""The spread guard: which nodes may be preferred without pushing a pod's workload past the
skew the scheduler will enforce on `kubernetes.io/hostname`. Pure.

kube-scheduler's PodTopologySpread counts, per node, the pods matching the constraint's
selector and scores (ScheduleAnyway) or filters (DoNotSchedule) by `count + 1 - min`, where
`min` is the lowest count over the eligible nodes. A pod without constraints of its own gets
the system defaults: maxSkew 3 on hostname and 5 on zone, ScheduleAnyway. We approximate the
selector by the pod's controller (owner uid), which is what the defaults select on too.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from webhook.core.objects import HOSTNAME_LABEL, items, mapping

DEFAULT_HOST_MAX_SKEW = 3
# A pending review is counted on the node its decision preferred and, for the guard, on every
# node the scheduler may bind it to instead (`maybe`, pods.counted_nodes); the watch shows
# which a moment later. The guard stops one sibling before the scheduler's limit only while a
# pending pod may be anywhere: one counted on no node (held out, unresolved, label terms any
# carrier matches), this replica's own reviews unechoed while other replicas are about, or a
# watch behind (replica_guard.guarded_spread says when).
PENDING_HEADROOM = 1


def guard_limit(max_skew: int, unconfirmed: bool = True, share: int = 1) -> int:
    """The most `count + 1 - floor` a preferred node may reach. `share` > 1 only while this
    replica cannot see the other replicas' reviews (its pod watch is behind): then each of
    `share` replicas keeps to its share of the headroom-reduced limit, so that together they
    stay within `max_skew`."""
    if not unconfirmed:
        return max(1, max_skew)
    return max(1, (max_skew - PENDING_HEADROOM) // max(1, share))


def last_place_holder(owner: str, node: str, replicas: Iterable[str]) -> str:
    """The replica that may fill `node`'s last place for `owner` while several are at work on
    it: one of `replicas` picked by a hash of the three, so every replica that knows the same
    set picks the same one, and the places spread over them."""
    return min(replicas, key=lambda replica: hashlib.blake2b(
        f"{owner}/{node}/{replica}".encode(), digest_size=8).digest())


@lru_cache(maxsize=65_536)
def place_quotas(owner: str, node: str, replicas: tuple[str, ...], max_skew: int
                 ) -> tuple[tuple[str, int], ...]:
    """How many of `owner`'s places on `node` each of `replicas` may fill within a review
    window (inventory/recent_reviews.py) while they share the workload: `max_skew` split as
    evenly as it goes, the remainder to the replicas a hash of (workload, node, replica)
    ranks first (as `last_place_holder`), so every replica that knows the same set agrees
    and the quotas sum to `max_skew`. Each replica counts its own reviews exactly, so
    however late each sees the others', together they fill a node to `max_skew` at most.
    Cached: a burst asks again for the same nodes, review after review."""
    ranked = sorted(replicas, key=lambda replica: hashlib.blake2b(
        f"{owner}/{node}/{replica}".encode(), digest_size=8).digest())
    base, rest = divmod(max_skew, len(ranked))
    return tuple((replica, base + (rank < rest)) for rank, replica in enumerate(ranked))


def shared_room(owner: str, me: str, sharing: tuple[str, ...],
                recent: Mapping[str, Mapping[str, int]], max_skew: int,
                ) -> tuple[Callable[[str], int], Callable[[str], bool]]:
    """For replicas sharing a workload (`me` and `sharing`, at most `max_skew` of them), each
    node's places the others may be filling unseen (their quotas less their reviews there
    seen lately, `recent`), and whether `me` has filled its own quota there. Sound while
    every replica's watch shows a review within the window the tracker keeps (a watch
    further behind is `share`'s case). A node holding no more than each quota's least is
    open without hashing: the others' quotas sum to at most `max_skew` less that."""
    everyone = tuple(sorted((me, *sharing)))
    least = max_skew // len(everyone)
    mine = recent.get(me, {})

    def quotas(node: str) -> dict[str, int]:
        return dict(place_quotas(owner, node, everyone, max_skew))

    def reserved(node: str) -> int:
        quota = quotas(node)
        return sum(max(0, quota[other] - recent.get(other, {}).get(node, 0))
                   for other in sharing)

    def spent(node: str) -> bool:
        used = mine.get(node, 0)
        return used >= least and used >= quotas(node)[me]

    return reserved, spent


def host_max_skew(pod: Mapping[str, Any]) -> int:
    """The maxSkew the scheduler applies per hostname: the smallest of the pod's own
    hostname constraints, else the system default (also when the pod constrains only other
    topologies: we keep the default guard there rather than none)."""
    skews = [
        constraint.get("maxSkew")
        for constraint in map(mapping, items(mapping(pod.get("spec")).get(
            "topologySpreadConstraints")))
        if constraint.get("topologyKey") == HOSTNAME_LABEL
    ]
    valid = [s for s in skews if isinstance(s, int) and not isinstance(s, bool) and s >= 1]
    return min(valid) if valid else DEFAULT_HOST_MAX_SKEW


@dataclass(frozen=True, slots=True)
class SpreadState:
    """Where a pod's siblings are, among the candidate nodes.

    `floor` is the least count over the candidates (0 while any candidate holds none);
    `extra[node]` = count - floor for nodes above it; `excluded` are nodes where one more
    sibling would pass `guard_limit(max_skew)`; `max_skew` is the scheduler's."""

    max_skew: int
    floor: int
    extra: Mapping[str, int]
    excluded: frozenset[str]
    counts: Mapping[str, int]
    # Why each excluded node was closed (causes.GUARD_CAUSES): "counts" (its siblings,
    # bound, pending or maybe there, reach max_skew), "headroom" (only the room kept while a
    # pending sibling may be anywhere), "replicas" (only other replicas' unseen reviews).
    closed_by: Mapping[str, str] = field(default_factory=dict)


def spread_state(
    counts: Mapping[str, int], candidates: Iterable[str], candidate_total: int, max_skew: int,
    unconfirmed: bool = True, share: int = 1, pending: Mapping[str, int] | None = None,
    in_flight: Mapping[str, int] | None = None, maybe: Mapping[str, int] | None = None,
    last_place: Callable[[str], bool] | None = None,
    reserved: Callable[[str], int] | None = None,
    quota_spent: Callable[[str], bool] | None = None,
    sharers: int = 1,
) -> SpreadState:
    """`counts`: siblings per node (bound + pending); `candidates`: the nodes in `counts` or
    `maybe` that can take the pod; `candidate_total`: how many nodes can take it in all;
    `unconfirmed`: the guard keeps its headroom (a pending sibling may be anywhere);
    `pending`: the pending part of `counts` per node: the floor is the scheduler's, which
    counts bound pods only (a pending pod the scheduler binds elsewhere must not raise it);
    `in_flight`: siblings other replicas may be placing right now, per node, unseen in
    `counts`; `maybe`: pending siblings counted on another node that the scheduler may bind
    here instead (the guard counts them here too; co-location does not); `last_place`: whether
    this replica may take a node's last place (None: it may); `reserved`: places per node
    that replicas sharing the workload may be filling unseen (their quotas' unused part,
    `place_quotas`), kept free against `max_skew` itself; `quota_spent`: whether this
    replica has filled its own quota of a node; `sharers`: how many replicas share the
    quotas (this one included)."""
    pending = pending or {}
    in_flight = in_flight or {}
    maybe = maybe or {}
    candidates = list(candidates)
    present = {name: counts[name] for name in candidates if counts.get(name, 0) > 0}
    bound = [count - pending.get(name, 0) for name, count in present.items()]
    floor = min(bound) if bound and len(bound) >= candidate_total else 0
    limit = guard_limit(max_skew, unconfirmed, share)
    least = max_skew // sharers
    extra: dict[str, int] = {}
    excluded: set[str] = set()
    closed_by: dict[str, str] = {}
    for name in candidates:
        count = present.get(name, 0)
        counted = count + maybe.get(name, 0) + 1 - floor
        flying = in_flight.get(name, 0)
        after = counted + flying
        over = after > limit or (after == limit and last_place is not None
                                 and not last_place(name))
        # Past each quota's least (shared_room), a node may be one the others fill unseen.
        if (over or (reserved is not None and counted > least
                     and counted + reserved(name) > max_skew)
                or (quota_spent is not None and quota_spent(name))):
            excluded.add(name)
            closed_by[name] = (_closed_by(counted, flying, max_skew,
                                          guard_limit(max_skew, unconfirmed))
                               if over else "replicas")
        elif count > floor:
            extra[name] = count - floor
    return SpreadState(max_skew, floor, extra, frozenset(excluded), present, closed_by)


def _closed_by(counted: int, flying: int, max_skew: int, headroom_limit: int) -> str:
    """Why a node was closed: its counted siblings reach `max_skew` ("counts"); only with
    the room kept for pending siblings ("headroom"); otherwise other replicas' unseen
    reviews, their share of the room, or a last place kept for another ("replicas")."""
    if counted > max_skew:
        return "counts"
    if counted > headroom_limit and counted + flying <= max_skew:
        return "headroom"
    return "replicas"
