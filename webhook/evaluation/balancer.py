"""A TCP balancer standing for a ClusterIP Service in front of several webhook replicas on the
host: each connection the API server opens goes to one replica, picked at random, as
kube-proxy's iptables mode does (TLS passes through untouched). The API server keeps its
connections to a webhook open and reuses them, so a burst's reviews are split between the
replicas by connection, not by request, as in a cluster."""

from __future__ import annotations

import asyncio
import contextlib
import random
from collections.abc import Sequence


class Balancer:
    def __init__(self, backends: Sequence[int], rng: random.Random | None = None) -> None:
        self._backends = list(backends)
        self._rng = rng or random.Random()
        self._server: asyncio.Server | None = None
        self.connections = [0] * len(self._backends)  # per backend

    async def start(self, port: int, host: str = "127.0.0.1") -> None:
        self._server = await asyncio.start_server(self._serve, host, port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            with contextlib.suppress(Exception):
                await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        choice = self._rng.randrange(len(self._backends))
        self.connections[choice] += 1
        try:
            up_reader, up_writer = await asyncio.open_connection("127.0.0.1",
                                                                 self._backends[choice])
        except OSError:
            writer.close()
            return
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer),
                             return_exceptions=True)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    finally:
        writer.close()
