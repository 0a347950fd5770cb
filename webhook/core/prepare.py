"""The pod-independent part of a decision (`prepare`), which replicas of one template share
(memo.py), and what the per-pod steps cache on it. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from webhook.core.affinity import PreferredTerm
from webhook.core.bits import start_slot
from webhook.core.index import LayerIndex
from webhook.core.labelcover import LabelCover, cover
from webhook.core.layers import ImageLayers, Platform
from webhook.core.nodes import NodeInfo
from webhook.core.nodeselect import NodeSelector
from webhook.core.reasons import Reason
from webhook.core.scoring import ScoringPolicy, TermPlan, plan_terms, weight_for
from webhook.core.spend import Run, ScoredGroup


class Spent(NamedTuple):
    """What `spend` named and the terms they make, before the tie-break and baseline terms."""

    named: tuple[NodeInfo, ...]
    runs: tuple[Run, ...]
    cut: int
    terms: tuple[PreferredTerm, ...]


@dataclass(frozen=True, slots=True)
class Prepared:
    """What a decision computes before the per-pod steps (`prepare`): the same for every pod
    with the same images, tolerations and node selection while the index and the policy stay
    the same.

    `spent` caches, per (pick salt, spread guard on), the nodes, runs, byte-budget cut and
    terms `spend` finds for pods whose guard changes no weight (no owner, no sibling on a
    candidate, or a static inventory): the same for every such pod of that salt bucket."""

    reason: Reason  # NONE: go on; else the decision's reason (no platform, no nodes)
    pod_bytes: int = 0
    candidates: int = 0
    groups: tuple[tuple[int, int, int], ...] = ()  # (bytes present, weight, mask), most first
    mean_bytes: int = 0  # the candidates' mean bytes present
    labels: LabelCover | None = None  # the layer-label terms, when labels qualify
    # The groups scored as if no sibling were anywhere, and their plan, made on first use:
    # pods with siblings near never need them.
    _plain: list[tuple[tuple[ScoredGroup, ...], TermPlan[ScoredGroup] | Reason]] = field(
        default_factory=list, repr=False, compare=False)
    spent: dict[tuple[str, bool], Spent] = field(default_factory=dict, repr=False,
                                                 compare=False)
    # Per group (by its bytes present) of at most LISTED_NODES nodes that a second pod picked
    # from (the memo shares this object), its mask and its nodes in slot order, so that a
    # salted window is a popcount and a slice, not a bit scan.
    listings: dict[int, tuple[int, list[NodeInfo]]] = field(
        default_factory=dict, repr=False, compare=False)
    _own: dict[int, int] = field(default_factory=dict, repr=False, compare=False)

    def picks(self, index: LayerIndex, group: ScoredGroup, limit: int,
              salt: str) -> Iterable[NodeInfo]:
        """`index.picks(group.mask, limit, salt)`, the same nodes in the same order, from a
        listing of the group (decide.finish asks this only from the second pod on: a first
        pod would pay for the listing alone). Keyed by bytes present, not by mask: hashing a
        5,000-bit mask costs as much as the lookup saves."""
        mask = group.mask
        listing = self.listings.get(group.bytes_present)
        if listing is None or listing[0] != mask:
            if listing is not None or not self._listable(group):
                return index.pick(mask, limit, salt)
            listing = self.listings[group.bytes_present] = (
                mask, index.pick(mask, LISTED_NODES, ""))  # all of them, in slot order
        nodes = listing[1]
        if limit <= 0:
            return ()
        if len(nodes) <= limit:
            return nodes
        # As index.picks: from the first slot at or after a salt-derived one, wrapping round
        # (its place in the list: how many of the group's slots come before it).
        at = (mask & ((1 << start_slot(mask, salt)) - 1)).bit_count()
        window = nodes[at:at + limit]
        if len(window) < limit:
            window += nodes[:limit - len(window)]
        return window

    def _listable(self, group: ScoredGroup) -> bool:
        """Whether `group` is one of this entry's own groups (not one the spread guard split:
        that is one pod's alone), small enough to list."""
        own = self._own  # bytes present -> the group's mask
        if not own:
            own.update((b, m) for b, _, m in self.groups)
        return own.get(group.bytes_present) == group.mask and (
            group.mask.bit_count() <= LISTED_NODES)

    def plain(
        self, policy: ScoringPolicy
    ) -> tuple[tuple[ScoredGroup, ...], TermPlan[ScoredGroup] | Reason]:
        """The groups with their weights as they are (one per distinct byte count, most bytes
        first: already sorted) and their plan (`policy`: the one `prepare` was given)."""
        if not self._plain:
            groups = tuple(ScoredGroup(b, 0, w, m) for b, w, m in self.groups)
            plan = plan_terms([(g.weight, g.bytes_present, g) for g in groups], policy)
            self._plain.append((groups, plan))
        return self._plain[0]


