"""The registry throttle (webhook/devcluster/realnodes/throttle.py) as `cluster up
--registry-bandwidth` starts it — `layer-locality cluster throttle`, a process of its own —
but on loopback: two listen addresses standing for two nodes' IPs (127.0.0.2 and 127.0.0.3,
one port, as every node uses :5000) in front of a real HTTP server (aiohttp) on 127.0.0.1.

What is checked: bytes pass unchanged both ways, the Host header included (the registry tells
nodes apart by it); a download takes at least its bytes over the rate (a lower bound only: a
throttle cannot be beaten, so this cannot flake on a slow machine); each address's bytes are
counted apart; a client gone mid-download or an upstream refusing ends the other side too; and
SIGTERM ends the process with one summary line per address. Timings are never bounded above."""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from webhook.devcluster.install import repo_root
from webhook.devcluster.processes import port_free
from webhook.devcluster.realnodes.throttle import default_burst

MiB = 1 << 20
NODE_A, NODE_B = "127.0.0.2", "127.0.0.3"  # two nodes' IPs, on loopback
START_ATTEMPTS = 300  # bounded waits, 0.1 s apart: not timing assertions


def payload(seed: int, size: int) -> bytes:
    return random.Random(seed).randbytes(size)


@dataclass
class Upstream:
    """A real HTTP server standing for the registry: GET /blob/SIZE/SEED streams generated
    bytes, POST /digest answers the sha256 of what it received; each answer echoes the Host it
    was asked at. `ended` counts blob answers that finished, either way."""

    port: int = 0
    ended: list[str] = field(default_factory=list)

    async def blob(self, request: web.Request) -> web.StreamResponse:
        size, seed = int(request.match_info["size"]), int(request.match_info["seed"])
        response = web.StreamResponse(headers={"X-Host": request.host})
        response.content_length = size
        await response.prepare(request)
        data = payload(seed, size)
        try:
            for at in range(0, size, 64 * 1024):
                await response.write(data[at:at + 64 * 1024])
            await response.write_eof()
            self.ended.append("complete")
        except (ConnectionError, asyncio.CancelledError):
            self.ended.append("aborted")
            raise
        return response

    async def digest(self, request: web.Request) -> web.Response:
        body = await request.read()
        return web.Response(text=hashlib.sha256(body).hexdigest(),
                            headers={"X-Host": request.host})


@pytest.fixture
async def upstream() -> AsyncIterator[Upstream]:
    server = Upstream()
    app = web.Application(client_max_size=16 * MiB)
    app.router.add_get("/blob/{size}/{seed}", server.blob)
    app.router.add_post("/digest", server.digest)
    runner = web.AppRunner(app, handle_signals=False)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        server.port = runner.addresses[0][1]
        yield server
    finally:
        await runner.cleanup()


def shared_free_port(hosts: tuple[str, ...]) -> int:
    """A port free on every one of `hosts` (each node listens on :5000 of its own IP)."""
    for _ in range(100):
        with socket.socket() as sock:
            sock.bind((hosts[0], 0))
            port: int = sock.getsockname()[1]
        if all(port_free(port, host) for host in hosts[1:]):
            return port
    raise AssertionError(f"no port free on all of {hosts}")


@dataclass
class Throttle:
    process: subprocess.Popen[bytes]
    port: int
    log: Path
    rate: int

    def terminate(self) -> list[dict[str, Any]]:
        """SIGTERM; the exit code must be 0; the summary lines, by listen address."""
        self.process.send_signal(signal.SIGTERM)
        assert self.process.wait(timeout=30) == 0, self.log.read_text()
        assert "Traceback" not in self.log.read_text(), self.log.read_text()
        return [line for line in map(json.loads, self.log.read_text().splitlines())
                if "listen" in line]


