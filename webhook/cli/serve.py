"""`layer-locality serve`: the settings turned into the running server: the admission port
(with its caller check), the metrics port when it has one, the inventory and its watches."""

from __future__ import annotations

import argparse
import logging
import ssl
from collections.abc import Mapping
from pathlib import Path

from webhook.access.clientcert import ClientPolicy, PeerLog, RefusalWindow
from webhook.access.metrics import AccessMetrics
from webhook.access.tokens import TokenAuthorizer
from webhook.cli.startup import cluster_address, configure_logging, kube_api, settings_from
from webhook.config import ConfigError, Settings
from webhook.inventory.kube import ClusterConfigError, api_client
from webhook.memtrim import tune_malloc
from webhook.serving.callers import client_certificates, create_metrics_app
from webhook.serving.connections import Connections, EdgeLimits
from webhook.serving.metrics import Metrics
from webhook.serving.mutate import Mutator
from webhook.serving.server import create_app, tls_reloader
from webhook.serving.serving import CertificateRefused, Port, listen, run
from webhook.serving.tls import ServingCertificate, WithoutClientCa
from webhook.serving.wiring import build_parts, live_lifecycle, registry_lifecycle

log = logging.getLogger("webhook")
# The metrics port serves a scraper or two: a few connections, never the admission port's.
METRICS_CONNECTIONS = 32


def serve_command(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    tune_malloc()  # before any worker thread exists
    settings = settings_from(args, env)
    configure_logging(settings.log_level)
    certificate = serving_certificate(settings)
    metrics = Metrics()
    access = AccessMetrics(metrics.registry)
    limits = EdgeLimits(
        max_connections=settings.max_connections,
        request_read_seconds=settings.request_read_seconds,
        idle_seconds=settings.idle_seconds, handshake_seconds=settings.tls_handshake_seconds,
        drain_seconds=settings.drain_seconds,
    )
    connections = Connections(limits, metrics)
    authorizer = metrics_authorizer(settings, env)  # a bad cluster config stops here
    live_metrics = metrics.live_inventory()
    if settings.holdout_policy.on:
        live_metrics.telemetry.holdout_series()
    parts = build_parts(settings, kube_api(settings, env), live_metrics)
    mutator = Mutator(parts.sources, parts.inventory, settings.policy, settings.budget_ms / 1000,
                      siblings=parts.live.siblings if parts.live is not None else None,
                      memo_entries=settings.memo_entries, holdout=settings.holdout_policy)
    metrics.watch_memo(mutator.memo)
    window = RefusalWindow()
    callers = []
    refused: CertificateRefused | None = None
    if settings.client_ca is not None:
        callers.append(client_certificates(ClientPolicy(frozenset(settings.client_names)),
                                           access, window))
        refused = _handshake_refusals(access, window)
    app = create_app(mutator, parts.inventory, metrics, settings.max_request_bytes, connections,
                     callers=callers, refusals=window,
                     serve_metrics=not settings.metrics_listen)
    app.cleanup_ctx.append(tls_reloader(certificate, metrics, settings.tls_reload_seconds))
    if parts.registry is not None:
        metrics.watch_registry(parts.registry.stats)
        app.cleanup_ctx.append(registry_lifecycle(parts))
    if parts.live is not None:
        app.cleanup_ctx.append(live_lifecycle(parts.live))
    inventory = "live cluster" if parts.live else f"{len(parts.inventory.index)} nodes"
    if parts.live is None and settings.share is None:
        inventory += (f", static: share {settings.effective_share:g} (no pod watch, no spread "
                      "guard; a live install weighs by share 1, --share 1 serves that)")
    if settings.client_ca is not None:
        inventory += f"; callers need a client certificate of {', '.join(settings.client_names)}"
    # Ports in use stop here, before any watch.
    admission = Port(app, listen(*settings.listen_address), connections, certificate, refused)
    metrics_port = None
    address = settings.metrics_address
    if address is not None:
        # The serving pair without the client CA: a scraper's own certificate is not asked
        # for. Its connections are counted apart (a private sink: the exported connection
        # metrics stay the admission port's), and never hold back the watches.
        metrics_tls = WithoutClientCa(certificate)  # reloaded with it
        metrics_connections = Connections(
            EdgeLimits(max_connections=METRICS_CONNECTIONS,
                       request_read_seconds=limits.request_read_seconds,
                       idle_seconds=limits.idle_seconds,
                       handshake_seconds=limits.handshake_seconds, drain_seconds=0.0),
            Metrics(), reviews=False)
        metrics_app = create_metrics_app(metrics, parts.inventory, authorizer, access,
                                         metrics_connections)
        metrics_port = Port(metrics_app, listen(*address), metrics_connections, metrics_tls)
        if authorizer is not None:
            inventory += "; /metrics needs a token allowed to get /metrics"
    run(admission, f"inventory: {inventory}", metrics_port)
    return 0


def serving_certificate(settings: Settings) -> ServingCertificate:
    """The serving pair and the client CA; a missing file is named with its flag (and, for
    the pair, how to make one)."""
    for flag, name in (("--tls-cert", settings.tls_cert), ("--tls-key", settings.tls_key)):
        if not Path(name).is_file():
            raise ConfigError(f"{flag} {name}: no such file; `make certs` (or `layer-locality "
                              "certs --out DIR`) writes a development pair")
    client_ca = Path(settings.client_ca) if settings.client_ca is not None else None
    if client_ca is not None and not client_ca.is_file():
        raise ConfigError(f"--client-ca {client_ca}: no such file (the CA that signed the API "
                          "server's client certificate)")
    try:
        return ServingCertificate(Path(settings.tls_cert), Path(settings.tls_key), client_ca)
    except ssl.SSLError as exc:
        raise ConfigError(f"cannot load the serving certificate or client CA: {exc}") from exc


def metrics_authorizer(settings: Settings, env: Mapping[str, str]) -> TokenAuthorizer | None:
    """TokenReview + SubjectAccessReview through the cluster the webhook runs in (or
    --kubeconfig), when --metrics-auth kubernetes."""
    if settings.metrics_auth != "kubernetes":
        return None
    from webhook.access.kubereviews import KubernetesReviews

    kubeconfig, in_cluster = cluster_address(settings, env)
    if kubeconfig is None and not in_cluster:
        raise ConfigError("--metrics-auth kubernetes needs a cluster to review tokens: run in a "
                          "pod or give --kubeconfig")
    try:
        reviews = KubernetesReviews(api_client(kubeconfig, in_cluster, retries=False))
    except ClusterConfigError as exc:
        raise ConfigError(str(exc)) from exc
    return TokenAuthorizer(reviews)


def _handshake_refusals(access: AccessMetrics, window: RefusalWindow) -> CertificateRefused:
    peers = PeerLog()

    def refused(peer: str, exc: BaseException) -> None:
        access.refused.labels(endpoint="admission", reason="handshake").inc()
        window.refused("handshake")
        if peers.due(peer):
            log.warning("caller %s refused at TLS: its client certificate did not verify "
                        "against --client-ca: %s", peer, getattr(exc, "verify_message", None)
                        or getattr(exc, "reason", None) or exc)

    return refused
