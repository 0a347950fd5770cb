"""The spread guard's view of a pod's siblings (core/spread.spread_state) with the rules that
keep several webhook replicas, each seeing the others' reviews late, within maxSkew together:
headroom while reviews may be unseen, a node's last place by a hash, reviews in flight, place
quotas between partners, and a young replica's first moments on a burst
(docs/how-it-works.md, "Spread awareness")."""

from __future__ import annotations

from webhook.core.decision import Siblings
from webhook.core.index import LayerIndex
from webhook.core.spread import SpreadState, last_place_holder, shared_room, spread_state


def guarded_spread(siblings: Siblings | None, index: LayerIndex, candidates: int,
                   replicas: int = 1) -> SpreadState | None:
    """The guard's view of the pod's siblings; `replicas`: the webhook replicas there are
    (`--replicas`)."""
    if siblings is None:
        return None
    counted = [name for name in siblings.counts if index.in_mask(name, candidates)]
    counted += [name for name in siblings.maybe
                if name not in siblings.counts and index.in_mask(name, candidates)]
    # The counts are the scheduler's but for pods that may be anywhere: pending ones given no
    # node, this replica's own reviews not echoed yet (the others' of the same moment are as
    # many, `in_flight`), or while the watch is behind (`share`). Only then does the guard
    # keep its headroom. With other replicas about (`--replicas`, or seen at work), a node's
    # last free place is taken only by a replica at work on the workload, and where others
    # are too, by the one a hash of (workload, node, replicas) picks: two replicas blind to
    # each other's newest reviews for a few ms cannot both take it. With none at work on it,
    # by the one the hash picks among every replica active, once all of them are known.
    # While this replica's own reviews are unechoed, the others' of the same moment are
    # taken to be as many on the same nodes (`in_flight`), but for the nodes the hash makes
    # this replica's: there the others keep to the one place of headroom the guard leaves.
    # And while other replicas are reviewing the workload at the same moments (`partners`:
    # one of their reviews of it seen in the last 2 s, or within a few watch lags if that
    # is longer), each keeps to its quota of every
    # node's places and leaves the partners' unused quotas free, whatever it has seen of
    # their newest reviews: a replica whose own reviews were all echoed took its counts as
    # exact and a node's last place as its own while a partner's review of a moment before
    # was still unseen, and the node reached maxSkew + 1 (the evaluation on the real control
    # plane, under load). Its own reviews it counts exactly, so together they keep within
    # maxSkew (tests/unit/test_replica_blindness.py).
    owner, me = siblings.owner, siblings.replica
    partners = tuple(sorted({*siblings.lately,
                             *(replica for replica in siblings.recent if replica != me)}))
    reserved = spent = None
    if partners and siblings.share == 1 and len(partners) < siblings.max_skew:
        reserved, spent = shared_room(owner, me, partners, siblings.recent,
                                      siblings.max_skew)
    # A young replica's bursts (its first `active_seconds` of reviews: replicas that begin
    # together, a cold start; in a rollout, the new ones): while its reviews of the workload
    # are new (`new`) and none of another's was seen, another replica (`--replicas`) may
    # have begun on it at the same moment, unseen for a watch lag, and be new to it too.
    # From its second review on, each keeps to its quota of a node's places and leaves the
    # others' free (no hash to take while some are not known: the least of the quotas, and
    # no last place). Two replicas that began on the evaluation's first burst together on a
    # loaded machine, each blind to the other, each filled a node to the headroom. Past its
    # first minutes a replica does not: where one replica reviews a burst and the other is
    # idle it would cost every small burst its co-location (docs/evaluation.md). Nor where
    # more replicas than maxSkew share it: a node's places do not split between them (as
    # for partners).
    mine = siblings.recent.get(me, {})
    active = siblings.active
    unknown = max(0, replicas - 1 - len(active))
    sharing = len(active) + unknown + 1
    if (siblings.young and siblings.new and mine and not partners and sharing > 1
            and sharing <= siblings.max_skew and siblings.share == 1):
        new = True
        if unknown:
            least = siblings.max_skew // sharing

            def spent(node: str) -> bool:
                return mine.get(node, 0) >= least

        else:
            reserved, spent = shared_room(owner, me, active, siblings.recent,
                                          siblings.max_skew)
            partners = active
    else:
        new = False

    unsure = ((siblings.unconfirmed != 0 and siblings.unplaced != 0)
              or bool(siblings.in_flight) or siblings.share > 1)
    last_place = None
    if not unsure and (siblings.others or replicas > 1):
        everyone = (me, *siblings.sharing)
        established = siblings.established and not new

        def last_place(node: str) -> bool:
            if established:
                return len(everyone) == 1 or last_place_holder(owner, node, everyone) == me
            # No replica at work on it: the last place goes by the hash over every replica
            # active, when all of them are known (else another may take it unseen).
            if siblings.sharing or len(siblings.active) + 1 < replicas:
                return False
            return last_place_holder(owner, node, (me, *siblings.active)) == me

    in_flight = siblings.in_flight
    if in_flight and siblings.share == 1 and len(siblings.active) + 1 >= replicas:
        everyone = (me, *siblings.active)
        in_flight = {node: n for node, n in in_flight.items()
                     if last_place_holder(owner, node, everyone) != me}
    return spread_state(siblings.counts, counted, candidates.bit_count(), siblings.max_skew,
                        unsure, siblings.share, siblings.pending, in_flight,
                        siblings.maybe, last_place, reserved, spent, len(partners) + 1)