@pytest.fixture
def throttle(tmp_path: Path) -> Iterator[Callable[[int, int], Throttle]]:
    """Start `layer-locality cluster throttle` on NODE_A and NODE_B (rate, upstream port);
    every process started is stopped, by its pid, whatever the test did."""
    started: list[subprocess.Popen[bytes]] = []

    def start(rate: int, upstream_port: int) -> Throttle:
        port = shared_free_port((NODE_A, NODE_B))
        log = tmp_path / f"throttle-{len(started)}.log"
        with open(log, "wb") as out:
            process = subprocess.Popen(
                [sys.executable, "-m", "webhook", "cluster", "throttle",
                 "--listen", f"{NODE_A}:{port}", "--listen", f"{NODE_B}:{port}",
                 "--upstream", f"127.0.0.1:{upstream_port}", "--rate", str(rate)],
                stdout=out, stderr=subprocess.STDOUT, cwd=repo_root())
        started.append(process)
        for _ in range(START_ATTEMPTS):
            if process.poll() is not None:
                pytest.fail(f"the throttle exited: {log.read_text()}")
            # Its first line says every address is bound; probing by connecting would count.
            if log.read_text().startswith('{"listening"'):
                break
            time.sleep(0.1)
        else:
            pytest.fail(f"the throttle never listened: {log.read_text()}")
        return Throttle(process, port, log, rate)

    try:
        yield start
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=30)


@dataclass(frozen=True)
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes
    sent: int  # raw bytes of the request
    received: int  # raw bytes of the answer, headers included


async def http(host: str, port: int, method: str, path: str, body: bytes = b"") -> Reply:
    """One HTTP/1.1 exchange over a connection of its own, counting raw bytes each way."""
    reader, writer = await asyncio.open_connection(host, port)
    request = (f"{method} {path} HTTP/1.1\r\nHost: {host}:{port}\r\n"
               f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode() + body
    try:
        writer.write(request)
        await writer.drain()
        raw = await reader.read()  # to EOF: the server closes (Connection: close)
    finally:
        writer.close()
        await writer.wait_closed()
    head, _, content = raw.partition(b"\r\n\r\n")
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in lines)}
    return Reply(int(status_line.split()[1]), headers, content, len(request), len(raw))


async def test_bytes_pass_unchanged_both_ways_and_the_host_stays_the_nodes(
        upstream: Upstream, throttle: Callable[[int, int], Throttle]) -> None:
    proxy = throttle(64 * MiB, upstream.port)
    blob = await http(NODE_A, proxy.port, "GET", "/blob/3000000/7")
    assert blob.status == 200
    assert blob.body == payload(7, 3_000_000)
    assert blob.headers["x-host"] == f"{NODE_A}:{proxy.port}"
    upload = payload(8, 2 * MiB + 3)
    digest = await http(NODE_B, proxy.port, "POST", "/digest", upload)
    assert digest.status == 200
    assert digest.body.decode() == hashlib.sha256(upload).hexdigest()
    assert digest.headers["x-host"] == f"{NODE_B}:{proxy.port}"
    assert [line["bytes_received"] > 2 * MiB for line in proxy.terminate()] == [False, True]


async def test_a_download_takes_at_least_its_bytes_over_the_rate(
        upstream: Upstream, throttle: Callable[[int, int], Throttle]) -> None:
    rate, size = 2 * MiB, 3 * MiB
    proxy = throttle(rate, upstream.port)
    began = time.monotonic()
    blob = await http(NODE_A, proxy.port, "GET", f"/blob/{size}/1")
    took = time.monotonic() - began
    assert blob.body == payload(1, size)
    # A lower bound only (the bucket starts full: one burst goes at once).
    assert took >= 0.8 * (size - default_burst(rate)) / rate
    assert proxy.terminate()[0]["bytes_sent"] == blob.received


