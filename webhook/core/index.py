"""The node -> layers index, kept as bitsets so a review costs O(pod layers), not O(nodes).

Every node has a slot; each layer digest maps to a Python int whose bit `slot` is set when the
node holds that layer. A review splits the candidate nodes into groups with equal overlap
(one AND per layer and group), so its cost grows with the number of distinct overlap patterns,
not with the number of nodes. Updates are incremental: a node update touches only the layers
that changed. In memory, no I/O; mutated and read on the event loop only.

A new node's bits are set lazily, for every node added since, at the next read of a bitset
(`flush`): setting one bit copies the whole int, so adding n nodes one by one cost
O(n^2 x layers / 8) bytes copied (a replica's first index of 20,000 nodes: 4 s, growing
fourfold per doubling), where building each bitset once from its slots costs O(entries).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from webhook.core.bits import bits, bitsets, slots, start_slot
from webhook.core.layers import Platform
from webhook.core.nodes import NodeInfo, Taint
from webhook.core.nodeselect import NodeSelector
from webhook.core.tolerations import tolerates_all

_SPARE_IDS = 50_000  # layer ids of layers no node holds, at most, before renumbering


@dataclass(frozen=True, slots=True)
class OverlapGroup:
    """Candidate nodes (a bitset over slots) that hold the same bytes of the pod's layers."""

    bytes_present: int
    mask: int

    @property
    def count(self) -> int:
        return self.mask.bit_count()


