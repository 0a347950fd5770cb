"""The HTTPS edge: aiohttp app factory, routes, TLS reload loop. Thin by design: it decodes,
delegates to the Mutator, encodes, and records metrics. Connection limits live in
webhook.serving.serving; this module sees them through RequestEdge."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, NoReturn, Protocol

import orjson
from aiohttp import web
from aiohttp.typedefs import Middleware
from prometheus_client import Counter

from webhook.access.clientcert import RefusalWindow
from webhook.core.admission import ReviewError, build_response, parse_review
from webhook.logthrottle import ThrottledLog
from webhook.serving.metrics import CONTENT_TYPE, Metrics
from webhook.serving.mutate import Inventory, Mutator
from webhook.serving.tls import ServingCertificate

log = logging.getLogger(__name__)

MUTATOR: web.AppKey[Mutator] = web.AppKey("mutator", Mutator)
INVENTORY: web.AppKey[Inventory] = web.AppKey("inventory", Inventory)
METRICS: web.AppKey[Metrics] = web.AppKey("metrics", Metrics)
MAX_REQUEST_BYTES: web.AppKey[int] = web.AppKey("max_request_bytes", int)
# Admission calls refused for their caller lately (client certificates): /readyz says so.
REFUSALS: web.AppKey[RefusalWindow] = web.AppKey("refusals", RefusalWindow)
# Labelled children of the reviews counter; the label values are a few enums and exception names.
REVIEW_COUNTERS: web.AppKey[dict[tuple[str, str], Counter]] = web.AppKey(
    "review_counters", dict)
# The API server never compresses an AdmissionReview; inflating one is only a way to burn CPU.
ACCEPTED_ENCODINGS = frozenset({"", "identity"})
# Above this size a body is decoded by the stdlib's streaming parser: orjson first builds a
# document of its own (about 12x the body: +84 MB for 7 MiB) and then the Python objects.
# Reviews are a few KB; only a huge pod takes the slower path, where the speed is the same.
LARGE_BODY = 1 << 20
MUTATE_PATH = "/mutate"
# The configuration's second webhook, for namespaces that opted out of the holdout.
EXEMPT_PATH = "/mutate/holdout-exempt"


class RequestEdge(Protocol):
    """What the connection layer offers a request (webhook.serving.serving.Connections)."""

    def begin(self, request: web.BaseRequest) -> float | None:
        """The request reached its handler: its connection is busy until end(). Returns the
        seconds since its first bytes were read (None: not known, a pipelined request)."""

    def received(self, request: web.BaseRequest) -> None:
        """The handler has read the whole body."""

    def end(self, request: web.BaseRequest, reusable: bool) -> None:
        """The handler returned; `reusable`: the connection stays open for another request."""

    def deadline(self, request: web.BaseRequest) -> float:
        """Loop time by which the whole request (head and body) must have been read."""

    def stale(self, request: web.BaseRequest) -> bool:
        """The request's connection was admitted under a client CA since replaced: its
        answer closes it."""


class PerRequestDeadline:
    """The edge when no connection layer counts connections (tests, other runners): the
    deadline runs from the moment the handler starts."""

    def __init__(self, read_seconds: float) -> None:
        self.read_seconds = read_seconds

    def begin(self, request: web.BaseRequest) -> float | None:
        return None

    def received(self, request: web.BaseRequest) -> None:
        pass

    def end(self, request: web.BaseRequest, reusable: bool) -> None:
        pass

    def deadline(self, request: web.BaseRequest) -> float:
        return asyncio.get_running_loop().time() + self.read_seconds

    def stale(self, request: web.BaseRequest) -> bool:
        return False


EDGE: web.AppKey[RequestEdge] = web.AppKey("edge", RequestEdge)


class Drain:
    """Set once the process was asked to stop (SIGTERM) and keeps serving a while before it
    closes connections (serving.run): /readyz answers 503, and every answer says
    `Connection: close`, so that clients holding a keep-alive connection to this replica
    (the API server's webhook client does) open their next one through the Service, to a
    replica that stays. Closing an idle keep-alive connection at once instead races with a
    request sent on it, and the API server does not retry a POST: that review would fail open,
    unpatched."""

    def __init__(self) -> None:
        self.active = False


DRAIN: web.AppKey[Drain] = web.AppKey("drain", Drain)


def create_app(
    mutator: Mutator,
    inventory: Inventory,
    metrics: Metrics,
    max_request_bytes: int = 7 << 20,
    edge: RequestEdge | None = None,
    callers: Sequence[Middleware] = (),
    refusals: RefusalWindow | None = None,
    serve_metrics: bool = True,
) -> web.Application:
    """`callers`: middlewares that check who calls (serving.callers), run after the edge's;
    `serve_metrics=False` when /metrics has a port of its own."""
    # Bodies over the cap are refused with 413 before they are read whole (as
    # controller-runtime's 7 MiB limit); the API server's own objects stay far below it.
    app = web.Application(client_max_size=max_request_bytes,
                          middlewares=[edge_middleware, *callers])
    app[MUTATOR] = mutator
    app[INVENTORY] = inventory
    app[METRICS] = metrics
    app[MAX_REQUEST_BYTES] = max_request_bytes
    app[REVIEW_COUNTERS] = {}
    app[EDGE] = edge or PerRequestDeadline(1.0)
    app[DRAIN] = Drain()
    app[REFUSALS] = refusals or RefusalWindow()
    app.on_response_prepare.append(_close_when_draining)
    app.router.add_post(MUTATE_PATH, handle_mutate)
    app.router.add_post(EXEMPT_PATH, handle_mutate_exempt)
    app.router.add_get("/healthz", handle_healthz)
    app.router.add_get("/readyz", handle_readyz)
    if serve_metrics:
        app.router.add_get("/metrics", handle_metrics)
    app.on_cleanup.append(_close_mutator)
    return app


async def _close_when_draining(request: web.Request, response: web.StreamResponse) -> None:
    if request.app[DRAIN].active:
        # The headers are made before this hook runs: say it as well as do it.
        response.force_close()
        response.headers["Connection"] = "close"


async def _close_mutator(app: web.Application) -> None:
    await app[MUTATOR].close()


@web.middleware
async def edge_middleware(
    request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
) -> web.StreamResponse:
    edge = request.app[EDGE]
    waited = edge.begin(request)
    if waited is not None and request.raw_path.startswith(MUTATE_PATH):
        # What the review waited behind on the loop (watch events, other reviews, a
        # collection) between its first bytes read and its handler starting.
        request.app[METRICS].review_queue_seconds.observe(waited)
    response = None
    try:
        response = await handler(request)
        if edge.stale(request):  # admitted under a client CA since replaced: cut it
            response.force_close()
            response.headers["Connection"] = "close"
        return response
    finally:
        edge.end(request, response is None or response.keep_alive is not False)


_throttled = ThrottledLog(log)


def _error(status: int, message: str, metrics: Metrics, close: bool = False) -> web.Response:
    metrics.bad_requests.labels(status=str(status)).inc()
    response = web.json_response({"error": message}, status=status)
    if close:  # the rest of the body is not worth reading: say so, and drop the connection
        response.force_close()
    return response


async def _read_body(request: web.Request) -> bytes | web.Response:
    """The body, or the answer when it cannot be had: refused before a byte of it is read
    where the headers suffice, else read within the request deadline."""
    metrics = request.app[METRICS]
    limit = request.app[MAX_REQUEST_BYTES]
    encoding = request.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in ACCEPTED_ENCODINGS:
        return _error(415, f"Content-Encoding {encoding!r} is not accepted; send the body "
                      "uncompressed", metrics, close=True)
    # The header as the API server sends it needs no parsing; anything else is parsed.
    if (request.headers.get("Content-Type") != "application/json"
            and request.content_type != "application/json"):
        return _error(415, f"content type must be application/json, got {request.content_type}",
                      metrics, close=True)
    if (request.content_length or 0) > limit:
        return _error(413, f"request body over the {limit}-byte limit", metrics, close=True)
    edge = request.app[EDGE]
    try:
        if request.content.is_eof():  # it all came with the head: nothing to wait for
            body = await request.read()
        else:
            async with asyncio.timeout_at(edge.deadline(request)):
                body = await request.read()
        edge.received(request)
        return body
    except web.HTTPRequestEntityTooLarge:
        return _error(413, f"request body over the {limit}-byte limit", metrics, close=True)
    except TimeoutError:
        metrics.connections_closed.labels(reason="read_timeout").inc()
        _throttled.warning("read_timeout", "request body from %s not received in time",
                           request.remote)
        return _error(408, "request body not received in time", metrics, close=True)
    except (ConnectionError, web.RequestPayloadError) as exc:
        # The connection closed mid-body: the client went away (the API server gave up, a
        # proxy reset) or the server evicted it to make room. Nobody is left to answer.
        metrics.aborted_requests.inc()
        _throttled.warning("aborted", "request body cut short, connection from %s closed: %s",
                           request.remote, exc)
        return web.Response(status=400)


def _loads_large(body: bytes) -> Any:
    """The stdlib's decoder, as strict as orjson: UTF-8 only, no NaN or Infinity."""
    return json.loads(body.decode(), parse_constant=_no_constant)


def _no_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not valid JSON")


def _reviews_counter(app: web.Application, result: str, reason: str) -> Counter:
    """The reviews counter of (result, reason), looked up once: labels() costs a few us."""
    children = app[REVIEW_COUNTERS]
    child = children.get((result, reason))
    if child is None:
        child = children[result, reason] = app[METRICS].reviews.labels(result=result,
                                                                       reason=reason)
    return child


async def handle_mutate(request: web.Request) -> web.Response:
    return await _mutate(request, exempt=False)


async def handle_mutate_exempt(request: web.Request) -> web.Response:
    """The same review for namespaces labelled `layer-locality.io/holdout=exempt` (the
    configuration's second webhook selects them): never held out."""
    return await _mutate(request, exempt=True)


async def _mutate(request: web.Request, exempt: bool) -> web.Response:
    metrics = request.app[METRICS]
    body = await _read_body(request)
    if isinstance(body, web.Response):
        return body
    started = time.perf_counter()
    try:
        review = parse_review(body, orjson.loads if len(body) < LARGE_BODY else _loads_large)
    except ReviewError as exc:
        return _error(400, str(exc), metrics)
    try:
        outcome = await request.app[MUTATOR].review(review, exempt)
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
    _reviews_counter(request.app, result, reason).inc()
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
    if request.app[DRAIN].active:
        return web.Response(text="draining: shutting down\n", status=503)
    if request.app[INVENTORY].ready:
        # Still ready: a replica refusing callers is as good as any other, and pods are
        # created either way (fail open). Said here and counted, for the operator.
        warning = request.app[REFUSALS].warning()
        return web.Response(text="ready\n" + (f"warning: {warning}\n" if warning else ""))
    missing = getattr(request.app[INVENTORY], "not_ready", None)
    why = "; ".join(missing()) if callable(missing) else ""
    return web.Response(text="inventory not synced" + (f": {why}" if why else "") + "\n",
                        status=503)


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
