"""Loopback listeners in front of a registry: a proxy that counts requests and can misbehave
(hold manifest GETs, tamper with bodies, give a fixed answer), made by the `proxy_factory`
fixture (registered in conftest.py), and a TCP listener that only counts connections (for
'never contacted' assertions). All traffic stays on 127.0.0.0/8."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from tests.integration.registry_fixture import exchange
from webhook.devcluster.processes import free_port


@dataclass
class Proxy:
    """An HTTP proxy in front of the registry that counts requests and can misbehave."""

    upstream: str
    port: int = 0
    counts: Counter[tuple[str, str]] = field(default_factory=Counter)
    connections: int = 0
    hold: asyncio.Event | None = None  # manifest GETs wait for this event
    held: int = 0
    reached: asyncio.Event = field(default_factory=asyncio.Event)  # a request is being held
    tamper: bool = False  # flip a byte of manifest bodies
    answer: tuple[int, bytes, dict[str, str]] | None = None  # fixed answer instead of upstream
    runner: web.AppRunner | None = None

    @property
    def host(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        self.counts[(request.method, request.path)] += 1
        if self.answer is not None:
            status, body, headers = self.answer
            return web.Response(status=status, body=body, headers=headers)
        if self.hold is not None and "/manifests/" in request.path and request.method == "GET":
            self.held += 1
            self.reached.set()
            await self.hold.wait()
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() in ("accept", "authorization")}
        status, answer_headers, body = await asyncio.to_thread(
            exchange, request.method, self.upstream + request.path_qs, None, headers)
        if self.tamper and "/manifests/" in request.path and body:
            body = body.replace(b'"size": ', b'"size": 1', 1)
        keep = {k: v for k, v in answer_headers.items()
                if k.lower() in ("content-type", "docker-content-digest", "www-authenticate")}
        return web.Response(status=status, body=body if request.method != "HEAD" else None,
                            headers=keep)

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port or free_port())
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]

    async def stop(self) -> None:
        if self.hold is not None:
            self.hold.set()
        if self.runner is not None:
            await self.runner.cleanup()


@pytest.fixture
async def proxy_factory() -> AsyncIterator[Callable[..., Any]]:
    proxies: list[Proxy] = []

    async def make(upstream: str, **options: Any) -> Proxy:
        proxy = Proxy(upstream, **options)
        await proxy.start()
        proxies.append(proxy)
        return proxy

    yield make
    for proxy in proxies:
        await proxy.stop()


class ConnectionCounter:
    """A TCP listener that only counts connections (for 'never contacted' assertions)."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = 0
        self.connections = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> None:
        async def accept(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            self.connections += 1
            writer.close()

        self._server = await asyncio.start_server(accept, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