class LayerIndex:
    def __init__(self) -> None:
        self._nodes: list[NodeInfo | None] = []
        # Per slot, what naming the node's hostname in a term costs (`len(hostname) + 3`,
        # spend.py): contiguous, so pricing a group's picks does not visit each NodeInfo.
        self._costs = array("I")
        # Each node's layers as 4-byte layer ids (200 layers: ~0.9 KB, a ninth of a
        # frozenset of digests); only updates and occasional readers need them as a set.
        # Ids are never reused for another digest: the table grows with the distinct layers
        # ever indexed (a few bytes each; the digests are kept interned anyway).
        self._layers_of: list[array[int]] = []
        self._layer_id: dict[str, int] = {}
        self._digest: list[str] = []
        self._free: list[int] = []
        self._slot_of: dict[str, int] = {}
        self._layer_nodes: dict[str, int] = {}
        self._platform_mask: dict[Platform, int] = {}
        self._unschedulable = 0
        # Nodes by their blocking taints: a review checks each distinct set once, not each node.
        self._taint_masks: dict[tuple[Taint, ...], int] = {}
        self._all = 0
        # The agents' layer labels (nodes.NodeInfo.layer_labels): short id -> the nodes that
        # carry it, and the nodes whose labels a live agent vouches for.
        self._label_nodes: dict[str, int] = {}
        self._trusted = 0
        self._generation = 0  # bumped by every change: what a cached answer was computed on
        # Slots filled since the last flush whose bits (layers, labels, flags) are not set yet.
        self._unflushed: list[int] = []

    # -- updates ---------------------------------------------------------------------------

    def upsert(self, node: NodeInfo, layers: Iterable[str]) -> bool:
        """Add or replace `node` holding `layers`; returns False when nothing changed."""
        new_layers = frozenset(map(sys.intern, layers))
        slot = self._slot_of.get(node.name)
        if slot is not None and self._nodes[slot] == node and self._same(self._layers_of[slot],
                                                                         new_layers):
            return False
        if slot is None:  # a new node: its bits are set at the next flush
            slot = self._free.pop() if self._free else self._grow()
            self._slot_of[node.name] = slot
            self._store(slot, node, new_layers)
            self._unflushed.append(slot)
            self._generation += 1
            return True
        self.flush()
        old_layers, old_node = self._set(self._layers_of[slot]), self._nodes[slot]
        bit = 1 << slot
        for digest in old_layers - new_layers:
            remaining = self._layer_nodes[digest] & ~bit
            if remaining:
                self._layer_nodes[digest] = remaining
            else:
                del self._layer_nodes[digest]
        for digest in new_layers - old_layers:
            self._layer_nodes[digest] = self._layer_nodes.get(digest, 0) | bit
        if old_node is not None:
            self._clear_flags(slot, old_node)
        self._store(slot, node, new_layers)
        self._set_flags(slot, node)
        if len(self._digest) > 2 * len(self._layer_nodes) + _SPARE_IDS:
            self._renumber()
        self._generation += 1
        return True

    def _store(self, slot: int, node: NodeInfo, layers: frozenset[str]) -> None:
        self._nodes[slot] = node
        self._costs[slot] = len(node.hostname) + 3
        # From a list: one exact allocation (from an iterator the array grows by reallocs,
        # leaving holes in the heap for each of 5,000 nodes).
        found = list(map(self._layer_id.get, layers))  # known layers: no Python call each
        ids = (cast("list[int]", found) if None not in found else
               [self._id(d) if i is None else i for i, d in zip(found, layers, strict=True)])
        self._layers_of[slot] = array("I", ids)

    def flush(self) -> None:
        """Set the bits of the nodes added since the last flush: each bitset they touch is
        built from their slots in a buffer and ORed in once per `_CHUNK_SLOTS` of them. Every
        reader of a bitset flushes first; call it where the work must be done before a
        reader comes (the first index, before readiness)."""
        if not self._unflushed:
            return
        # A platform new to the index takes its place in the order its first node came, as
        # when bits were set at once (platforms() is read in that order: pod_layers' order).
        for slot in self._unflushed:
            node = cast(NodeInfo, self._nodes[slot])  # removal flushes first: still there
            self._platform_mask.setdefault(node.platform, 0)
        added, self._unflushed = sorted(self._unflushed), []
        for at in range(0, len(added), _CHUNK_SLOTS):
            self._flush_slots(added[at:at + _CHUNK_SLOTS])
        if len(self._digest) > 2 * len(self._layer_nodes) + _SPARE_IDS:
            self._renumber()

    def _flush_slots(self, chunk: list[int]) -> None:
        layer_nodes, digest = self._layer_nodes, self._digest
        for layer, mask in bitsets(chunk, self._layers_of.__getitem__).items():
            key = digest[layer]
            layer_nodes[key] = layer_nodes.get(key, 0) | mask
        of = {slot: cast(NodeInfo, self._nodes[slot]) for slot in chunk}  # removal flushes
        for short, mask in bitsets(chunk, lambda slot: of[slot].layer_labels).items():
            self._label_nodes[short] = self._label_nodes.get(short, 0) | mask
        for (kind, key), mask in bitsets(chunk, lambda slot: _flags(of[slot])).items():
            if kind == "all":
                self._all |= mask
            elif kind == "unschedulable":
                self._unschedulable |= mask
            elif kind == "trusted":
                self._trusted |= mask
            elif kind == "platform":
                self._platform_mask[key] = self._platform_mask.get(key, 0) | mask
            else:
                self._taint_masks[key] = self._taint_masks.get(key, 0) | mask

    def remove(self, name: str) -> bool:
        slot = self._slot_of.pop(name, None)
        if slot is None:
            return False
        self.flush()
        node = self._nodes[slot]
        assert node is not None
        bit = 1 << slot
        for digest in self._set(self._layers_of[slot]):
            remaining = self._layer_nodes[digest] & ~bit
            if remaining:
                self._layer_nodes[digest] = remaining
            else:
                del self._layer_nodes[digest]
        self._clear_flags(slot, node)
        self._nodes[slot] = None
        self._costs[slot] = 0
        self._layers_of[slot] = array("I")
        self._free.append(slot)
        self._generation += 1
        return True

    def _id(self, digest: str) -> int:
        found = self._layer_id.get(digest)
        if found is None:
            found = self._layer_id[digest] = len(self._digest)
            self._digest.append(digest)
        return found

    def _renumber(self) -> None:
        """Ids of layers no node holds any more are dropped (image churn would otherwise
        grow the id table without bound): every node's ids are rewritten, O(nodes x layers),
        at most once per `_SPARE_IDS` new layers."""
        old = self._digest
        self._layer_id, self._digest = {}, []
        self._layers_of = [array("I", [self._id(old[i]) for i in ids]) for ids in self._layers_of]

    def _set(self, ids: array[int]) -> frozenset[str]:
        return frozenset(map(self._digest.__getitem__, ids))

    def _same(self, held: array[int], layers: frozenset[str]) -> bool:
        """Whether a node's stored layers (distinct ids) are exactly `layers`."""
        digest = self._digest
        return len(held) == len(layers) and all(digest[i] in layers for i in held)

    def _grow(self) -> int:
        self._nodes.append(None)
        self._costs.append(0)
        self._layers_of.append(array("I"))
        return len(self._nodes) - 1

    def _set_flags(self, slot: int, node: NodeInfo) -> None:
        bit = 1 << slot
        self._all |= bit
        self._platform_mask[node.platform] = self._platform_mask.get(node.platform, 0) | bit
        if node.unschedulable:
            self._unschedulable |= bit
        if node.taints:
            self._taint_masks[node.taints] = self._taint_masks.get(node.taints, 0) | bit
        if node.layer_labels:
            label_nodes = self._label_nodes
            for short in node.layer_labels:
                label_nodes[short] = label_nodes.get(short, 0) | bit
            if node.labels_trusted:
                self._trusted |= bit

    def _clear_flags(self, slot: int, node: NodeInfo) -> None:
        bit = 1 << slot
        self._all &= ~bit
        remaining = self._platform_mask.get(node.platform, 0) & ~bit
        if remaining:
            self._platform_mask[node.platform] = remaining
        else:
            self._platform_mask.pop(node.platform, None)
        self._unschedulable &= ~bit
        if node.taints:
            remaining = self._taint_masks.get(node.taints, 0) & ~bit
            if remaining:
                self._taint_masks[node.taints] = remaining
            else:
                self._taint_masks.pop(node.taints, None)
        if node.layer_labels:
            label_nodes = self._label_nodes
            for short in node.layer_labels:
                remaining = label_nodes.get(short, 0) & ~bit
                if remaining:
                    label_nodes[short] = remaining
                else:
                    label_nodes.pop(short, None)
            self._trusted &= ~bit

    # -- queries ---------------------------------------------------------------------------

    def __len__(self) -> int:
        return len(self._slot_of)

    @property
    def generation(self) -> int:
        """Changes whenever a node, its flags or its layers change (never goes back)."""
        return self._generation

    @property
    def layer_count(self) -> int:
        self.flush()
        return len(self._layer_nodes)

    def node(self, name: str) -> NodeInfo | None:
        slot = self._slot_of.get(name)
        return self._nodes[slot] if slot is not None else None

    def layers_of(self, name: str) -> frozenset[str]:
        """The node's layer digests (a set built on each call: for occasional readers)."""
        slot = self._slot_of.get(name)
        return self._set(self._layers_of[slot]) if slot is not None else frozenset()

    def bit(self, name: str) -> int:
        """The node's bit in candidate masks (0 for an unknown node)."""
        slot = self._slot_of.get(name)
        return 1 << slot if slot is not None else 0

    def in_mask(self, name: str, mask: int) -> bool:
        slot = self._slot_of.get(name)
        return slot is not None and bool(mask >> slot & 1)

    def nodes(self) -> Iterator[NodeInfo]:
        return (node for node in self._nodes if node is not None)

    def platform_mask(self, platform: Platform) -> int:
        """The nodes of `platform`."""
        self.flush()
        return self._platform_mask.get(platform, 0)

    def holders(self, digest: str) -> int:
        """The nodes holding layer `digest` (status, NodeLayers, pods in flight)."""
        self.flush()
        return self._layer_nodes.get(digest, 0)

    def label_carriers(self, short: str) -> int:
        """The nodes carrying the layer label with short id `short`, vouched for or not."""
        self.flush()
        return self._label_nodes.get(short, 0)

    @property
    def trusted(self) -> int:
        """The nodes whose layer labels a live agent vouches for."""
        self.flush()
        return self._trusted

    @property
    def labelled(self) -> bool:
        """Whether any node carries a layer label."""
        self.flush()
        return bool(self._label_nodes)

    def platforms(self) -> dict[Platform, int]:
        """Node count per platform."""
        self.flush()
        return {platform: mask.bit_count() for platform, mask in self._platform_mask.items()}

    def candidates(self, tolerations: Sequence[Mapping[str, Any]],
                   selector: NodeSelector | None = None) -> int:
        """Nodes that can take the pod: not cordoned, every blocking taint tolerated, and
        (`selector`: the pod's nodeSelector and required node affinity) chosen by the pod.
        Without a selector no node is looked at one by one."""
        self.flush()
        mask = self._all & ~self._unschedulable
        for taints, tainted in self._taint_masks.items():
            if not tolerates_all(tolerations, taints):
                mask &= ~tainted
        if selector is not None and mask:
            mask &= self.selected(selector)
        return mask

    def selected(self, selector: NodeSelector) -> int:
        """The nodes `selector` matches. One pass over the nodes; the answer is computed once
        per distinct label set (they are shared: nodes.Labels) unless the selector reads the
        hostname label or the node's name."""
        bits = bytearray((len(self._nodes) + 7) // 8)
        per_node = selector.per_node
        verdicts: dict[int, bool] = {}  # id(labels) -> matches; the objects outlive the call
        for slot, node in enumerate(self._nodes):
            if node is None:
                continue
            if per_node:
                ok = selector.matches(node.all_labels(), node.name)
            else:
                labels = node.labels
                found = verdicts.get(id(labels))
                if found is None:
                    found = verdicts[id(labels)] = selector.matches(labels, node.name)
                ok = found
            if ok:
                bits[slot >> 3] |= 1 << (slot & 7)
        return int.from_bytes(bits, "little")

    def overlap_groups(
        self, layers_by_platform: Mapping[Platform, Mapping[str, int]], candidates: int
    ) -> list[OverlapGroup]:
        """Split `candidates` into groups holding equal bytes of the pod's layers (each node
        counted against its own platform's layers), largest overlap first."""
        return [OverlapGroup(bytes_present=b, mask=m)
                for b, m in self.overlap_masks(layers_by_platform, candidates)]

    def overlap_masks(
        self, layers_by_platform: Mapping[Platform, Mapping[str, int]], candidates: int
    ) -> list[tuple[int, int]]:
        """`overlap_groups` as (bytes present, mask) pairs (what `prepare` reads)."""
        self.flush()
        by_bytes: dict[int, int] = {}
        for platform, platform_mask in self._platform_mask.items():
            start = candidates & platform_mask
            if not start:
                continue
            groups = [(start, 0)]
            # Layers held by the same nodes split alike: one split for each run of them with
            # their sizes summed (an image's layers come together, and nodes pull whole images).
            layer_nodes = self._layer_nodes
            runs: list[tuple[int, int]] = []
            for digest, size in layers_by_platform.get(platform, {}).items():
                holders = layer_nodes.get(digest, 0)
                if not holders:
                    continue
                if runs and runs[-1][0] == holders:
                    runs[-1] = (holders, runs[-1][1] + size)
                else:
                    runs.append((holders, size))
            for holders, size in runs:
                split: list[tuple[int, int]] = []
                for mask, present in groups:
                    inside = mask & holders
                    if not inside:
                        split.append((mask, present))
                        continue
                    split.append((inside, present + size))
                    if inside != mask:
                        split.append((mask ^ inside, present))
                groups = split
            for mask, present in groups:
                by_bytes[present] = by_bytes.get(present, 0) | mask
        return sorted(by_bytes.items(), key=lambda item: -item[0])

    def pick(self, mask: int, limit: int, salt: str) -> list[NodeInfo]:
        """Up to `limit` nodes of `mask`, scanning from a salt-derived slot so that pods with
        different salts spread over a group too large to list whole; deterministic. The same
        nodes in the same order as `picks`, listed at once (`bits.slots`: no generator step per
        node)."""
        return self.nodes_at(self.pick_slots(mask, limit, salt))

    def pick_slots(self, mask: int, limit: int, salt: str) -> list[int]:
        """The slots of `pick`'s nodes, in its order."""
        if limit <= 0 or not mask:
            return []
        if mask.bit_count() <= limit:
            return slots(mask, limit)
        start = start_slot(mask, salt)
        found = slots(mask >> start, limit, start)
        if len(found) < limit:
            found += slots(mask & ((1 << start) - 1), limit - len(found))
        return found

    def nodes_at(self, slots: Iterable[int]) -> list[NodeInfo]:
        """The nodes in these (live) slots."""
        return list(map(cast("Callable[[int], NodeInfo]", self._nodes.__getitem__), slots))

    def hostname_costs(self, slots: Iterable[int]) -> list[int]:
        """Per slot, `len(hostname) + 3`: what naming the node in a term costs (spend.py)."""
        return list(map(cast("Callable[[int], int]", self._costs.__getitem__), slots))

    def picks(self, mask: int, limit: int, salt: str) -> Iterator[NodeInfo]:
        """`pick`, lazily: a caller that stops early (a byte budget) pays only for what it
        took."""
        if limit <= 0 or not mask:
            return
        at = cast("Callable[[int], NodeInfo]", self._nodes.__getitem__)  # set bits: live slots
        if mask.bit_count() <= limit:
            yield from map(at, bits(mask))
            return
        start = start_slot(mask, salt)
        high = mask >> start << start
        yield from map(at, bits(high, limit))
        yield from map(at, bits(mask ^ high, limit - high.bit_count()))


# A flush builds its bitsets a slice of slots at a time (bits.bitsets: a 512-byte buffer per
# bitset, where buffers as wide as the index would hold 8 KB per layer at 65,000 nodes).
_CHUNK_SLOTS = 4096


def _flags(node: NodeInfo) -> list[tuple[str, Any]]:
    """The bitsets besides layers and labels a node's bit is set in, as (kind, key)."""
    flags: list[tuple[str, Any]] = [("all", None), ("platform", node.platform)]
    if node.unschedulable:
        flags.append(("unschedulable", None))
    if node.taints:
        flags.append(("taints", node.taints))
    if node.layer_labels and node.labels_trusted:
        flags.append(("trusted", None))
    return flags
