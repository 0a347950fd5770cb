"""The agent's small HTTP endpoint (--listen): /healthz (alive), /readyz (200 once the first
publish succeeded), /metrics (Prometheus text)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from .loop import Agent


def status_app(agent: Agent) -> web.Application:
    async def healthz(_: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def readyz(_: web.Request) -> web.Response:
        if agent.ready.is_set():
            return web.Response(text="ok\n")
        return web.Response(status=503, text="not published yet\n")

    async def metrics(_: web.Request) -> web.Response:
        return web.Response(body=generate_latest(agent.metrics.registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    app.router.add_get("/metrics", metrics)
    return app


@asynccontextmanager
async def serving(agent: Agent, host: str, port: int) -> AsyncIterator[None]:
    runner = web.AppRunner(status_app(agent), access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
        yield
    finally:
        await asyncio.shield(runner.cleanup())
