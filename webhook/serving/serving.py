"""Running the app over HTTPS with bounded connections and memory.

asyncio's own TLS server pays for a connection (read buffer, OpenSSL state) before the
application hears of it. So this runner accepts connections itself and asks
webhook.serving.connections whether each may proceed before TLS begins (else it is reset); TLS
handshakes have a deadline; idle keep-alive connections close after --idle-seconds. Memory
freed by a burst of connections is handed back to the system instead of staying in the heap.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import signal
import socket
import ssl
import struct
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, Protocol

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError

from webhook.config import ConfigError
from webhook.logthrottle import ThrottledLog
from webhook.memtrim import trim
from webhook.serving.connections import Connections, EdgeLimits
from webhook.serving.metrics import Metrics
from webhook.serving.server import DRAIN, EDGE, INVENTORY

log = logging.getLogger(__name__)

# asyncio gives every TLS connection a 256 KiB read buffer (sslproto.SSLProtocol.max_size):
# about 80% of what an idle connection costs. A TLS record's plaintext is at most 16 KiB, so
# 16 KiB reads a record's worth at a time (a record split over two socket reads is joined by
# OpenSSL); an idle connection costs ~27 KiB (800 of them, bench/served/edge_probe.py), ~38 KiB
# with 32 KiB, ~285 KiB with asyncio's default.
TLS_READ_BUFFER = 16 << 10
# Memory is handed back once this many connections closed since the last time (checked
# every TRIM_SECONDS): a steady trickle does not pay for a trim, a burst does.
TRIM_AFTER = 64
TRIM_SECONDS = 2.0
RETIRE_SECONDS = 1.0  # how soon connections a replaced client CA admitted are closed
_LINGER_RESET = struct.pack("ii", 1, 0)  # SO_LINGER on, 0 s: close with RST, no TIME_WAIT
GIL_SWITCH_SECONDS = 0.0005


class HTTPLog(logging.LoggerAdapter[logging.Logger]):
    """aiohttp's server logger. aiohttp reports a malformed request (an oversized header...)
    or a failure outside our handlers with a full traceback; here each is counted and gets one
    throttled line."""

    def __init__(self, logger: logging.Logger, metrics: Metrics) -> None:
        super().__init__(logger, {})
        self.metrics = metrics
        self._throttled = ThrottledLog(logger)

    def log(self, level: int, msg: object, *args: object, **kwargs: Any) -> None:
        exc_info = kwargs.get("exc_info")
        if isinstance(exc_info, tuple):
            exc_info = exc_info[1]
        exc = exc_info if isinstance(exc_info, BaseException) else (
            sys.exc_info()[1] if exc_info else None)
        if isinstance(exc, HttpProcessingError):
            self.metrics.bad_requests.labels(status=str(exc.code or 400)).inc()
            kind = "bad_http"
        elif isinstance(exc, ConnectionError):
            self.metrics.aborted_requests.inc()
            kind = "aborted"
        elif exc is not None:
            self.metrics.server_errors.inc()
            kind = "server_error"
        else:
            kind = "http"
        if level < logging.WARNING:  # aiohttp's debug notes (a port scan...): counted only
            return
        text = str(msg) % args if args else str(msg)
        if exc is not None:
            detail = exc.message if isinstance(exc, HttpProcessingError) else str(exc)
            text += f": {type(exc).__name__}: {' '.join(str(detail).split())[:200]}"
        self._throttled.warning(kind, "%s", text)


class TlsSource(Protocol):
    """The serving context, read for every handshake (serving.tls.ServingCertificate: a
    new client CA makes a new context)."""

    @property
    def context(self) -> ssl.SSLContext: ...


# Called with the peer's address and the error when a handshake failed on the client's
# certificate (not verified by the client CA: another CA, expired, badly chained).
CertificateRefused = Callable[[str, BaseException], None]


# What OpenSSL says when *our* check of the client's certificate failed. Alerts the client sent
# (..._ALERT_BAD_CERTIFICATE: it refused our serving certificate) are not among them.
# A chain too large for the handshake (EXCESSIVE_MESSAGE_SIZE: OpenSSL's cap on the
# Certificate message) or one it cannot parse is refused before any check of ours: a refused
# caller all the same.
CLIENT_CERTIFICATE_FAILURES = frozenset({
    "CERTIFICATE_VERIFY_FAILED", "PEER_DID_NOT_RETURN_A_CERTIFICATE",
    "EXCESSIVE_MESSAGE_SIZE", "CERT_LENGTH_MISMATCH", "BAD_CERTIFICATE",
    "LENGTH_MISMATCH", "BAD_LENGTH", "UNABLE_TO_DECODE_ISSUER_PUBLIC_KEY"})


def certificate_refused(exc: BaseException) -> bool:
    """Whether a failed handshake's error is our refusal of the client's certificate (pure)."""
    if isinstance(exc, ssl.SSLCertVerificationError):
        return True
    reason = str(getattr(exc, "reason", None) or "").upper()
    return isinstance(exc, ssl.SSLError) and reason in CLIENT_CERTIFICATE_FAILURES


class EdgeSite(web.BaseSite):
    """An aiohttp site on listening sockets bound beforehand, with its own accept loop."""

    def __init__(self, runner: web.BaseRunner, sockets: list[socket.socket],
                 tls: TlsSource, connections: Connections,
                 on_certificate_refused: CertificateRefused | None = None) -> None:
        super().__init__(runner, ssl_context=tls.context)
        self._tls = tls
        self._sockets = sockets
        self._connections = connections
        self._on_certificate_refused = on_certificate_refused
        self._tasks: set[asyncio.Task[None]] = set()
        self._log = ThrottledLog(log)

    @property
    def name(self) -> str:
        host, port = self._sockets[0].getsockname()[:2]
        return f"https://[{host}]:{port}" if ":" in host else f"https://{host}:{port}"

    async def start(self) -> None:
        await super().start()
        for sock in self._sockets:
            self._spawn(self._accept(sock))
        self._spawn(self._trim())
        self._spawn(self._retire())

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        for sock in self._sockets:
            sock.close()
        await super().stop()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)  # a reference until done: the loop keeps only weak ones
        task.add_done_callback(self._tasks.discard)

    async def _accept(self, listener: socket.socket) -> None:
        loop = asyncio.get_running_loop()
        while True:
            try:
                sock, address = await loop.sock_accept(listener)
            except OSError as exc:  # out of file descriptors...: wait rather than spin
                self._log.warning("accept", "accept failed: %s", exc)
                await asyncio.sleep(0.1)
                continue
            if self._connections.admit():
                self._spawn(self._handshake(sock, str(address[0])))
            else:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, _LINGER_RESET)
                sock.close()

    async def _handshake(self, sock: socket.socket, peer: str) -> None:
        server = self._runner.server
        assert server is not None
        context = self._tls.context
        conn = self._connections.wrap(server(), context)
        limit = self._connections.limits.handshake_seconds
        try:
            await asyncio.get_running_loop().connect_accepted_socket(
                lambda: conn, sock, ssl=context, ssl_handshake_timeout=limit,
                ssl_shutdown_timeout=limit)
        except (OSError, ssl.SSLError) as exc:  # includes resets and the handshake timeout
            self._connections.handshake_failed(conn, exc)
            if self._on_certificate_refused is not None and certificate_refused(exc):
                self._on_certificate_refused(peer, exc)
            sock.close()

    async def _retire(self) -> None:
        """Every second: when the client CA changed (a new context in service), close the
        connections the old one admitted (Connections.retire)."""
        current = self._tls.context
        while True:
            await asyncio.sleep(RETIRE_SECONDS)
            context = self._tls.context
            if context is not current:
                current = context
                closed = self._connections.retire(context)
                log.info("client CA changed: %d connection(s) it no longer admits closed, "
                         "busy ones close with their answer", closed)

    async def _trim(self) -> None:
        """After a burst of closed connections, or a large body, give their memory back.
        asyncio and aiohttp leave reference cycles behind a closed connection (transport <->
        its bound methods; an aborted request's exception -> traceback -> frames -> request),
        so the cycle collector must run before malloc_trim can find the pages free; a large
        body's objects are freed as its request ends (a trim alone)."""
        burst = False
        while True:
            await asyncio.sleep(TRIM_SECONDS)
            edge = self._connections
            closed, edge.closed_since_trim = edge.closed_since_trim, 0
            large, edge.large_bodies_since_trim = edge.large_bodies_since_trim, 0
            if closed >= TRIM_AFTER:
                gc.collect(1)  # the young generations, a few ms, while the burst goes on
            elif burst:
                gc.collect()  # once it is over, everything (startup objects are frozen)
            if trim is not None and (burst or closed >= TRIM_AFTER or large):
                trim()
                log.debug("memory handed back after %d closed connections", closed)
            burst = closed >= TRIM_AFTER


def listen(host: str, port: int, backlog: int = 128) -> list[socket.socket]:
    """Listening sockets for HOST:PORT, bound before anything starts: a port in use is a
    one-line error, not a traceback after the inventory began syncing."""
    where = f"{host}:{port}"
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                   flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {where}: {exc.strerror}") from exc
    sockets: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            sockets.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            sock.listen(backlog)
            sock.setblocking(False)
    except OSError as exc:
        for sock in sockets:
            sock.close()
        raise ConfigError(f"cannot listen on {where}: {(exc.strerror or str(exc)).lower()}"
                          ) from exc
    return sockets


def runner_options(limits: EdgeLimits, metrics: Metrics) -> dict[str, Any]:
    """aiohttp's server settings (AppRunner keywords; tests pass them to their server too)."""
    return {
        "access_log": None,
        "keepalive_timeout": limits.idle_seconds,
        # After an early answer (413, 415, 408) the rest of a body is drained this long at most.
        "lingering_time": limits.request_read_seconds,
        # Never inflate: /mutate refuses compressed bodies before reading them.
        "auto_decompress": False,
        "logger": HTTPLog(logging.getLogger("webhook.http"), metrics),
    }


async def drain(app: web.Application, seconds: float, hurry: asyncio.Event) -> None:
    """Keep serving `seconds` after the stop signal, every answer closing its connection
    (server.Drain says why), unless `hurry` is set meanwhile."""
    if seconds <= 0:
        return
    app[DRAIN].active = True
    log.info("stopping: serving %.1f s more with Connection: close, /readyz 503", seconds)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(hurry.wait(), seconds)


SYNC_GC_THRESHOLD = 50_000  # allocations between young collections while the first sync runs


async def freeze_when_ready(app: web.Application, poll: float = 0.2) -> None:
    """Once the inventory has synced, what it holds (a node per Node, a state per pod: about
    a million objects at 5,000 nodes and 50,000 pods) lives as long as the process: out of
    the collector's sight, a collection stops visiting it, and the pauses it put in front of
    reviews (milliseconds each) go. The pod list's end has just collected the garbage."""
    inventory = app[INVENTORY]
    thresholds = gc.get_threshold()
    # Until then the heap grows by a million long-lived objects; at the default threshold
    # the collector visits the young ones every 700 allocations and the whole heap each time
    # it grows by a quarter: about 6 % of a replica's CPU in its first sync. No review is
    # decided before it (each is answered unpatched, and may wait ~1 ms for a young pass).
    # Raised by the first waiter only, so a second one cannot keep it raised.
    raised = thresholds[0] < SYNC_GC_THRESHOLD
    if raised:
        gc.set_threshold(SYNC_GC_THRESHOLD, *thresholds[1:])
    try:
        while not inventory.ready:  # noqa: ASYNC110 - the Inventory protocol has no event
            await asyncio.sleep(poll)
    finally:
        if raised:
            gc.set_threshold(*thresholds)
    gc.freeze()
    log.debug("%d objects frozen out of the collector's sight", gc.get_freeze_count())


@dataclass(frozen=True, slots=True)
class Port:
    """One HTTPS port: its app, its listening sockets and its connection limits."""

    app: web.Application
    sockets: list[socket.socket]
    connections: Connections
    tls: TlsSource
    on_certificate_refused: CertificateRefused | None = None


def run(admission: Port, banner: str, metrics: Port | None = None) -> None:
    """Serve until SIGTERM or SIGINT, then shut down gracefully. `metrics`: the metrics
    port, when /metrics has one of its own."""
    for port in (admission, metrics):
        assert port is None or port.app[EDGE] is port.connections, (
            "create_app(edge=connections) lets handlers see limits")
    asyncio.run(_run(admission, banner, metrics))


async def _start(port: Port) -> tuple[web.AppRunner, EdgeSite]:
    runner = web.AppRunner(port.app, handle_signals=False,
                           **runner_options(port.connections.limits, port.connections.metrics))
    await runner.setup()
    site = EdgeSite(runner, port.sockets, port.tls, port.connections,
                    port.on_certificate_refused)
    return runner, site


async def _run(admission: Port, banner: str, metrics: Port | None) -> None:
    app, connections = admission.app, admission.connections
    from asyncio import sslproto

    sslproto.SSLProtocol.max_size = min(sslproto.SSLProtocol.max_size, TLS_READ_BUFFER)
    # The reflectors read and decode watch streams in worker threads: a review waiting for
    # the GIL behind one waits at most this long (CPython's default, 5 ms, is the whole
    # budget of a call).
    sys.setswitchinterval(GIL_SWITCH_SECONDS)
    runner, site = await _start(admission)
    metrics_serving = await _start(metrics) if metrics is not None else None
    # What exists now (modules, the loaded inventory...) lives as long as the process: out of
    # the collector's sight, a full collection after a burst takes ms, not a tenth of a second.
    gc.collect()
    gc.freeze()
    stop, hurry = asyncio.Event(), asyncio.Event()
    loop = asyncio.get_running_loop()

    def signalled() -> None:  # the first signal drains, a second one ends the drain
        (hurry if stop.is_set() else stop).set()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, signalled)
    freezing = asyncio.create_task(freeze_when_ready(app))
    try:
        await site.start()
        if metrics_serving is not None:
            await metrics_serving[1].start()
            banner += f"; metrics on {metrics_serving[1].name}/metrics"
        log.info("serving %s; %s", site.name, banner)
        await stop.wait()
        await drain(app, connections.limits.drain_seconds, hurry)
    finally:
        freezing.cancel()
        if metrics_serving is not None:
            await metrics_serving[0].cleanup()
        await runner.cleanup()
        for port in (admission, metrics):
            for sock in port.sockets if port is not None else ():
                with contextlib.suppress(OSError):
                    sock.close()
