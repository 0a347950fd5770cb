"""Two webhook replicas at work on one burst, whose pod watches show each other's reviews
late, each by its own lag: however their reviews interleave, no node may take more of the
burst's pods than maxSkew. The case found on the real control plane under load: one replica's
own reviews were echoed (so it took its view as exact) while the other's review of a moment
before was still unseen, and a node reached four. The guarantee's scope: both replicas at
work, neither pausing longer than the window in which another's review marks it as at work
(recent_reviews.PARTNER_MIN_SECONDS at the least), lags under the echo grace (past it a replica
is behind and keeps to its share). And two young replicas (their first minutes: a cold start)
that begin on the burst at the same moment, neither having seen the other, each watch late by
its own lag: what CI found at the evaluation's first burst. Past its first minutes, a
replica's first reviews of a workload, or its first after a pause, are unseen by the others
for a watch lag: docs/how-it-works.md says what the guard does about them."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from typing import Any

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tests.helpers import Clock, apply_patch
from tests.unit.replica_cluster import OWNER, replica, run
from tests.unit.test_colocation import COLD, POLICY, two_replicas
from webhook.core.pods import pending_placement
from webhook.core.spread import DEFAULT_HOST_MAX_SKEW
from webhook.inventory.recent_reviews import PARTNER_MIN_SECONDS

ECHO_GRACE = 1.0  # SiblingTracker's default: a lag past it is the watch behind
GAP = 0.4 * PARTNER_MIN_SECONDS  # the longest time between two reviews


async def _interleave(reviews: list[tuple[int, float, float, float]], prefix: bool) -> None:
    """Each review: which replica makes it, the time since the previous one, and how late
    each replica's watch shows the stored pod (in order: a watch never reorders). `prefix`:
    each has seen the other's first review before these."""
    clock = Clock()
    # Told there are two, as the manifests' configuration says (--replicas).
    replicas, trackers = await two_replicas(replace(POLICY, replicas=2), clock)
    queued: list[list[tuple[float, str, Any]]] = [[], []]  # per replica: (due, pod, placement)
    landing: Counter[str] = Counter()
    last = [0.0, 0.0]  # when each replica last reviewed
    if prefix:
        reviews = [(0, 0.0, 0.0, 0.0), (1, 0.0, 0.0, 0.0), *reviews]
    for n, (who, gap, *lags) in enumerate(reviews):
        clock.now += gap
        # Neither pauses: the other reviewed within the window that marks it at work.
        assume(clock.now - last[1 - who] <= PARTNER_MIN_SECONDS / 2)
        last[who] = clock.now
        for k, tracker in enumerate(trackers):
            while queued[k] and queued[k][0][0] <= clock.now:
                _, uid, placement = queued[k].pop(0)
                tracker.seen_pending(uid, OWNER, placement.token, placement.node,
                                     placement.by, placement.also)
        obj = replica(n)
        outcome = await run(replicas[who], obj, n)
        placement = pending_placement(apply_patch(obj, list(outcome.patch)))
        # The node its decision put first (the guard counts the others weighed alike too);
        # a pod given no node is the scheduler's to spread.
        if placement.node:
            landing[placement.node] += 1
        for k in range(2):
            due = max(clock.now + lags[k], queued[k][-1][0] if queued[k] else 0.0)
            queued[k].append((due, f"pod-{n}", placement))
    assert set(landing) <= set(COLD)
    assert max(landing.values(), default=0) <= DEFAULT_HOST_MAX_SKEW, landing


@settings(max_examples=400, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 1), st.floats(0.0, GAP),
                          st.floats(0.0, 0.95 * ECHO_GRACE), st.floats(0.0, 0.95 * ECHO_GRACE)),
                min_size=4, max_size=18))
async def test_no_interleaving_of_two_blind_replicas_passes_max_skew(
        reviews: list[tuple[int, float, float, float]]) -> None:
    """Both at work from the start, each having seen the other's first review; each pod
    shown late by any amount under the echo grace."""
    await _interleave(reviews, prefix=True)


@settings(max_examples=400, deadline=None)
@given(st.tuples(st.floats(0.0, 0.2 * ECHO_GRACE), st.floats(0.0, 0.2 * ECHO_GRACE)),
       st.lists(st.tuples(st.integers(0, 1), st.floats(0.0, GAP),
                          st.floats(0.0, 1.0), st.floats(0.0, 1.0)),
                min_size=4, max_size=18))
async def test_two_replicas_new_to_a_burst_pass_max_skew_in_no_interleaving(
        lags: tuple[float, float], reviews: list[tuple[int, float, float, float]]) -> None:
    """Both young (the trackers' default: just started), both begin on the burst at the
    same moment, neither having seen the other: each watch late by its own lag, every pod
    by up to a quarter more (one stream: what the echo of a replica's own review shows of
    the lag of the other's)."""
    drawn = [(who, gap, lags[0] * (1 + a / 4), lags[1] * (1 + b / 4))
             for who, gap, a, b in reviews]
    await _interleave(drawn, prefix=False)