# The largest group an entry lists (8 bytes a node). Listing costs the second pod about
# 0.5 us a node and saves each later pod that picks from it about 25 us at 5,000 nodes: past
# ~500 nodes a run of replicas (3-20) would not earn it back.
LISTED_NODES = 512


def listing_bytes(prepared: Prepared) -> int:
    """Estimated bytes of an entry's listings: a reference per node."""
    return sum(_LISTING_BYTES + 8 * len(nodes) for _, nodes in prepared.listings.values())


_LISTING_BYTES = 200  # the tuple and list headers and the dict slot


def spent_bytes(spent: Spent) -> int:
    """Estimated bytes one cached `Spent` holds besides what the index holds anyway (its
    nodes and hostnames): tuples of references, runs, terms (tracemalloc, 5,000 nodes: 74 nodes
    in one term: 1.4 KB)."""
    return (_SPENT_BYTES + 8 * len(spent.named) + _RUN_BYTES * len(spent.runs)
            + sum(_TERM_BYTES + 8 * len(term.hostnames) for term in spent.terms))


_SPENT_BYTES = 250  # the Spent, its tuples' headers and its dict slot
_RUN_BYTES = 100  # a run's tuple and its ints
_TERM_BYTES = 120  # a PreferredTerm and its hostnames tuple's header


def pod_layers(
    images: Sequence[ImageLayers], platforms: Sequence[Platform]
) -> dict[Platform, dict[str, int]]:
    """Per platform, the pod's distinct layers (digest -> compressed size)."""
    result: dict[Platform, dict[str, int]] = {}
    for platform in platforms:
        layers: dict[str, int] = {}
        for image in images:
            manifest = image.for_platform(platform)
            if manifest is not None:
                for layer in manifest.layers:
                    layers[layer.digest] = layer.size
        if layers:
            result[platform] = layers
    return result


def prepare(
    images: Sequence[ImageLayers],
    tolerations: Sequence[Mapping[str, Any]],
    index: LayerIndex,
    policy: ScoringPolicy,
    selector: NodeSelector | None = None,
) -> Prepared:
    """The costly part of a decision, which replicas of one template share (memo.py): it
    depends only on the images, the tolerations, the node selection (`selector`: the pod's
    nodeSelector and required node affinity, nodeselect.pod_selector), the policy and the
    index's generation."""
    layers = pod_layers(images, list(index.platforms()))
    if not layers:
        return Prepared(Reason.NO_PLATFORM)
    candidates = index.candidates(tolerations, selector)
    if not candidates:
        return Prepared(Reason.NO_NODES)
    pod_bytes = max(sum(sizes.values()) for sizes in layers.values())
    masks = index.overlap_masks(layers, candidates)
    labels = cover(layers, index, candidates, policy, pod_bytes)
    # Label terms add up layer by layer, linear in bytes: the named nodes beside them are
    # weighed on the same scale (by share), not from what they lack.
    best = masks[0][0] if masks and labels is None else 0
    groups = tuple((b, weight_for(b, policy, pod_bytes, best), m) for b, m in masks)
    mean_bytes = sum(b * m.bit_count() for b, _, m in groups) // candidates.bit_count()
    return Prepared(Reason.NONE, pod_bytes, candidates, groups, mean_bytes, labels)
