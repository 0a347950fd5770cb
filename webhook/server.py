"""The HTTPS edge: aiohttp app factory, routes, TLS reload loop. Thin by design: it decodes,
delegates to the Mutator, encodes, and records metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Callable

import orjson
from aiohttp import web

from webhook.admission import ReviewError, build_response, parse_review
from webhook.metrics import CONTENT_TYPE, Metrics
from webhook.mutate import Inventory, Mutator
from webhook.tls import ServingCertificate

log = logging.getLogger(__name__)

MUTATOR: web.AppKey[Mutator] = web.AppKey("mutator", Mutator)
INVENTORY: web.AppKey[Inventory] = web.AppKey("inventory", Inventory)
METRICS: web.AppKey[Metrics] = web.AppKey("metrics", Metrics)
MAX_REQUEST_BYTES: web.AppKey[int] = web.AppKey("max_request_bytes", int)


def create_app(
    mutator: Mutator, inventory: Inventory, metrics: Metrics, max_request_bytes: int = 7 << 20
) -> web.Application:
    # Bodies over the cap are refused with 413 before they are read whole (as
    # controller-runtime's 7 MiB limit); the API server's own objects stay far below it.
    app = web.Application(client_max_size=max_request_bytes)
    app[MUTATOR] = mutator
    app[INVENTORY] = inventory
    app[METRICS] = metrics
    app[MAX_REQUEST_BYTES] = max_request_bytes
    app.router.add_post("/mutate", handle_mutate)
    app.router.add_get("/healthz", handle_healthz)
    app.router.add_get("/readyz", handle_readyz)
    app.router.add_get("/metrics", handle_metrics)
    app.on_cleanup.append(_close_mutator)
    return app


async def _close_mutator(app: web.Application) -> None:
    await app[MUTATOR].close()


def _error(status: int, message: str, metrics: Metrics) -> web.Response:
    metrics.bad_requests.labels(status=str(status)).inc()
    return web.json_response({"error": message}, status=status)


async def handle_mutate(request: web.Request) -> web.Response:
    metrics = request.app[METRICS]
    if request.content_type != "application/json":
        return _error(415, f"content type must be application/json, got {request.content_type}",
                      metrics)
    try:
        body = await request.read()
    except web.HTTPRequestEntityTooLarge:
        limit = request.app[MAX_REQUEST_BYTES]
        return _error(413, f"request body over the {limit}-byte limit", metrics)
    started = time.perf_counter()
    try:
        review = parse_review(body)
    except ReviewError as exc:
        return _error(400, str(exc), metrics)
    try:
        outcome = await request.app[MUTATOR].review(review)
        answer = build_response(review.uid, outcome.patch)
        result: str = outcome.result
        reason: str = outcome.reason
        pod = outcome.pod
        if outcome.budget_misses:
            metrics.budget_misses.inc(outcome.budget_misses)
    except Exception as exc:  # fail open: our trouble never blocks a pod
        log.error("review failed uid=%s error=%s: %s", review.uid, type(exc).__name__, exc)
        answer = build_response(review.uid)
        result, reason, pod = "error", type(exc).__name__, ""
    metrics.reviews.labels(result=result, reason=reason).inc()
    metrics.review_seconds.observe(time.perf_counter() - started)
    if log.isEnabledFor(logging.DEBUG):
        log.debug(
            # pod: namespace/name, or namespace/generateName+uid before the name exists
            "review uid=%s namespace=%s pod=%s dry_run=%s result=%s reason=%s",
            review.uid, review.namespace, pod or review.name, review.dry_run, result, reason,
        )
    return web.Response(body=orjson.dumps(answer), content_type="application/json")


async def handle_healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok\n")


async def handle_readyz(request: web.Request) -> web.Response:
    if request.app[INVENTORY].ready:
        return web.Response(text="ready\n")
    return web.Response(text="inventory not synced\n", status=503)


async def handle_metrics(request: web.Request) -> web.Response:
    metrics = request.app[METRICS]
    try:
        index = request.app[INVENTORY].index
        metrics.inventory_nodes.set(len(index))
        metrics.inventory_layers.set(index.layer_count)
    except Exception as exc:  # the rest of the metrics still matter when the inventory fails
        log.warning("inventory gauges not updated: %s", exc)
    return web.Response(body=metrics.render(), headers={"Content-Type": CONTENT_TYPE})


def tls_reloader(
    certificate: ServingCertificate, metrics: Metrics, interval: float
) -> Callable[[web.Application], AsyncIterator[None]]:
    """A cleanup context that polls the certificate files while the app runs."""

    async def reload_loop() -> None:
        while True:
            await asyncio.sleep(interval)
            try:
                if certificate.reload_if_changed():
                    metrics.tls_reloads.labels(result="ok").inc()
            except Exception as exc:  # keep serving the previous pair; retry next tick
                metrics.tls_reloads.labels(result="error").inc()
                log.warning("serving certificate not reloaded: %s", exc)

    async def context(app: web.Application) -> AsyncIterator[None]:
        task = asyncio.create_task(reload_loop())
        yield
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    return context
