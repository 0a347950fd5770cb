"""Ready means synced (webhook/inventory/syncgate.py): every awaited resource listed in full,
none being listed again, none whose watch has failed for longer than the stale limit; and
what is missing said per resource."""

from __future__ import annotations

import asyncio
import contextlib

from tests.helpers import Clock
from webhook.inventory.syncgate import SyncGate


def test_ready_once_every_resource_is_listed_and_not_while_one_is_listed_again() -> None:
    clock = Clock(100.0)
    gate = SyncGate(("nodes", "pods"), clock)
    assert not gate.ready
    assert gate.missing() == ["nodes: first list not complete", "pods: first list not complete"]
    gate.listing("nodes")
    gate.synced("nodes")
    assert not gate.ready and gate.missing() == ["pods: first list not complete"]
    gate.synced("pods")
    assert gate.ready and gate.missing() == []
    gate.listing("pods")  # a 410: listed again
    assert not gate.ready and gate.missing() == ["pods: listing again"]
    gate.synced("pods")
    assert gate.ready
    gate.await_("nodelayers")  # waited for from now on
    assert gate.missing() == ["nodelayers: first list not complete"]


def test_a_watch_failing_past_the_limit_is_stale_until_it_answers() -> None:
    clock = Clock(100.0)
    gate = SyncGate(("nodes",), clock, stale_seconds=30)
    gate.synced("nodes")
    gate.failing("nodes")
    clock.now += 20
    gate.failing("nodes")  # a second failure keeps the first one's time
    assert gate.ready
    clock.now += 11
    assert not gate.ready and gate.missing() == ["nodes: watch failing for 31s"]
    gate.healthy("nodes")
    assert gate.ready
    gate.failing("nodes")
    clock.now += 31
    gate.synced("nodes")  # a completed list is a current picture too
    assert gate.ready


async def test_wait_returns_when_a_list_completes() -> None:
    gate = SyncGate(("nodes",), Clock(100.0))
    waiting = asyncio.ensure_future(gate.wait())
    await asyncio.sleep(0)
    assert not waiting.done()
    gate.synced("nodes")
    await asyncio.wait_for(waiting, 2)


async def test_a_list_refused_as_unavailable_is_tried_again_without_leaving_ready() -> None:
    """An absent CRD, Leases we may not read: nothing to list, so nothing to wait for; the
    retries (every 300 s by default) never take readiness away, not even for the one request
    each takes (a review in that window failed open; /readyz flapped)."""
    from webhook.inventory.reflector import Reflector
    from webhook.inventory.reflector_terms import ReflectorSettings, Unavailable

    gate = SyncGate(("nodes",), Clock(100.0))
    gate.synced("nodes")
    seen: list[bool] = []

    def refused(**kwargs: object) -> object:
        seen.append(gate.ready)  # what a review during the list would find
        raise Unavailable("not served", 0.0)

    async def sleep(seconds: float) -> None:
        if len(seen) >= 3:
            raise asyncio.CancelledError
        await asyncio.sleep(0)

    reflector = Reflector("leases", refused, lambda obj: None, lambda *a: None, None,
                          ReflectorSettings(), sleep=sleep)
    reflector.report_sync_to(gate)
    with contextlib.suppress(asyncio.CancelledError):
        await reflector._list_watch()
    assert seen[0] is False  # the first list: not known to be unavailable yet
    assert seen[1:] == [True, True] and gate.ready
