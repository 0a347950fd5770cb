"""The node -> layers index, kept as bitsets so a review costs O(pod layers), not O(nodes):
LayerIndex, the queries reviews read, over the state index_updates.py keeps current.

Every node has a slot; each layer digest maps to a Python int whose bit `slot` is set when the
node holds that layer. A review splits the candidate nodes into groups with equal overlap
(one AND per layer and group), so its cost grows with the number of distinct overlap patterns,
not with the number of nodes. Every reader of a bitset flushes first (the bits of nodes added
since: index_updates.py). In memory, no I/O; read on the event loop only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

from webhook.core.bits import bits, slots, start_slot
from webhook.core.index_updates import IndexUpdates
from webhook.core.layers import Platform
from webhook.core.nodes import NodeInfo
from webhook.core.nodeselect import NodeSelector
from webhook.core.tolerations import tolerates_all


@dataclass(frozen=True, slots=True)
class OverlapGroup:
    """Candidate nodes (a bitset over slots) that hold the same bytes of the pod's layers."""

    bytes_present: int
    mask: int

    @property
    def count(self) -> int:
        return self.mask.bit_count()


class LayerIndex(IndexUpdates):
    """The index with its queries (the updates and the flush: IndexUpdates)."""

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