async def test_each_address_has_its_own_bucket_and_its_own_count(
        upstream: Upstream, throttle: Callable[[int, int], Throttle]) -> None:
    rate = 4 * MiB
    proxy = throttle(rate, upstream.port)
    began = time.monotonic()
    # Node A fetches two blobs at once (one bucket shared), node B one, all concurrently.
    a1, a2, b = await asyncio.gather(
        http(NODE_A, proxy.port, "GET", f"/blob/{2 * MiB}/1"),
        http(NODE_A, proxy.port, "GET", f"/blob/{MiB}/2"),
        http(NODE_B, proxy.port, "GET", f"/blob/{MiB // 2}/3"))
    took = time.monotonic() - began
    assert (a1.body, a2.body, b.body) == (payload(1, 2 * MiB), payload(2, MiB),
                                          payload(3, MiB // 2))
    # Node A's two connections drew on one bucket: together at most the rate.
    assert took >= 0.8 * (a1.received + a2.received - default_burst(rate)) / rate
    summary = {line["listen"]: line for line in proxy.terminate()}
    a, other = summary[f"{NODE_A}:{proxy.port}"], summary[f"{NODE_B}:{proxy.port}"]
    # Every byte each client received, headers included, and nothing of the other node's.
    assert a["bytes_sent"] == a1.received + a2.received
    assert other["bytes_sent"] == b.received
    assert a["bytes_received"] == a1.sent + a2.sent
    assert other["bytes_received"] == b.sent
    assert (a["connections"], other["connections"]) == (2, 1)
    assert a["rate"] == other["rate"] == rate
    assert a["upstream"] == f"127.0.0.1:{upstream.port}"


async def test_sigterm_ends_it_with_one_summary_line_per_address(
        upstream: Upstream, throttle: Callable[[int, int], Throttle]) -> None:
    proxy = throttle(MiB, upstream.port)
    # A connection still open at SIGTERM does not keep it running.
    reader, writer = await asyncio.open_connection(NODE_B, proxy.port)
    try:
        summary = await asyncio.to_thread(proxy.terminate)
        assert await reader.read() == b""  # closed by the throttle
    finally:
        writer.close()
    assert [line["listen"] for line in summary] == [f"{NODE_A}:{proxy.port}",
                                                    f"{NODE_B}:{proxy.port}"]
    assert [line["connections"] for line in summary] == [0, 1]
    assert all(line["bytes_sent"] == 0 for line in summary)


async def test_a_client_gone_mid_download_ends_the_upstream_side_too(
        upstream: Upstream, throttle: Callable[[int, int], Throttle]) -> None:
    proxy = throttle(MiB, upstream.port)
    reader, writer = await asyncio.open_connection(NODE_A, proxy.port)
    writer.write(f"GET /blob/{16 * MiB}/4 HTTP/1.1\r\nHost: {NODE_A}:{proxy.port}\r\n"
                 "Connection: close\r\n\r\n".encode())
    await writer.drain()
    await reader.readexactly(256 * 1024)
    writer.transport.abort()  # a reset, mid-download
    for _ in range(START_ATTEMPTS):
        if upstream.ended:
            break
        await asyncio.sleep(0.1)
    assert upstream.ended == ["aborted"]
    # And the throttle serves on.
    again = await http(NODE_A, proxy.port, "GET", "/blob/100000/5")
    assert again.body == payload(5, 100_000)
    assert upstream.ended == ["aborted", "complete"]
    assert proxy.terminate()[0]["connections"] == 2


async def test_an_upstream_that_refuses_closes_the_client(
        throttle: Callable[[int, int], Throttle]) -> None:
    nobody = shared_free_port(("127.0.0.1",))  # nothing listens there
    proxy = throttle(MiB, nobody)
    reader, writer = await asyncio.open_connection(NODE_A, proxy.port)
    try:
        writer.write(b"GET /v2/ HTTP/1.1\r\nHost: x\r\n\r\n")
        try:
            data = await reader.read()
        except ConnectionResetError:  # a reset is as good as an EOF here: nothing came
            data = b""
        assert data == b""
    finally:
        writer.close()
    summary = {line["listen"]: line for line in proxy.terminate()}
    assert summary[f"{NODE_A}:{proxy.port}"]["failed_connections"] == 1
