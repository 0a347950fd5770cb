"""Fail-open through the real API server: with the webhook stopped, and with something on its
port answering slower than the shipped timeoutSeconds, pods are still created (unpatched);
when the webhook is back, pods are patched again.

The slow answer comes from a small TLS server on the webhook's port (the real webhook cannot be
made slow on demand); it serves the webhook's own certificate, so the API server completes the
handshake and then waits for an answer that comes too late."""

from __future__ import annotations

import http.server
import ssl
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import yaml

from tests.helpers import preferred_terms
from tests.integration.cluster_fixture import DECISION, new_namespace, pod_manifest
from tests.integration.test_cluster_admission import create_pod
from webhook.devcluster.cluster import LocalCluster
from webhook.devcluster.install import repo_root

pytestmark = pytest.mark.controlplane
SLOW_SECONDS = 6.0


def shipped_timeout() -> int:
    config = yaml.safe_load((repo_root() / "manifests" / "base" /
                             "mutatingwebhookconfiguration.yaml").read_text())
    timeout: int = config["webhooks"][0]["timeoutSeconds"]
    return timeout


@contextmanager
def slow_webhook(cluster: LocalCluster) -> Iterator[list[float]]:
    """A TLS server on the webhook's port that waits SLOW_SECONDS before answering 500;
    yields the list of request arrival times."""
    arrivals: list[float] = []

    class Slow(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            arrivals.append(time.monotonic())
            self.rfile.read(int(self.headers.get("Content-Length", "0")))
            time.sleep(SLOW_SECONDS)
            self.send_response(500)
            self.end_headers()

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", cluster.webhook_port), Slow)
    server.daemon_threads = True
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(str(cluster.webhook_certs.cert), str(cluster.webhook_certs.key))
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield arrivals
    finally:
        server.shutdown()
        server.server_close()


def timed_create(cluster: LocalCluster, namespace: str, name: str) -> tuple[float, dict[str, Any]]:
    start = time.monotonic()
    pod = create_pod(cluster, namespace, pod_manifest(name))
    return time.monotonic() - start, pod


def test_pods_are_created_while_the_webhook_is_down_or_slow(
        local_cluster: LocalCluster) -> None:
    namespace = new_namespace(local_cluster, opted_in=True)
    timeout = shipped_timeout()
    local_cluster.stop_webhook()
    try:
        down_seconds, pod = timed_create(local_cluster, namespace, "while-down")
        assert DECISION not in (pod["metadata"].get("annotations") or {})
        assert preferred_terms(pod) == []
        print(f"create with the webhook down: {down_seconds:.2f} s")

        with slow_webhook(local_cluster) as arrivals:
            slow_seconds, pod = timed_create(local_cluster, namespace, "while-slow")
        assert arrivals, "the API server never called the slow stand-in"
        assert DECISION not in (pod["metadata"].get("annotations") or {})
        # The API server gave up after its timeout, not after the late answer.
        print(f"create with the webhook slow: {slow_seconds:.2f} s (timeoutSeconds {timeout})")
        assert slow_seconds < SLOW_SECONDS, slow_seconds
    finally:
        local_cluster.start_webhook()

    _, pod = timed_create(local_cluster, namespace, "after")
    assert DECISION in pod["metadata"]["annotations"]
    assert preferred_terms(pod)
