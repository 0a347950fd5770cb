"""Connection accounting (webhook.serving.connections) with fake transports: who makes
room at the cap, who is never cut short, and the read deadline of a request."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace
from typing import cast

import pytest
from aiohttp import web

from webhook.config import ConfigError
from webhook.serving.connections import Connections, EdgeLimits
from webhook.serving.metrics import Metrics
from webhook.serving.server import LARGE_BODY
from webhook.settings_load import load_settings


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.aborted = False

    def abort(self) -> None:
        self.aborted = True


class Edge:
    """Connections with `cap` slots, and helpers to drive one connection through a request."""

    def __init__(self, cap: int, read_seconds: float = 60.0) -> None:
        self.metrics = Metrics()
        self.connections = Connections(EdgeLimits(max_connections=cap,
                                                  request_read_seconds=read_seconds),
                                       self.metrics)

    def open(self) -> tuple[asyncio.Protocol, FakeTransport]:
        assert self.connections.admit()
        inner = asyncio.Protocol()
        conn = self.connections.wrap(inner)
        transport = FakeTransport()
        conn.connection_made(transport)
        return conn, transport

    @staticmethod
    def request(conn: asyncio.Protocol, body: bool = True) -> web.BaseRequest:
        conn.data_received(b"POST /mutate HTTP/1.1\r\n")
        inner = conn.inner  # type: ignore[attr-defined]
        return cast(web.BaseRequest, SimpleNamespace(protocol=inner, body_exists=body,
                                                     content_length=None))

    def closed(self, reason: str) -> float | None:
        return self.metrics.registry.get_sample_value(
            "layer_locality_connections_closed_total", {"reason": reason})

    def open_gauge(self) -> float | None:
        return self.metrics.registry.get_sample_value("layer_locality_open_connections")


async def test_room_is_made_by_the_connection_idle_longest() -> None:
    edge = Edge(cap=3)
    (a, ta), (_b, tb), (_c, tc) = edge.open(), edge.open(), edge.open()
    request = edge.request(a)  # a works, then is idle again: now the most recent
    edge.connections.begin(request)
    edge.connections.end(request, reusable=True)
    edge.open()
    assert (ta.aborted, tb.aborted, tc.aborted) == (False, True, False)
    assert edge.closed("evicted") == 1
    assert edge.open_gauge() == 3


async def test_a_closing_connection_goes_before_idle_ones() -> None:
    edge = Edge(cap=2)
    (_a, ta), (b, tb) = edge.open(), edge.open()
    request = edge.request(b)
    edge.connections.begin(request)
    edge.connections.end(request, reusable=False)  # answered "Connection: close"
    edge.open()
    assert (ta.aborted, tb.aborted) == (False, True)


async def test_an_idle_connection_goes_before_one_still_reading_a_request() -> None:
    """The idle line is emptied first, however old the request still arriving: here the
    reading connection's request began before the idle one even connected."""
    edge = Edge(cap=2)
    reading, t_reading = edge.open()
    edge.request(reading)  # head still arriving, from before `idle` was opened
    _idle, t_idle = edge.open()
    later, t_later = edge.open()
    assert (t_reading.aborted, t_idle.aborted) == (False, True)
    assert edge.closed("evicted") == 1
    edge.request(later)  # no idle connection left: the request arriving longest goes
    edge.open()
    assert t_reading.aborted and not t_later.aborted


async def test_then_the_request_arriving_longest_and_never_one_already_read() -> None:
    edge = Edge(cap=3)
    (a, ta), (b, tb), (c, tc) = edge.open(), edge.open(), edge.open()
    handled(edge, a)  # the oldest request, but read: its review runs
    edge.request(b)  # head still arriving
    edge.connections.begin(edge.request(c))  # body still arriving
    d, td = edge.open()
    assert (ta.aborted, tb.aborted, tc.aborted) == (False, True, False)
    edge.request(d)  # a request after c's
    e, _ = edge.open()
    assert tc.aborted and not td.aborted
    handled(edge, d)
    handled(edge, e)
    assert edge.connections.admit() is False  # only requests already read are left
    assert edge.closed("refused") == 1
    assert edge.closed("evicted") == 2


