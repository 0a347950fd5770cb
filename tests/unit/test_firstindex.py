"""The first index (webhook/inventory/firstindex.py): while the first lists arrive, a node
touched by several of them is indexed once, by name, after every list is in and before
readiness is let through; afterwards each change is indexed as it comes."""

from __future__ import annotations

import asyncio
from collections import Counter

from webhook.inventory.firstindex import FirstIndex
from webhook.inventory.syncgate import SyncGate


async def test_nodes_are_indexed_once_after_every_first_list_and_before_ready() -> None:
    gate = SyncGate(("nodes", "nodelayers", "leases"), clock=lambda: 0.0)
    indexed: Counter[str] = Counter()
    order: list[str] = []
    ready_when_indexed: list[bool] = []

    def index_node(name: str) -> None:
        indexed[name] += 1
        order.append(name)
        ready_when_indexed.append(gate.ready)

    first = FirstIndex(gate, index_node)
    first.hold()
    building = asyncio.create_task(first.build())
    for resource in ("nodes", "nodelayers", "leases"):  # each list touches every node
        for name in ("c", "a", "b"):
            first.reindex(name)
        gate.synced(resource)
        await asyncio.sleep(0)
        if resource != "leases":
            assert not indexed and first.holding  # some list is still out: nothing built
    await asyncio.wait_for(building, 5)
    assert indexed == {"a": 1, "b": 1, "c": 1}
    # By name, as a list delivers nodes: the index's slots (which break ties) come out the
    # same in every replica.
    assert order == ["a", "b", "c"]
    assert ready_when_indexed == [False, False, False]
    assert gate.ready and not first.holding and first.held() == 0

    first.reindex("a")  # a watch event after the first index: at once
    assert indexed["a"] == 2


async def test_events_arriving_while_it_builds_are_taken_in_the_same_pass() -> None:
    gate = SyncGate(("nodes",), clock=lambda: 0.0)
    indexed: list[str] = []
    first: FirstIndex

    def index_node(name: str) -> None:
        indexed.append(name)
        if name == "a":
            first.reindex("late")  # an event applied during the build (it yields between)

    first = FirstIndex(gate, index_node, slice_seconds=0.0)  # yield after every node
    first.hold()
    first.reindex("a")
    gate.synced("nodes")
    await asyncio.wait_for(first.build(), 5)
    assert sorted(indexed) == ["a", "late"] and gate.ready


async def test_a_node_that_fails_to_index_does_not_keep_the_others_out() -> None:
    gate = SyncGate(("nodes",), clock=lambda: 0.0)
    indexed: list[str] = []

    def index_node(name: str) -> None:
        if name == "bad":
            raise ValueError("a bug")
        indexed.append(name)

    first = FirstIndex(gate, index_node)
    first.hold()
    for name in ("ok-1", "bad", "ok-2"):
        first.reindex(name)
    gate.synced("nodes")
    await asyncio.wait_for(first.build(), 5)
    assert sorted(indexed) == ["ok-1", "ok-2"] and gate.ready


def test_without_hold_every_node_is_indexed_at_once() -> None:
    gate = SyncGate(("nodes",), clock=lambda: 0.0)
    indexed: list[str] = []
    first = FirstIndex(gate, indexed.append)
    first.reindex("a")
    assert indexed == ["a"] and not first.holding
    assert gate.missing() == ["nodes: first list not complete"]  # the index is not awaited


async def test_what_indexing_left_for_later_is_done_before_ready() -> None:
    """`complete` (the index's flush: the bits of the nodes added) runs once, after the last
    node is indexed and before readiness, so the first review after it does not pay for it."""
    gate = SyncGate(("nodes",), clock=lambda: 0.0)
    indexed: list[str] = []
    completed: list[tuple[int, bool]] = []
    first = FirstIndex(gate, indexed.append,
                       complete=lambda: completed.append((len(indexed), gate.ready)))
    first.hold()
    for name in ("b", "a"):
        first.reindex(name)
    gate.synced("nodes")
    await asyncio.wait_for(first.build(), 5)
    assert completed == [(2, False)] and gate.ready
