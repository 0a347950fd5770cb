"""What one review reads of its workload's pods and of the other webhook replicas' reviews
(`SiblingTracker.view`): the spread guard's input, as the serving edge hands it to the core
(core/decision.Siblings)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class SiblingView:
    """What one review reads of its workload (see `SiblingTracker.view`)."""

    counts: Mapping[str, int]  # pods per node, bound + pending
    pending: Mapping[str, int]  # the pending part of `counts`, per node
    unconfirmed: int  # pending entries, those on no node included
    unplaced: int  # pending entries on no node
    maybe: Mapping[str, int]  # pending entries that may be bound here, counted elsewhere
    in_flight: Mapping[str, int]  # reviews the other replicas may be making now, per node
    watch_behind: bool  # this replica's own reviews are not echoed by the watch in time
    others: int = 0  # other replicas active (see `others`)
    # The watch showed one of this replica's own reviews of the workload within
    # `burst_seconds`: it is at work on it.
    established: bool = False
    # The other replicas whose reviews of the workload the watch showed within
    # `burst_seconds`, sorted.
    sharing: tuple[str, ...] = ()
    # The other replicas active (any workload, `others` of them), sorted.
    active: tuple[str, ...] = ()
    # Reviews of the workload lately per replica and node (see `SiblingTracker.recent`).
    recent: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    # The other replicas whose reviews of the workload the watch showed in the last
    # PARTNER_SECONDS, sorted: they may be reviewing its next pods now (place quotas).
    lately: tuple[str, ...] = ()
    # This replica's reviews of the workload are new (ReplicaPresence.new_to): another
    # replica that began on it at the same moment may be reviewing it unseen.
    new: bool = False
    # This replica began less than `active_seconds` ago: others not seen at work yet may be
    # beginning too.
    young: bool = False
