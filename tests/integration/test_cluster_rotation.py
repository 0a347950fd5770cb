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


def test_rotation_fails_no_admission(local_cluster: LocalCluster) -> None:
    namespace = new_namespace(local_cluster, opted_in=True)
    certs = local_cluster.webhook_certs
    before = served_serial(local_cluster)
    bundle_before = certs.ca_cert.read_bytes()
    created: list[dict[str, Any]] = []
    errors: list[BaseException] = []
    done = threading.Event()
    paused = threading.Event()

    def traffic() -> None:
        while not done.is_set():
            if paused.is_set():
                time.sleep(0.05)
                continue
            try:
                created.append(create_pod(local_cluster, namespace,
                                          pod_manifest(f"rot-{uuid.uuid4().hex[:8]}")))
            except BaseException as exc:  # the assertion below reports it
                errors.append(exc)
                return

    thread = threading.Thread(target=traffic, daemon=True)
    thread.start()
    try:
        wait_for(lambda: len(created) >= 3, 30, "pods before the rotation")
        # The documented rotation: the same command, into the same directory.
        subprocess.run([sys.executable, "-m", "webhook", "certs", "--service", "layer-locality",
                        "--namespace", "layer-locality", "--out", str(certs.cert.parent),
                        "--extra-san", "127.0.0.1", "--extra-san", "localhost"], check=True)
        wait_for(lambda: served_serial(local_cluster) != before, 30,
                 "the webhook to serve the new certificate")
        # Connections opened before the swap keep the old certificate: pause past the
        # webhook's idle timeout (2 s here) so that the API server must open new ones.
        paused.set()
        time.sleep(3)
        paused.clear()
        count = len(created)
        wait_for(lambda: len(created) >= count + 3, 30, "pods after the rotation")
    finally:
        done.set()
        thread.join(timeout=30)
    assert not errors, errors
    assert certs.ca_cert.read_bytes() == bundle_before, "the CA bundle must not change"
    # The bundle the API server holds (read back) verifies the certificate now served.
    config = json.loads(local_cluster.kubectl_run(
        ["get", "mutatingwebhookconfiguration", "layer-locality", "-o", "json"]))
    bundle = base64.b64decode(config["webhooks"][0]["clientConfig"]["caBundle"])
    served = x509.load_pem_x509_certificate(ssl.get_server_certificate(
        ("127.0.0.1", local_cluster.webhook_port)).encode())
    served.verify_directly_issued_by(x509.load_pem_x509_certificates(bundle)[0])
    unpatched = [p["metadata"]["name"] for p in created
                 if DECISION not in (p["metadata"].get("annotations") or {})]
    assert unpatched == [], f"{len(unpatched)} of {len(created)} pods were not patched"
