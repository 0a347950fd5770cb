"""Connection accounting for the HTTPS edge: every connection is counted from accept to close,
so that the process holds at most --max-connections of them whatever clients do.

Past the limit, room is made by closing the connection idle longest (a closing one first),
else the one whose request has been arriving longest: an attacker's slow connections go
before a fresh API server request, and a request already read is never cut short. When no
connection can go, the new one is refused. Each request must arrive whole (head and body)
within --request-read-seconds of its first byte. From that byte until its handler is done,
the loop's watch consumers let it go first (webhook.inventory.pacing).
"""

from __future__ import annotations

import asyncio
import collections
import logging
from dataclasses import dataclass
from typing import Literal, cast

from aiohttp import web

from webhook.inventory.pacing import pacer
from webhook.logthrottle import ThrottledLog
from webhook.serving.metrics import Metrics
from webhook.serving.server import LARGE_BODY

log = logging.getLogger(__name__)
# handshake -> idle -> head (bytes of a request came) -> body (its handler reads the body)
# -> handling -> idle again, or closing when the answer said "Connection: close"; closed.
State = Literal["handshake", "idle", "head", "body", "handling", "closing", "closed"]


@dataclass(frozen=True, slots=True)
class EdgeLimits:
    max_connections: int = 512
    request_read_seconds: float = 1.0
    idle_seconds: float = 75.0
    handshake_seconds: float = 5.0
    drain_seconds: float = 5.0


