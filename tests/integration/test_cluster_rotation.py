"""Certificate rotation the documented way (`layer-locality certs` again into the same
directory) under traffic from the real API server: the CA outlives its leaves, so the caBundle
the API server holds verifies the new certificate, and no admission fails or goes unpatched
while the server swaps certificates."""

from __future__ import annotations

import base64
import json
import ssl
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

import pytest
from cryptography import x509

from tests.integration.cluster_fixture import DECISION, new_namespace, pod_manifest, wait_for
from tests.integration.test_cluster_admission import create_pod
from webhook.devcluster.cluster import LocalCluster

pytestmark = pytest.mark.controlplane


def served_serial(cluster: LocalCluster) -> int:
    pem = ssl.get_server_certificate(("127.0.0.1", cluster.webhook_port))
    return int(x509.load_pem_x509_certificate(pem.encode()).serial_number)


class Creations:
    """Pods created one after another on a thread until stopped (`paused` holds them a
    while); each created pod is kept, and the first error ends the stream."""

    def __init__(self, cluster: LocalCluster, namespace: str, prefix: str) -> None:
        self.cluster, self.namespace, self.prefix = cluster, namespace, prefix
        self.created: list[dict[str, Any]] = []
        self.errors: list[BaseException] = []
        self.done, self.paused = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.done.is_set():
            if self.paused.is_set():
                time.sleep(0.05)
                continue
            try:
                self.created.append(create_pod(self.cluster, self.namespace, pod_manifest(
                    f"{self.prefix}-{uuid.uuid4().hex[:8]}")))
            except BaseException as exc:  # the test reports it
                self.errors.append(exc)
                return

    def more(self, count: int, what: str) -> None:
        """Wait for `count` more pods."""
        start = len(self.created)
        wait_for(lambda: len(self.created) >= start + count, 30, what)

    def pause_past_idle(self) -> None:
        """Connections opened before a certificate swap keep the old one: pause past the
        webhook's idle timeout (2 s here) so that the API server must open new ones."""
        self.paused.set()
        time.sleep(3)
        self.paused.clear()

    def __enter__(self) -> Creations:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.done.set()
        self.thread.join(timeout=30)

    def unpatched(self) -> list[str]:
        return [p["metadata"]["name"] for p in self.created
                if DECISION not in (p["metadata"].get("annotations") or {})]


def test_rotation_fails_no_admission(local_cluster: LocalCluster) -> None:
    namespace = new_namespace(local_cluster, opted_in=True)
    certs = local_cluster.webhook_certs
    before = served_serial(local_cluster)
    bundle_before = certs.ca_cert.read_bytes()
    with Creations(local_cluster, namespace, "rot") as stream:
        stream.more(3, "pods before the rotation")
        # The documented rotation: the same command, into the same directory.
        subprocess.run([sys.executable, "-m", "webhook", "certs", "--service", "layer-locality",
                        "--namespace", "layer-locality", "--out", str(certs.cert.parent),
                        "--extra-san", "127.0.0.1", "--extra-san", "localhost"], check=True)
        wait_for(lambda: served_serial(local_cluster) != before, 30,
                 "the webhook to serve the new certificate")
        stream.pause_past_idle()
        stream.more(3, "pods after the rotation")
    assert not stream.errors, stream.errors
    assert certs.ca_cert.read_bytes() == bundle_before, "the CA bundle must not change"
    # The bundle the API server holds (read back) verifies the certificate now served.
    config = json.loads(local_cluster.kubectl_run(
        ["get", "mutatingwebhookconfiguration", "layer-locality", "-o", "json"]))
    bundle = base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"])
    served = x509.load_pem_x509_certificate(ssl.get_server_certificate(
        ("127.0.0.1", local_cluster.webhook_port)).encode())
    served.verify_directly_issued_by(x509.load_pem_x509_certificates(bundle)[0])
    unpatched = stream.unpatched()
    assert unpatched == [], f"{len(unpatched)} of {len(stream.created)} pods were not patched"
