"""The balancer in front of several webhook replicas: each connection goes whole to one
backend (bytes both ways, in order), backends are picked at random per connection, and a
backend that refuses closes the client's connection. Loopback only."""

from __future__ import annotations

import asyncio
import random

from webhook.devcluster.processes import free_port
from webhook.evaluation.balancer import Balancer


async def echo_backend(tag: bytes, seen: list[bytes]) -> tuple[asyncio.Server, int]:
    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(1024):
            seen.append(data)
            writer.write(tag + data)
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


async def test_each_connection_goes_whole_to_one_backend_picked_at_random() -> None:
    seen_a: list[bytes] = []
    seen_b: list[bytes] = []
    server_a, port_a = await echo_backend(b"a:", seen_a)
    server_b, port_b = await echo_backend(b"b:", seen_b)
    balancer = Balancer([port_a, port_b], random.Random(7))
    port = free_port()
    await balancer.start(port)
    try:
        answers = []
        for n in range(40):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            replies = []
            for part in (b"one", b"two"):
                writer.write(part + str(n).encode())
                await writer.drain()
                replies.append(await reader.read(1024))
            writer.close()
            answers.append(replies)
        # Both requests of one connection reached the same backend, in order.
        for n, (first, second) in enumerate(answers):
            assert first[:2] == second[:2]
            assert first[2:] == b"one%d" % n and second[2:] == b"two%d" % n
        assert sum(balancer.connections) == 40
        assert min(balancer.connections) >= 10  # random, both used (seeded: 7)
        assert len(seen_a) + len(seen_b) == 80
    finally:
        await balancer.close()
        server_a.close()
        server_b.close()


async def test_a_refusing_backend_closes_the_client_connection() -> None:
    dead = free_port()  # nothing listens there
    balancer = Balancer([dead])
    port = free_port()
    await balancer.start(port)
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        assert await asyncio.wait_for(reader.read(10), 5) == b""
        writer.close()
        assert balancer.connections == [1]
    finally:
        await balancer.close()