class _Conn(asyncio.Protocol):
    """Stands between the TLS transport and aiohttp's protocol for one connection: tells
    Connections when it is established, receives bytes and is lost."""

    def __init__(self, owner: Connections, inner: asyncio.Protocol) -> None:
        self.owner = owner
        self.inner = inner
        self.transport: asyncio.Transport | None = None
        self.state: State = "handshake"
        self.began = 0.0  # loop time of the current request's first byte
        self.released = False
        self.holding = False  # the loop's watch consumers wait for this request
        # The TLS context its handshake used (a changed client CA makes a new one), and
        # whether that context has since been replaced: its next answer closes it.
        self.context: object = None
        self.stale = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A stream transport (uvloop's is one without subclassing asyncio.Transport).
        self.transport = cast(asyncio.Transport, transport)
        self.owner.established(self)
        self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.state == "idle":
            self.owner.request_started(self)
        self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self.inner.eof_received()

    def connection_lost(self, exc: Exception | None) -> None:
        self.owner.release(self)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        self.inner.pause_writing()

    def resume_writing(self) -> None:
        self.inner.resume_writing()


class Connections:
    """Counts connections from accept to close and enforces the limits. Also the app's
    RequestEdge: its middleware and handlers say when a request's handler runs and has read
    the body, and learn the request's read deadline."""

    def __init__(self, limits: EdgeLimits, metrics: Metrics, reviews: bool = True) -> None:
        """`reviews=False`: a port that serves no review (metrics): its requests never make
        the loop's watch consumers wait."""
        self.limits = limits
        self.metrics = metrics
        self.reviews = reviews
        self.open = 0
        self.closed_since_trim = 0
        # Bodies of LARGE_BODY or more read since the last trim: their decoding took tens of MB
        # that go back to the heap, not to the system, until the serving loop trims it.
        self.large_bodies_since_trim = 0
        # Eviction candidates, first in line first: connections with no request under way
        # (closing ones ahead), then those still receiving one, oldest request first. A
        # request already read (its review being computed) is never cut short.
        self._idle: collections.OrderedDict[_Conn, None] = collections.OrderedDict()
        self._reading: collections.OrderedDict[_Conn, None] = collections.OrderedDict()
        self._by_handler: dict[object, _Conn] = {}
        # One timer for the oldest head deadline, not one per request (call_at and cancel
        # cost a few us a request): _reading is in order of request start, so the head of
        # the line is the next to expire.
        self._deadline_timer: asyncio.TimerHandle | None = None
        self._log = ThrottledLog(log)

    def admit(self) -> bool:
        """A connection was accepted: may it proceed to the TLS handshake?"""
        if self.open >= self.limits.max_connections and not self._evict():
            self.metrics.connections_closed.labels(reason="refused").inc()
            self._log.warning("refused", "connection refused: %d open, the limit", self.open)
            return False
        self.open += 1
        self.metrics.open_connections.set(self.open)
        return True

    def wrap(self, inner: asyncio.Protocol, context: object = None) -> _Conn:
        """`context`: the TLS context its handshake uses (see `retire`)."""
        conn = _Conn(self, inner)
        conn.context = context
        self._by_handler[inner] = conn
        return conn

    def retire(self, current: object) -> int:
        """The client CA changed (`current`: the context now in service): connections its
        predecessor admitted close, idle ones now and busy ones with their answer (a CA
        taken out must not keep a caller it let in). Returns how many closed now."""
        closed = 0
        for conn in list(self._by_handler.values()):
            if conn.context is None or conn.context is current or conn.released:
                continue
            if conn.state in ("handshake", "idle", "closing"):
                self.close(conn, "client_ca_changed")
                closed += 1
            else:
                conn.stale = True
        return closed

    def stale(self, request: web.BaseRequest) -> bool:
        conn = self._by_handler.get(request.protocol)
        return conn is not None and conn.stale

    def _evict(self) -> bool:
        for line in (self._idle, self._reading):
            for conn in line:
                self.close(conn, "evicted")
                return True
        return False

    def close(self, conn: _Conn, reason: str) -> None:
        self.metrics.connections_closed.labels(reason=reason).inc()
        transport = conn.transport
        self.release(conn)
        if transport is not None:
            transport.abort()  # no TLS goodbye: the slot is free now, not after a timeout

    def release(self, conn: _Conn) -> None:
        if conn.released:
            return
        conn.released = True
        self._let_go(conn)
        self._set(conn, "closed")
        self._by_handler.pop(conn.inner, None)
        self.open -= 1
        self.closed_since_trim += 1
        self.metrics.open_connections.set(self.open)

    def handshake_failed(self, conn: _Conn, exc: BaseException) -> None:
        if not conn.released:
            self.metrics.connections_closed.labels(reason="handshake").inc()
            self._log.warning("handshake", "TLS handshake failed: %s: %s",
                              type(exc).__name__, exc)
            self.release(conn)

    def _set(self, conn: _Conn, state: State) -> None:
        conn.state = state
        if state in ("idle", "closing"):
            self._idle[conn] = None
            self._idle.move_to_end(conn, last=state == "idle")
        else:
            self._idle.pop(conn, None)
        if state in ("head", "body"):
            self._reading[conn] = None  # keeps its place (request start) from head to body
        else:
            self._reading.pop(conn, None)

    def established(self, conn: _Conn) -> None:
        if not conn.released:
            self._set(conn, "idle")

    def request_started(self, conn: _Conn) -> None:
        """The first byte of a request: its head has until the deadline to arrive whole."""
        loop = asyncio.get_running_loop()
        conn.began = loop.time()
        self._hold(conn)
        self._set(conn, "head")
        if self._deadline_timer is None:
            self._deadline_timer = loop.call_at(conn.began + self.limits.request_read_seconds,
                                                self._head_deadlines)

    def _head_deadlines(self) -> None:
        """Close the connections whose request head is late; wait for the next deadline.
        (A late body is its handler's to answer, with a 408.)"""
        self._deadline_timer = None
        loop = asyncio.get_running_loop()
        now = loop.time()
        limit = self.limits.request_read_seconds
        for conn in list(self._reading):
            if conn.began + limit > now:
                self._deadline_timer = loop.call_at(conn.began + limit, self._head_deadlines)
                return
            if conn.state == "head":
                self._log.warning("read_timeout", "request head not received within %.1fs",
                                  limit)
                self.close(conn, "read_timeout")

    # RequestEdge
    def begin(self, request: web.BaseRequest) -> float | None:
        conn = self._by_handler.get(request.protocol)
        if conn is None:
            return None
        now = asyncio.get_running_loop().time()
        waited = None
        if conn.state != "head":  # pipelined: its bytes came while the last one was handled
            conn.began = now
            self._hold(conn)
        else:
            waited = now - conn.began
        self._set(conn, "body" if request.body_exists else "handling")
        return waited

    def received(self, request: web.BaseRequest) -> None:
        if (request.content_length or 0) >= LARGE_BODY:
            self.large_bodies_since_trim += 1
        conn = self._by_handler.get(request.protocol)
        if conn is not None and conn.state == "body":
            self._set(conn, "handling")

    def end(self, request: web.BaseRequest, reusable: bool) -> None:
        conn = self._by_handler.get(request.protocol)
        if conn is not None:
            self._let_go(conn)
            # closing: aiohttp drains what is left of the body, then closes; first to go
            self._set(conn, "idle" if reusable else "closing")

    # Reviews go first on the loop: the watch consumers wait while one is in flight.
    def _hold(self, conn: _Conn) -> None:
        if self.reviews and not conn.holding:
            conn.holding = True
            pacer().hold()

    @staticmethod
    def _let_go(conn: _Conn) -> None:
        if conn.holding:
            conn.holding = False
            pacer().release()

    def deadline(self, request: web.BaseRequest) -> float:
        conn = self._by_handler.get(request.protocol)
        if conn is not None and conn.state == "body":
            return conn.began + self.limits.request_read_seconds
        return asyncio.get_running_loop().time() + self.limits.request_read_seconds
