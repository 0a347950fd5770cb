"""The layer index's state and its updates: node slots, layer ids, and the bitsets that
`upsert` and `remove` keep current (LayerIndex, index.py, adds the queries reviews read).

Every node has a slot; each layer digest maps to a Python int whose bit `slot` is set when the
node holds that layer, and so for labels, platforms, taints and cordons. A node update touches
only the layers that changed. In memory, no I/O; mutated on the event loop only.

A new node's bits are set lazily, for every node added since, at the next read of a bitset
(`flush`): setting one bit copies the whole int, so adding n nodes one by one cost
O(n^2 x layers / 8) bytes copied (a replica's first index of 20,000 nodes: 4 s, growing
fourfold per doubling), where building each bitset once from its slots costs O(entries).
"""

from __future__ import annotations

import sys
from array import array
from collections.abc import Iterable
from typing import Any, cast

from webhook.core.bits import bitsets
from webhook.core.layers import Platform
from webhook.core.nodes import NodeInfo, Taint

_SPARE_IDS = 50_000  # layer ids of layers no node holds, at most, before renumbering


class IndexUpdates:
    """The index's slots, layer ids and bitsets, and the updates that keep them current."""

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
        # Interned where a digest is kept (a new id, a new key below), not here for each.
        new_layers = layers if type(layers) is frozenset else frozenset(layers)
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
        new_layers = frozenset(map(sys.intern, new_layers))  # may become _layer_nodes' keys
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
            digest = sys.intern(digest)  # kept for as long as a node holds the layer
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
