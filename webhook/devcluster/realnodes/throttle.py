"""A per-node bandwidth limit in front of the cluster's registry (`cluster up --kubelets N
--registry-bandwidth SIZE`).

Every node's containerd pulls from the registry at its own IP (network.registry_endpoint), so
a TCP proxy listening on each node IP, port 5000, sees each node's pulls apart from the others'.
It forwards every connection to the registry at 198.18.0.1:5000 with the bytes untouched (the
Host the registry logs stays the node's IP: registry.blob_fetches still tells nodes apart), and
limits what flows back — what the node downloads — by one token bucket per listen address,
shared by all of that node's connections: a node pulls at most RATE bytes per second, however
many layers it fetches at once, as if it sat behind a link of that speed. Requests (client to
registry) are not limited.

On SIGTERM it writes one JSON line per listen address (bytes, connections) to stdout, its log:
a cross-check of the registry's own access log.

Started by bringup as `layer-locality cluster throttle --listen IP:PORT ... --upstream IP:PORT
--rate BYTES_PER_S`; every address must pass network.in_test_network (loopback or
198.18.0.0/15), so it never sends traffic anywhere else. asyncio of the standard library only."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import signal
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

from webhook.devcluster.realnodes.network import in_test_network

# Chunks small against the burst: each write waits for its own tokens, so the rate holds at a
# grain of a few milliseconds rather than in bursts of whatever one read returned.
CHUNK = 16 * 1024
MAX_BURST = 64 * 1024
MIN_BURST = CHUNK
REGISTRY_BANDWIDTH = "registry_bandwidth"  # the plane's extra: the rate, bytes/s per node
THROTTLE = "registry-throttle"  # its process's name in the plane


def default_burst(rate: float) -> int:
    """A twentieth of a second's worth, within CHUNK..64 KiB: small enough that a download's
    time is set by the rate, not by what the bucket lets through at once."""
    return int(min(MAX_BURST, max(MIN_BURST, rate / 20)))


class TokenBucket:
    """A token bucket that lends: `reserve` always takes the bytes, possibly into debt, and
    says how long to wait before sending them (until the debt is repaid). Time is passed in,
    so it is a pure function of its inputs; one bucket is shared by every connection of one
    listen address (asyncio runs one reservation at a time, in arrival order)."""

    __slots__ = ("_last", "_tokens", "burst", "rate")

    def __init__(self, rate: float, burst: float) -> None:
        if not rate > 0:
            raise ValueError(f"a rate must be positive, got {rate!r} bytes/s")
        if not burst > 0:
            raise ValueError(f"a burst must be positive, got {burst!r} bytes")
        self.rate = float(rate)
        self.burst = float(burst)
        self._tokens = float(burst)
        self._last: float | None = None

    def reserve(self, now: float, size: int) -> float:
        """Take `size` bytes at time `now` (seconds, non-decreasing); the delay in seconds
        before they may be sent."""
        if size < 0:
            raise ValueError(f"a byte count cannot be negative: {size}")
        if self._last is not None and now > self._last:
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.rate)
        if self._last is None or now > self._last:
            self._last = now
        self._tokens -= size
        return max(0.0, -self._tokens / self.rate)


@dataclass(frozen=True, slots=True)
class Address:
    host: str
    port: int

    def __str__(self) -> str:
        return f"{self.host}:{self.port}"


def parse_address(text: str) -> Address:
    """`IP:PORT` with an IPv4 address on the test network (loopback or 198.18.0.0/15), else
    ValueError: the guard that keeps the proxy from listening on, or dialling, anything else."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"expected IP:PORT, got {text!r}")
    if not in_test_network(host):
        raise ValueError(f"{host!r} is outside the test network (127.0.0.0/8, 198.18.0.0/15): "
                         "refusing it")
    return Address(host, int(port))


@dataclass(frozen=True, slots=True)
class Settings:
    listen: tuple[Address, ...]
    upstream: Address
    rate: float  # bytes per second, per listen address
    burst: int


def settings(listen: Sequence[str], upstream: str, rate: float,
             burst: int | None = None) -> Settings:
    """Checked settings; ValueError names what is wrong."""
    if not listen:
        raise ValueError("name at least one --listen address")
    addresses = tuple(parse_address(a) for a in listen)
    if len(set(addresses)) != len(addresses):
        raise ValueError("a --listen address is named twice")
    target = parse_address(upstream)
    if target in addresses:
        raise ValueError(f"the upstream {target} is also a listen address: it would loop")
    if not rate > 0:
        raise ValueError(f"--rate must be positive, got {rate!r}")
    chosen = default_burst(rate) if burst is None else burst
    if chosen <= 0:
        raise ValueError(f"--burst must be positive, got {chosen}")
    return Settings(addresses, target, float(rate), chosen)


