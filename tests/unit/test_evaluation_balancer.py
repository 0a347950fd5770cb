"""The balancer in front of several webhook replicas: TLS on both sides, each review passed on
whole to one replica; by connection (each API-server connection pinned to one replica at
random, as kube-proxy does), all to the first, or review by review in turn; the split counted
per replica and per connection. A replica that refuses is a 502, not a hang. Loopback only."""

from __future__ import annotations

import random
import ssl
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from aiohttp import ClientSession, TCPConnector, web

from webhook.devcluster.processes import free_port
from webhook.evaluation.balancer import Balancer, Split
from webhook.serving.certs import CertificateFiles, generate


@pytest.fixture
def certs(tmp_path: Path) -> CertificateFiles:
    return generate("webhook", "test", tmp_path, extra_sans=("127.0.0.1",))


async def backend(tag: str, certs: CertificateFiles) -> tuple[web.AppRunner, int]:
    async def answer(request: web.Request) -> web.Response:
        return web.json_response({"replica": tag, "body": (await request.read()).decode(),
                                  "path": request.path_qs})

    app = web.Application()
    app.router.add_post("/{path:.*}", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(str(certs.cert), str(certs.key))
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port, ssl_context=context).start()
    return runner, port


@pytest.fixture
async def backends(certs: CertificateFiles) -> AsyncIterator[list[int]]:
    started = [await backend(tag, certs) for tag in ("a", "b")]
    yield [port for _, port in started]
    for runner, _ in started:
        await runner.cleanup()


async def through(balancer: Balancer, certs: CertificateFiles, connections: int,
                  reviews: int) -> list[list[str]]:
    """`reviews` POSTs over each of `connections` kept-alive connections, one after another;
    the replica that answered each, per connection."""
    port = free_port()
    await balancer.start(port)
    context = ssl.create_default_context(cafile=str(certs.ca_cert))
    answered: list[list[str]] = []
    try:
        for c in range(connections):
            async with ClientSession(connector=TCPConnector(ssl=context, limit=1)) as session:
                tags = []
                for n in range(reviews):
                    body = f"review {c}/{n}"
                    async with session.post(f"https://127.0.0.1:{port}/mutate?timeout=10s",
                                            data=body) as response:
                        doc = await response.json()
                    assert doc["body"] == body and doc["path"] == "/mutate?timeout=10s"
                    tags.append(doc["replica"])
                answered.append(tags)
    finally:
        await balancer.close()
    return answered


def balancer(ports: list[int], certs: CertificateFiles, split: Split) -> Balancer:
    return Balancer(ports, certs.ca_cert, certs.cert, certs.key, split, random.Random(3))


async def test_by_connection_every_review_of_a_connection_goes_to_its_replica(
        backends: list[int], certs: CertificateFiles) -> None:
    lb = balancer(backends, certs, "connection")
    answered = await through(lb, certs, connections=12, reviews=3)
    assert all(len(set(tags)) == 1 for tags in answered)  # pinned
    assert {tags[0] for tags in answered} == {"a", "b"}  # at random: both used (seeded)
    assert lb.counts.per_connection == [3] * 12
    pinned_to_a = sum(1 for tags in answered if tags[0] == "a")
    assert lb.counts.connections == [pinned_to_a, 12 - pinned_to_a]
    assert lb.counts.reviews == [3 * pinned_to_a, 3 * (12 - pinned_to_a)]


async def test_one_sends_everything_to_the_first_replica(
        backends: list[int], certs: CertificateFiles) -> None:
    lb = balancer(backends, certs, "one")
    answered = await through(lb, certs, connections=3, reviews=4)
    assert answered == [["a"] * 4] * 3
    assert lb.counts.reviews == [12, 0] and lb.counts.per_connection == [4, 4, 4]


async def test_even_alternates_review_by_review_on_one_connection(
        backends: list[int], certs: CertificateFiles) -> None:
    lb = balancer(backends, certs, "even")
    answered = await through(lb, certs, connections=1, reviews=6)
    assert answered == [["a", "b", "a", "b", "a", "b"]]
    assert lb.counts.reviews == [3, 3] and lb.counts.connections == [0, 0]
    assert lb.counts.per_connection == [6]


async def test_a_refusing_replica_is_a_bad_gateway(certs: CertificateFiles) -> None:
    lb = balancer([free_port()], certs, "connection")  # nothing listens there
    port = free_port()
    await lb.start(port)
    context = ssl.create_default_context(cafile=str(certs.ca_cert))
    try:
        async with ClientSession(connector=TCPConnector(ssl=context)) as session, \
                session.post(f"https://127.0.0.1:{port}/mutate", data="x") as response:
            assert response.status == 502
    finally:
        await lb.close()
    assert lb.counts.reviews == [1]
