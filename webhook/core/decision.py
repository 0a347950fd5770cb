"""What a decision is: the nodes it names and why, the terms and the patch. Pure values;
decide.py (hostname terms) and labelled.py (layer-label terms) make them."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from webhook.core.admission import PatchOperation
from webhook.core.affinity import PreferredTerm
from webhook.core.nodes import NodeInfo
from webhook.core.reasons import Reason
from webhook.core.spend import Run, ScoredGroup
from webhook.core.spread import SpreadState


class NodeScore(NamedTuple):
    """A node named in the patch: the bytes of the pod it holds, its weight, siblings.

    A NamedTuple rather than a frozen dataclass: a review builds one per hostname (about 70),
    and this is half the cost."""

    node: NodeInfo
    bytes_present: int
    weight: int
    siblings: int = 0


@dataclass(frozen=True, slots=True)
class Siblings:
    """The pod's workload (controller uid) and its pods per node, bound + pending."""

    owner: str
    counts: Mapping[str, int]
    max_skew: int
    unconfirmed: int = -1  # pending reviews among `counts` (-1: unknown, as if some)
    # Those pending reviews counted on no node (-1: unknown, as if some): while there are
    # any, the guard keeps its headroom.
    unplaced: int = -1
    pending: Mapping[str, int] = field(default_factory=dict)  # the pending part of `counts`
    in_flight: Mapping[str, int] = field(default_factory=dict)  # other replicas', unseen
    # Pending reviews per node counted first on another node their decision weighed as
    # much: the scheduler may bind them here; the guard counts them, co-location does not.
    maybe: Mapping[str, int] = field(default_factory=dict)
    # Other webhook replicas active lately (any workload): their newest reviews of this
    # workload may be unseen here, so a node's last free place is taken only by a replica
    # `established` on the workload (the watch showed one of its own reviews of it lately),
    # and among those `sharing` it (others whose reviews of it the watch showed lately) by
    # the one `spread.last_place_holder` picks.
    others: int = 0
    established: bool = False
    sharing: tuple[str, ...] = ()
    active: tuple[str, ...] = ()  # the other replicas active lately (any workload), sorted
    share: int = 1  # replicas sharing the guard's room blindly (while the watch is behind)
    # Reviews of the workload lately, per replica (this one's own included) and node: the
    # part of each replica's place quota it has used (spread.place_quotas).
    recent: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    lately: tuple[str, ...] = ()  # other replicas seen reviewing the workload a moment ago
    # This replica's reviews of the workload are new: others (`--replicas`) that began on it
    # at the same moment may be reviewing it unseen.
    new: bool = False
    # This replica began serving less than `active_seconds` ago: others (`--replicas`) not
    # seen at work yet may be beginning too.
    young: bool = False
    replica: str = ""  # the reviewing replica's id, for the annotation (`by`)


@dataclass(frozen=True, slots=True)
class Decision:
    reason: Reason  # Reason.NONE: patched
    terms: tuple[PreferredTerm, ...] = ()
    patch: tuple[PatchOperation, ...] = ()
    named: tuple[NodeInfo, ...] = field(default=(), repr=False)  # in the terms, best first
    runs: tuple[Run, ...] = field(default=(), repr=False)  # what `named`'s nodes hold, in order
    pod_bytes: int = 0
    candidates: int = 0  # bitset of the nodes that can take the pod
    groups: tuple[ScoredGroup, ...] = field(default=(), repr=False)
    spread: SpreadState | None = None
    left_out: int = 0  # nodes that hold enough bytes but were left out for spread
    cut: int = 0  # nodes max_nodes allowed that the patch's byte budget left out
    # Layer-label terms reach the top weight: no named node stands out, so `top` is None
    # (a pending pod is counted on no node: the scheduler may take any carrier).
    label_top: bool = False
    preferred_nodes: int = -1  # nodes with a positive weight (-1: the named ones)
    top_weight: int = 0  # the best node's summed weight (the baseline is 100 - this)
    # The nodes the pending pod is counted on (pods.counted_nodes of the annotation's `top`):
    # the first is where co-location expects it, the guard counts it on all.
    counted_on: tuple[str, ...] = ()
    # How many of `counted_on` (the first of them) its terms weigh alike; the rest nearly as
    # much (pods.Counted).
    counted_alike: int = 0

    @property
    def patched(self) -> bool:
        return self.reason is Reason.NONE

    @property
    def preferred(self) -> tuple[NodeScore, ...]:
        """The nodes named in the terms, best first (built on demand: the review itself
        needs only the top one)."""
        return tuple(scores(self.named, self.runs, self.spread))

    @property
    def top(self) -> NodeScore | None:
        if self.label_top:
            return None
        return next(scores(self.named[:1], self.runs[:1], self.spread), None)


def scores(named: Sequence[NodeInfo], runs: Sequence[Run],
            spread: SpreadState | None) -> Iterator[NodeScore]:
    counts = spread.counts if spread is not None else {}
    nodes = iter(named)
    for count, bytes_present, weight in runs:
        for node in itertools.islice(nodes, count):
            yield NodeScore(node, bytes_present, weight, counts.get(node.name, 0))
