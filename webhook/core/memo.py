"""A bounded memo of `decide.prepare` for replicas of one template. In memory.

Pods of a Deployment arrive together and ask the same question: the same images, the same
tolerations, against the same index. `prepare` (layers per platform, candidate nodes, overlap
groups and their weights, the sibling-free plan) is the costly, pod-independent part of a
decision; the per-pod steps (spread guard on the live sibling counts, salted picks, the
annotation and the patch) always run after it. What they cache on an entry depends on no
pod's own state: the picks per salt bucket of pods whose spread guard changes no weight
(decide.finish), and the listings of groups that more than one pod picked from
(Prepared.picks); both give the same answers as computing afresh (tests/unit/test_memo.py).

Key: per image (in pod order) the digest it resolved to and its platform manifests' digests
(content-addressed, so they fix the layers; the platforms a source knows of one index can
grow, as node agents publish them), the tolerations (canonical JSON) and the node selection
(nodeselect.NodeSelector, a frozen value: None for a pod with neither nodeSelector nor
required node affinity), so pods that may run on different nodes never share an entry. The
whole memo
belongs to one (index, generation, policy) and is emptied when any of them moves on (an old
generation never comes back, so its entries could never hit again; a Mutator has one policy).

Bound: `max_entries`, and an estimate of the entries' bytes of at most MAX_BYTES (8 MiB),
whichever comes first. An entry holds the groups' node bitsets (about nodes/7.5 bytes each;
tracemalloc on the bench workload: 8.3 KB an entry at 5,000 nodes, 27 KB at 20,000), and,
as finish() fills them, up to SALT_BUCKETS (16) cached pick lists of about 1.5 KB each at the
default max_nodes (prepare.spent_bytes) and listings of 8 bytes a listed node
(prepare.listing_bytes): 8 MiB holds about 1,000 entries at 5,000 nodes when few buckets are
used, about 250 when all 16 are. The estimate counts what finish() added at the entry's next
lookup, so it lags by one review's lists an entry.
"""

from __future__ import annotations

import itertools
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from webhook.core.index import LayerIndex
from webhook.core.layers import ImageLayers
from webhook.core.nodeselect import NodeSelector
from webhook.core.prepare import Prepared, listing_bytes, prepare, spent_bytes
from webhook.core.scoring import ScoringPolicy

MAX_ENTRIES = 2048
MAX_BYTES = 8 << 20
_ENTRY_BYTES = 600  # key, tuples, dataclasses and dicts of one entry besides its bitsets
_GROUP_BYTES = 230  # a group's tuple, ScoredGroup, slot in Prepared._own; besides its bitset
_LABELS_BYTES = 300  # a LabelCover and its tuples, besides its bitsets


@dataclass(slots=True)
class _Entry:
    prepared: Prepared
    size: int  # estimated bytes
    counted: int = 0  # how many of prepared.spent `size` counts
    listed: int = 0  # how many of prepared.listings it counts
    listed_bytes: int = 0  # and their bytes


class PrepareMemo:
    def __init__(self, max_entries: int = MAX_ENTRIES, max_bytes: int = MAX_BYTES) -> None:
        self._max_entries = max_entries
        self._max_bytes = max_bytes
        self._entries: OrderedDict[tuple[Any, ...], _Entry] = OrderedDict()
        self._bytes = 0
        self._index: LayerIndex | None = None
        self._generation = -1
        self._policy: ScoringPolicy | None = None
        self.hits = 0
        self.misses = 0

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def bytes(self) -> int:
        """Estimated bytes held by the entries."""
        return self._bytes

    def prepare(
        self,
        images: Sequence[ImageLayers],
        tolerations: Sequence[Mapping[str, Any]],
        index: LayerIndex,
        policy: ScoringPolicy,
        selector: NodeSelector | None = None,
    ) -> Prepared:
        """`decide.prepare(...)`, from memory when the same question was asked of the same
        index generation."""
        if self._max_entries <= 0:
            self.misses += 1
            return prepare(images, tolerations, index, policy, selector)
        if (index is not self._index or index.generation != self._generation
                or (policy is not self._policy and policy != self._policy)):
            self.clear()
            self._index, self._generation, self._policy = index, index.generation, policy
        # A platform as its fields: a tuple of strings hashes in C, a Platform in Python.
        key = (tuple((image.digest, *[(p.os, p.architecture, p.variant, m.digest)
                                      for p, m in image.platforms.items()])
                     for image in images),
               # decoded: orjson's bytes keep a 4 KiB buffer each, a str is its own size
               orjson.dumps(tolerations, option=orjson.OPT_SORT_KEYS).decode()
               if tolerations else "",
               selector)
        entries = self._entries
        found = entries.get(key)
        if found is not None:
            entries.move_to_end(key)
            self.hits += 1
            prepared = found.prepared
            if (len(prepared.spent) != found.counted  # reviews since cached more on it
                    or len(prepared.listings) != found.listed):
                self._grow(found)
            return prepared
        self.misses += 1
        prepared = prepare(images, tolerations, index, policy, selector)
        size = _ENTRY_BYTES + _int_bytes(prepared.candidates) + sum(
            _GROUP_BYTES + _int_bytes(mask) for _, _, mask in prepared.groups)
        if prepared.labels is not None:  # label terms: a bitset per term and per class
            size += _LABELS_BYTES + _int_bytes(prepared.labels.covered) + sum(
                _GROUP_BYTES + _int_bytes(term.carriers) for term in prepared.labels.terms)
            size += sum(_GROUP_BYTES + _int_bytes(mask)
                        for _, mask in prepared.labels.classes)
        entries[key] = _Entry(prepared, size)
        self._bytes += size
        self._shrink()
        return prepared

    def _grow(self, entry: _Entry) -> None:
        """Count the picks per salt bucket and the listings cached on an entry since it was
        last counted (at its next lookup: the estimate lags by one review's lists an entry,
        about 1.5 KB at 5,000 nodes)."""
        prepared = entry.prepared
        spent = prepared.spent  # a dict keeps its order: the new ones come last
        grown = sum(map(spent_bytes, itertools.islice(spent.values(), entry.counted, None)))
        listed = (listing_bytes(prepared) if len(prepared.listings) != entry.listed
                  else entry.listed_bytes)
        grown += listed - entry.listed_bytes
        entry.size += grown
        entry.counted = len(spent)
        entry.listed, entry.listed_bytes = len(prepared.listings), listed
        self._bytes += grown
        self._shrink()

    def _shrink(self) -> None:
        entries = self._entries
        while len(entries) > self._max_entries or self._bytes > self._max_bytes:
            _, dropped = entries.popitem(last=False)
            self._bytes -= dropped.size

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0


def _int_bytes(value: int) -> int:
    """What CPython holds for an int: 4 bytes per 30 bits, plus the object header."""
    return 28 + value.bit_length() * 2 // 15