def handled(edge: Edge, conn: asyncio.Protocol) -> None:
    """`conn` gets a request whose body its handler has read."""
    request = edge.request(conn)
    edge.connections.begin(request)
    edge.connections.received(request)


async def test_a_request_head_must_arrive_within_the_deadline() -> None:
    edge = Edge(cap=2, read_seconds=0.05)
    (a, ta), (b, tb) = edge.open(), edge.open()
    edge.request(a)  # its head never completes
    request = edge.request(b)
    edge.connections.begin(request)  # a handler started for b: its head was complete
    for _ in range(100):  # bounded wait for the timer
        if ta.aborted:
            break
        await asyncio.sleep(0.01)
    assert ta.aborted and not tb.aborted
    assert edge.closed("read_timeout") == 1
    assert edge.open_gauge() == 1


async def test_the_body_deadline_runs_from_the_first_byte() -> None:
    edge = Edge(cap=1, read_seconds=30.0)
    conn, _ = edge.open()
    before = asyncio.get_running_loop().time()
    request = edge.request(conn)
    await asyncio.sleep(0.01)
    edge.connections.begin(request)
    after = asyncio.get_running_loop().time()
    deadline = edge.connections.deadline(request)
    assert before + 30.0 <= deadline <= after + 30.0 - 0.01


async def test_a_lost_connection_frees_its_slot_once() -> None:
    edge = Edge(cap=1)
    conn, _ = edge.open()
    conn.connection_lost(None)
    conn.connection_lost(None)
    assert edge.open_gauge() == 0
    assert edge.connections.admit()


@pytest.mark.parametrize("flags", [{"max_connections": "0"}, {"request_read_seconds": "0"},
                                   {"idle_seconds": "-1"}, {"tls_handshake_seconds": "0"}])
def test_limits_must_be_positive(flags: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match=next(iter(flags))):
        load_settings(flags, {})


def test_limits_read_env_then_flags() -> None:
    settings = load_settings({"max_connections": "64"},
                             {"LAYER_LOCALITY_REQUEST_READ_SECONDS": "0.5",
                              "LAYER_LOCALITY_MAX_CONNECTIONS": "8"})
    assert (settings.max_connections, settings.request_read_seconds) == (64, 0.5)


async def test_one_timer_serves_every_head_deadline() -> None:
    """Heads started at different times are each cut at their own deadline, a head that
    completed is not, and a later head on a reused connection gets a deadline again."""
    edge = Edge(cap=4, read_seconds=0.05)
    (a, ta), (b, tb), (c, tc) = edge.open(), edge.open(), edge.open()
    edge.request(a)
    await asyncio.sleep(0.03)
    edge.request(b)
    handled_c = edge.request(c)
    edge.connections.begin(handled_c)  # c's head was complete
    await asyncio.sleep(0.035)  # a's deadline passed, b's not yet
    assert ta.aborted and not tb.aborted
    edge.connections.received(handled_c)
    edge.connections.end(handled_c, reusable=True)
    edge.request(c)  # c's next request never completes its head
    for _ in range(100):
        if tb.aborted and tc.aborted:
            break
        await asyncio.sleep(0.01)
    assert tb.aborted and tc.aborted
    assert edge.closed("read_timeout") == 3


async def test_a_large_body_asks_for_a_trim() -> None:
    edge = Edge(cap=2)
    conn, _ = edge.open()
    for length in (LARGE_BODY - 1, LARGE_BODY):
        request = edge.request(conn)
        request.content_length = length  # type: ignore[misc]
        edge.connections.begin(request)
        edge.connections.received(request)
        edge.connections.end(request, reusable=True)
    assert edge.connections.large_bodies_since_trim == 1
