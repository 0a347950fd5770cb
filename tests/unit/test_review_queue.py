"""The review queueing delay (layer_locality_review_queue_seconds): from a request's first
bytes read off its connection to its handler starting, for reviews only, through the app's
own middleware and webhook.serving.connections; and the inventory frozen out of the cycle
collector's sight once synced (webhook.serving.serving.freeze_when_ready)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from unittest import mock

from aiohttp import web
from aiohttp.test_utils import make_mocked_request

from webhook.core.index import LayerIndex
from webhook.serving.connections import Connections, EdgeLimits
from webhook.serving.metrics import Metrics
from webhook.serving.server import INVENTORY, create_app, edge_middleware
from webhook.serving.serving import SYNC_GC_THRESHOLD


class Transport(asyncio.Transport):
    def abort(self) -> None:
        pass


class NoInventory:
    def __init__(self) -> None:
        self.index = LayerIndex()
        self.ready = True


class Mutator:
    async def close(self) -> None:
        pass


def served() -> tuple[web.Application, Connections, Metrics]:
    metrics = Metrics()
    connections = Connections(EdgeLimits(), metrics)
    app = create_app(Mutator(), NoInventory(), metrics, edge=connections)  # type: ignore[arg-type]
    return app, connections, metrics


def opened(connections: Connections) -> asyncio.Protocol:
    assert connections.admit()
    inner = mock.Mock()  # aiohttp's protocol, as make_mocked_request mocks it
    conn = connections.wrap(inner)
    conn.connection_made(Transport())
    return conn


async def through_middleware(app: web.Application, conn: asyncio.Protocol, path: str) -> None:
    request = make_mocked_request("POST" if path.startswith("/mutate") else "GET", path,
                                  app=app, protocol=conn.inner)  # type: ignore[attr-defined]

    async def handler(request: web.Request) -> web.Response:
        return web.Response()

    await edge_middleware(request, handler)


def queued(metrics: Metrics) -> tuple[float, float]:
    count = metrics.registry.get_sample_value("layer_locality_review_queue_seconds_count")
    total = metrics.registry.get_sample_value("layer_locality_review_queue_seconds_sum")
    return count or 0.0, total or 0.0


async def test_a_review_counts_the_time_the_loop_kept_it_waiting() -> None:
    app, connections, metrics = served()
    conn = opened(connections)
    conn.data_received(b"POST /mutate HTTP/1.1\r\n")
    # The loop busy elsewhere (watch events) before the handler starts: blocked on purpose.
    time.sleep(0.02)  # noqa: ASYNC251
    await through_middleware(app, conn, "/mutate")
    count, total = queued(metrics)
    assert count == 1
    assert 0.02 <= total < 5


async def test_probes_and_pipelined_requests_are_not_counted() -> None:
    app, connections, metrics = served()
    conn = opened(connections)
    conn.data_received(b"GET /readyz HTTP/1.1\r\n")
    await through_middleware(app, conn, "/readyz")
    conn.data_received(b"POST /mutate HTTP/1.1\r\n")
    await through_middleware(app, conn, "/mutate/holdout-exempt")
    # A second request whose bytes came while the first was handled: when they were read is
    # not known, so it is not counted.
    await through_middleware(app, conn, "/mutate")
    assert queued(metrics)[0] == 1


async def test_the_inventory_is_frozen_out_of_the_collectors_sight_once_ready() -> None:
    import gc

    from webhook.serving.serving import freeze_when_ready

    app, _, _ = served()
    inventory = app[INVENTORY]
    inventory.ready = False  # type: ignore[misc]
    frozen = gc.get_freeze_count()
    thresholds = gc.get_threshold()
    task = asyncio.create_task(freeze_when_ready(app, poll=0.001))
    await asyncio.sleep(0.01)
    assert not task.done() and gc.get_freeze_count() == frozen
    # While the first sync runs, the young generation is collected less often.
    assert gc.get_threshold() == (SYNC_GC_THRESHOLD, *thresholds[1:])
    inventory.ready = True  # type: ignore[misc]
    try:
        await asyncio.wait_for(task, 5)
        assert gc.get_freeze_count() > frozen
        assert gc.get_threshold() == thresholds  # reviews' collections as before
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


async def test_overlapping_waits_leave_the_collectors_threshold_as_it_was() -> None:
    import gc

    from webhook.serving.serving import freeze_when_ready

    first, _, _ = served()
    second, _, _ = served()
    first[INVENTORY].ready = second[INVENTORY].ready = False  # type: ignore[misc]
    thresholds = gc.get_threshold()
    a = asyncio.create_task(freeze_when_ready(first, poll=0.001))
    await asyncio.sleep(0.01)
    b = asyncio.create_task(freeze_when_ready(second, poll=0.001))
    await asyncio.sleep(0.01)
    first[INVENTORY].ready = True  # type: ignore[misc]
    try:
        await asyncio.wait_for(a, 5)
        second[INVENTORY].ready = True  # type: ignore[misc]
        await asyncio.wait_for(b, 5)
        assert gc.get_threshold() == thresholds
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)


async def test_the_collectors_threshold_comes_back_when_the_wait_is_cancelled() -> None:
    import gc

    from webhook.serving.serving import freeze_when_ready

    app, _, _ = served()
    app[INVENTORY].ready = False  # type: ignore[misc]
    thresholds = gc.get_threshold()
    task = asyncio.create_task(freeze_when_ready(app, poll=0.001))
    await asyncio.sleep(0.01)
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    try:
        assert gc.get_threshold() == thresholds
    finally:
        gc.set_threshold(*thresholds)
