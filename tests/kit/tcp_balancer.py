"""`python -m tests.kit.tcp_balancer --listen PORT --backend PORT [--backend PORT ...]`

A TCP (layer 4) balancer on 127.0.0.1 standing for a Service in front of the webhook's
replicas, as kube-proxy makes one: each accepted connection goes to one backend picked at
random, and its bytes pass through untouched (TLS ends at the replica, not here). The
evaluation's balancer (webhook/evaluation/balancer.py) terminates TLS and forwards each review,
which adds a handshake, a parse and a second TLS write per review: right for counting how
reviews split, wrong for latency figures. On SIGTERM it prints, as one JSON line, the
connections each backend received, and exits."""

from __future__ import annotations

import argparse
import asyncio
import random
import signal
import sys

import orjson


class _Pipe(asyncio.Protocol):
    """One direction's sink: writes what the other side reads; back-pressure both ways."""

    def __init__(self) -> None:
        self.peer: asyncio.Transport | None = None
        self.transport: asyncio.Transport | None = None
        self.pending = bytearray()
        self.half_closed = False  # EOF read before the upstream connection was made

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if self.peer is not None:
            self.peer.write(data)
        else:  # the upstream connection is still being made
            self.pending += data

    def eof_received(self) -> bool | None:
        if self.peer is None:
            self.half_closed = True  # passed on once the upstream connection is made
        elif self.peer.can_write_eof():
            self.peer.write_eof()
        return True  # keep our side open for the answer

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None:
            self.peer.close()

    def pause_writing(self) -> None:
        if self.peer is not None:
            self.peer.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None:
            self.peer.resume_reading()


class _Client(_Pipe):
    def __init__(self, backends: list[int], counts: list[int]) -> None:
        super().__init__()
        self.backends = backends
        self.counts = counts

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        pick = random.randrange(len(self.backends))
        self.counts[pick] += 1
        asyncio.get_running_loop().create_task(self._connect(self.backends[pick]))

    async def _connect(self, port: int) -> None:
        assert self.transport is not None
        loop = asyncio.get_running_loop()
        try:
            upstream, protocol = await loop.create_connection(_Pipe, "127.0.0.1", port)
        except OSError:
            self.transport.close()
            return
        protocol.peer = self.transport
        self.peer = upstream
        if self.pending:
            upstream.write(bytes(self.pending))
            self.pending.clear()
        if self.half_closed and upstream.can_write_eof():
            upstream.write_eof()
        if self.transport.is_closing():
            upstream.close()


async def serve(port: int, backends: list[int]) -> list[int]:
    counts = [0] * len(backends)
    loop = asyncio.get_running_loop()
    server = await loop.create_server(lambda: _Client(backends, counts), "127.0.0.1", port,
                                      backlog=512)
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    loop.add_signal_handler(signal.SIGINT, stop.set)
    print("listening", flush=True)
    try:
        await stop.wait()
    finally:
        loop.remove_signal_handler(signal.SIGTERM)
        loop.remove_signal_handler(signal.SIGINT)
        server.close()
    return counts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.kit.tcp_balancer", description=__doc__)
    parser.add_argument("--listen", type=int, required=True, help="port on 127.0.0.1")
    parser.add_argument("--backend", type=int, action="append", required=True,
                        help="a replica's port on 127.0.0.1 (repeatable)")
    args = parser.parse_args(argv)
    counts = asyncio.run(serve(args.listen, args.backend))
    sys.stdout.write(orjson.dumps({"connections": counts}).decode() + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
