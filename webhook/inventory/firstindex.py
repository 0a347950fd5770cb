"""The layer index built once from the first lists, not node by node as they arrive.

During a replica's first sync each node is touched by three lists (its Node, its NodeLayers
object, its agent's Lease), each of which would re-index it: at 5,000 nodes that was a third
of the replica's CPU before it could turn ready, two thirds of it thrown away. No decision
is made before every first list is in (syncgate.py), so nothing needs the index meanwhile:
the nodes touched are only noted, and once every resource is listed they are indexed once
each, in slices between reviews (pacing.py), before readiness is let through.

Afterwards (watch events, a relist after a 410) a node is re-indexed as its event arrives.
A driver that applies objects itself without run() (tests, bench/served/inventory.py) never holds
back. Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from webhook.inventory.pacing import SLICE_SECONDS, pacer
from webhook.inventory.syncgate import SyncGate

log = logging.getLogger(__name__)

INDEX = "layer index"  # its name at the gate (readiness waits for it too)


class FirstIndex:
    def __init__(self, gate: SyncGate, index_node: Callable[[str], None],
                 slice_seconds: float = SLICE_SECONDS,
                 complete: Callable[[], None] = lambda: None) -> None:
        """`complete`: finishes what indexing left for later (LayerIndex.flush: the bits of
        the nodes added), called once they are all indexed, before readiness."""
        self._gate = gate
        self._index_node = index_node
        self._complete = complete
        self._slice = slice_seconds
        self._held: set[str] | None = None  # None: index each node at once

    def hold(self) -> None:
        """From now until the first lists are in, note nodes instead of indexing them."""
        if self._held is None:
            self._held = set()
            self._gate.await_(INDEX)

    def reindex(self, name: str) -> None:
        if self._held is None:
            self._index_node(name)
        else:
            self._held.add(name)

    @property
    def holding(self) -> bool:
        """Nodes are noted, not indexed: the first lists are not all in yet."""
        return self._held is not None

    def held(self) -> int:
        """Nodes noted and not yet indexed (0 once the first index is built)."""
        return 0 if self._held is None else len(self._held)

    async def build(self) -> None:
        """Once every other resource is listed: index the noted nodes, then let readiness
        through. Events arriving meanwhile are noted too and taken in the same pass."""
        if self._held is None:
            return
        await self._gate.wait_listed(but=INDEX)
        held = self._held
        loop = asyncio.get_running_loop()
        end = loop.time() + self._slice
        while held:
            # By name, as a list delivers them: the index's slots, which break ties between
            # equal nodes, come out as in a replica that indexed each node as it arrived
            # (a set's order differs from process to process).
            batch = sorted(held)
            held.clear()
            for name in batch:
                try:
                    self._index_node(name)
                except Exception:  # a bug: that node stays out until its next event, as
                    log.exception("indexing node %s failed", name)  # when a handler fails
                if loop.time() >= end:
                    await pacer().turn()
                    end = loop.time() + self._slice
        # No await since the set ran empty: nothing is noted and left behind.
        self._held = None
        self._complete()  # here, not in the first review after readiness
        self._gate.synced(INDEX)