@dataclass
class Route:
    """One listen address: its bucket and what went through it."""

    listen: Address
    bucket: TokenBucket
    sent: int = 0  # upstream -> client: what the node downloaded
    received: int = 0  # client -> upstream
    connections: int = 0
    failed: int = 0  # connections the upstream refused

    def summary(self, upstream: Address, seconds: float) -> dict[str, object]:
        return {"listen": str(self.listen), "upstream": str(upstream),
                "rate": self.bucket.rate, "burst": int(self.bucket.burst), "bytes_sent": self.sent,
                "bytes_received": self.received, "connections": self.connections,
                "failed_connections": self.failed, "seconds": round(seconds, 3)}


class Proxy:
    """The listeners and their routes; `serve` runs until `stop` is called."""

    def __init__(self, config: Settings) -> None:
        self.config = config
        self.routes = {a: Route(a, TokenBucket(config.rate, config.burst))
                       for a in config.listen}
        self._servers: list[asyncio.Server] = []
        self._connections: set[asyncio.Task[None]] = set()
        self._stopped = asyncio.Event()
        self._started = time.monotonic()

    async def start(self) -> None:
        for address, route in self.routes.items():
            server = await asyncio.start_server(
                functools.partial(self._accept, route), address.host, address.port,
                reuse_address=True, limit=CHUNK)
            self._servers.append(server)

    def stop(self) -> None:
        self._stopped.set()

    async def serve(self) -> None:
        await self._stopped.wait()
        for server in self._servers:
            server.close()
        for task in list(self._connections):
            task.cancel()
        await asyncio.gather(*self._connections, return_exceptions=True)
        for server in self._servers:
            await server.wait_closed()

    def summaries(self) -> list[dict[str, object]]:
        seconds = time.monotonic() - self._started
        return [route.summary(self.config.upstream, seconds) for route in self.routes.values()]

    async def _accept(self, route: Route, reader: asyncio.StreamReader,
                      writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._connections.add(task)
        try:
            await self._forward(route, reader, writer)
        except asyncio.CancelledError:
            pass  # the proxy stopping (serve): the connection is reset, its end is not an error
        finally:
            self._connections.discard(task)

    async def _forward(self, route: Route, client_reader: asyncio.StreamReader,
                       client_writer: asyncio.StreamWriter) -> None:
        route.connections += 1
        upstream = self.config.upstream
        try:
            up_reader, up_writer = await asyncio.open_connection(upstream.host, upstream.port,
                                                                 limit=CHUNK)
        except OSError:
            route.failed += 1
            client_writer.transport.abort()
            return
        requests = asyncio.ensure_future(self._pipe(client_reader, up_writer, route, None))
        replies = asyncio.ensure_future(self._pipe(up_reader, client_writer, route, route.bucket))
        clean = False
        try:
            # Each direction ends at its EOF, passed on as a half-close; an error in either
            # (a reset, a broken pipe) ends both.
            done, _ = await asyncio.wait((requests, replies),
                                         return_when=asyncio.FIRST_EXCEPTION)
            clean = all(not t.cancelled() and t.exception() is None for t in done) and \
                len(done) == 2
        finally:
            for task in (requests, replies):
                task.cancel()
            await asyncio.gather(requests, replies, return_exceptions=True)
            # Cancelled (the proxy stopping) or failed: reset both sides, nothing half-sent
            # passes for a complete answer.
            for writer in (client_writer, up_writer):
                if clean:
                    writer.close()
                else:
                    writer.transport.abort()
        for writer in (client_writer, up_writer):
            with contextlib.suppress(OSError):
                await writer.wait_closed()

    @staticmethod
    async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, route: Route,
                    bucket: TokenBucket | None) -> None:
        loop = asyncio.get_running_loop()
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            if bucket is not None:
                delay = bucket.reserve(loop.time(), len(data))
                if delay > 0:
                    await asyncio.sleep(delay)
            writer.write(data)
            await writer.drain()  # at most one chunk beyond the transport's buffer
            if bucket is not None:
                route.sent += len(data)
            else:
                route.received += len(data)
        if writer.can_write_eof():
            writer.write_eof()


async def run(config: Settings, out: TextIO = sys.stdout) -> None:
    """Serve until SIGTERM or SIGINT, then write the summary lines to `out`."""
    proxy = Proxy(config)
    await proxy.start()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, proxy.stop)
    print(json.dumps({"listening": [str(a) for a in config.listen],
                      "upstream": str(config.upstream), "rate": config.rate,
                      "burst": config.burst}), file=out, flush=True)
    try:
        await proxy.serve()
    finally:
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.remove_signal_handler(signum)
        for line in proxy.summaries():
            print(json.dumps(line), file=out, flush=True)


def main(listen: Sequence[str], upstream: str, rate: float, burst: int | None = None) -> int:
    try:
        config = settings(listen, upstream, rate, burst)
    except ValueError as exc:
        print(f"layer-locality cluster throttle: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(run(config))
    except OSError as exc:  # an address not on this machine, or taken
        print(f"layer-locality cluster throttle: {exc}", file=sys.stderr)
        return 1
    return 0
