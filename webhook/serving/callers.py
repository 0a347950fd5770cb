"""Who may call what, at the HTTP layer: the admission port's client-certificate check
(webhook.access.clientcert) as a middleware, and the metrics port's app, whose /metrics
takes a Kubernetes-authorized bearer token (webhook.access.tokens) unless told otherwise.
Probes stay open: a kubelet presents neither."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from aiohttp import web
from aiohttp.typedefs import Middleware

from webhook.access.clientcert import PROBE_PATHS, ClientPolicy, PeerLog, RefusalWindow, describe
from webhook.access.metrics import AccessMetrics
from webhook.access.tokens import STATUS, TokenAuthorizer
from webhook.serving.metrics import Metrics
from webhook.serving.mutate import Inventory
from webhook.serving.server import (
    EDGE,
    INVENTORY,
    METRICS,
    MUTATE_PATH,
    PerRequestDeadline,
    RequestEdge,
    edge_middleware,
    handle_metrics,
)

log = logging.getLogger(__name__)
Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

METRICS_PATH = "/metrics"


def client_certificates(policy: ClientPolicy, access: AccessMetrics, window: RefusalWindow,
                        peers: PeerLog | None = None) -> Middleware:
    """A middleware refusing, on every path but the probes, a caller without a verified
    certificate (401) or with one of another name (403). A certificate of another CA, expired
    or badly chained never gets here: the TLS handshake refused it."""
    peers = peers or PeerLog()

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.path in PROBE_PATHS:
            return await handler(request)
        transport = request.transport
        peercert = transport.get_extra_info("peercert") if transport is not None else None
        verdict = policy.verdict(peercert)
        admission = request.path.startswith(MUTATE_PATH)
        if verdict == "ok":
            if admission:
                window.accepted()
            return await handler(request)
        endpoint = "admission" if admission else "other"
        access.refused.labels(endpoint=endpoint, reason=verdict).inc()
        if admission:
            window.refused(verdict)
        peer = request.remote or "unknown"
        if peers.due(peer):
            log.warning("caller %s refused on %r: %s (allowed names: %s)", peer,
                        request.path[:100], describe(peercert), ", ".join(sorted(policy.names)))
        status = 401 if verdict == "no_certificate" else 403
        text = ("a client certificate is required" if status == 401
                else "the client certificate's name is not allowed")
        return web.json_response({"error": text}, status=status)

    return check


def create_metrics_app(metrics: Metrics, inventory: Inventory,
                       authorizer: TokenAuthorizer | None, access: AccessMetrics,
                       edge: RequestEdge | None = None) -> web.Application:
    """/metrics on a port of its own; with `authorizer`, behind a bearer token."""
    middlewares: list[Middleware] = [edge_middleware]
    if authorizer is not None:
        middlewares.append(_tokens(authorizer, access, PeerLog()))
    app = web.Application(client_max_size=1024, middlewares=middlewares)
    app[METRICS] = metrics
    app[INVENTORY] = inventory
    app[EDGE] = edge or PerRequestDeadline(1.0)
    app.router.add_get(METRICS_PATH, handle_metrics)
    if authorizer is not None:
        app.on_cleanup.append(_close(authorizer))
    return app


def _tokens(authorizer: TokenAuthorizer, access: AccessMetrics,
            peers: PeerLog) -> Middleware:
    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        started = time.monotonic()
        decision = await authorizer.check(request.headers.get("Authorization"), request.path)
        if decision == "ok":
            access.authorized.inc()
            return await handler(request)
        access.refused.labels(endpoint="metrics", reason=decision).inc()
        peer = request.remote or "unknown"
        if peers.due(peer):
            log.warning("metrics caller %s refused: %s (%.0f ms)", peer, decision,
                        1000 * (time.monotonic() - started))
        status = STATUS[decision]
        response = web.json_response({"error": _MESSAGES[decision]}, status=status)
        if status == 401:
            response.headers["WWW-Authenticate"] = 'Bearer realm="layer-locality metrics"'
        return response

    return check


def _close(authorizer: TokenAuthorizer) -> Callable[[web.Application], Awaitable[None]]:
    async def close(app: web.Application) -> None:
        authorizer.close()

    return close


_MESSAGES = {
    "no_token": "a bearer token is required (Authorization: Bearer <token>)",
    "malformed": "the Authorization header is not a bearer token",
    "unauthenticated": "the token was not accepted by the API server (TokenReview)",
    "forbidden": "the token's user may not get /metrics (SubjectAccessReview)",
    "unavailable": "the API server could not review the token; try again",
    "busy": "too many token reviews waiting; try again",
}
