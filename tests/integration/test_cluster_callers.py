"""Only the API server may ask, through the real control plane: kube-apiserver presents its
webhook client certificate (the local control plane's AdmissionConfiguration, as a kubeadm
operator writes it), the webhook requires it (`--client-ca`), and pods are patched; with a name
the webhook does not allow, pods are still created (fail open), unpatched, and the refusal is
counted and shown on /readyz. /metrics on its own port answers only a token the API server
accepts (TokenReview) and allows `get /metrics` (SubjectAccessReview, the shipped
metrics-reader ClusterRole), and a real Prometheus scrapes it with such a token."""

from __future__ import annotations

import http.client
import json
import re
import ssl
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from tests.integration.cluster_fixture import DECISION, new_namespace, pod_manifest
from tests.integration.prometheus_fixture import require_tool, start_prometheus
from tests.integration.test_cluster_admission import create_pod
from webhook.devcluster.cluster import LocalCluster
from webhook.devcluster.install import run_kubectl, token_for
from webhook.devcluster.processes import free_port

pytestmark = pytest.mark.controlplane
READER = "layer-locality-metrics-reader"


class Webhook:
    def __init__(self, cluster: LocalCluster, metrics_port: int) -> None:
        self.cluster = cluster
        self.metrics_port = metrics_port

    def get(self, port: int, path: str, token: str | None = None,
            authorization: str | None = None) -> tuple[int, str]:
        headers = {}
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        if authorization is not None:
            headers["Authorization"] = authorization
        # The CA file as it is now: a test rotates it.
        context = ssl.create_default_context(cafile=str(self.cluster.webhook_certs.ca_cert))
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
        try:
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
            return response.status, response.read().decode()
        finally:
            conn.close()

    def metrics(self, token: str) -> str:
        status, text = self.get(self.metrics_port, "/metrics", token)
        assert status == 200, text
        return text


def start(cluster: LocalCluster, *extra: str, port: int | None = None) -> Webhook:
    port = port or free_port()
    cluster.start_webhook(["--client-ca", str(cluster.plane.pki.ca_cert),
                           "--metrics-listen", f"127.0.0.1:{port}", "--metrics-auth",
                           "kubernetes", *extra])
    return Webhook(cluster, port)


def kubectl(cluster: LocalCluster, *args: str) -> str:
    return run_kubectl(cluster.kubectl, cluster.kubeconfig, list(args))


@pytest.fixture(scope="module")
def scraper(local_cluster: LocalCluster) -> Iterator[str]:
    """A ServiceAccount bound to the shipped metrics-reader ClusterRole: its token."""
    namespace = new_namespace(local_cluster, opted_in=False, prefix="scrape")
    kubectl(local_cluster, "-n", namespace, "create", "serviceaccount", "prometheus")
    binding = f"scrape-{uuid.uuid4().hex[:6]}"
    kubectl(local_cluster, "create", "clusterrolebinding", binding, f"--clusterrole={READER}",
            f"--serviceaccount={namespace}:prometheus")
    try:
        yield token_for(local_cluster.kubectl, local_cluster.kubeconfig, namespace, "prometheus")
    finally:
        kubectl(local_cluster, "delete", "clusterrolebinding", binding, "--wait=false")


@pytest.fixture(scope="module")
def webhook(local_cluster: LocalCluster) -> Iterator[Webhook]:
    try:
        yield start(local_cluster)
    finally:
        local_cluster.start_webhook()  # as the other tests expect it


def resigned_token(cluster: LocalCluster, like: str, shift: int) -> str:
    """The claims of the token `like`, with iat/nbf/exp moved to `shift` seconds from now
    (exp an hour later), signed (ES256) with the cluster's service-account key."""
    import base64
    import json
    import time

    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

    def b64(data: bytes) -> str:
        return base64.urlsafe_b64encode(data).rstrip(b"=").decode()

    header, claims, _ = like.split(".")
    header_json = json.loads(base64.urlsafe_b64decode(header + "=="))
    body = json.loads(base64.urlsafe_b64decode(claims + "=="))
    now = int(time.time())
    body.update(iat=now + shift, nbf=now + shift, exp=now + shift + 3600)
    signing = f"{b64(json.dumps(header_json).encode())}.{b64(json.dumps(body).encode())}"
    key = serialization.load_pem_private_key(cluster.plane.pki.sa_key.read_bytes(), None)
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    r, s = decode_dss_signature(key.sign(signing.encode(), ec.ECDSA(hashes.SHA256())))
    return f"{signing}.{b64(r.to_bytes(32, 'big') + s.to_bytes(32, 'big'))}"


def refusals(metrics: str, endpoint: str, reason: str) -> float:
    match = re.search(rf'layer_locality_callers_refused_total\{{endpoint="{endpoint}",'
                      rf'reason="{reason}"\}} (\S+)', metrics)
    return float(match.group(1)) if match else 0.0


def patched(pod: dict[str, Any]) -> bool:
    return DECISION in (pod["metadata"].get("annotations") or {})


def test_the_api_server_calls_through_mutual_tls(local_cluster: LocalCluster,
                                                 webhook: Webhook, scraper: str) -> None:
    namespace = new_namespace(local_cluster, opted_in=True, prefix="mtls")
    pods = [create_pod(local_cluster, namespace, pod_manifest(f"p{i}")) for i in range(3)]
    assert all(patched(p) for p in pods)
    metrics = webhook.metrics(scraper)
    assert re.search(r'layer_locality_reviews_total\{reason="",result="patched"\} [3-9]',
                     metrics), "the reviews went through"
    assert refusals(metrics, "admission", "no_certificate") == 0
    assert refusals(metrics, "admission", "wrong_name") == 0
    # The probes answer without a certificate; nothing else does.
    assert webhook.get(local_cluster.webhook_port, "/readyz") == (200, "ready\n")
    for path in ("/mutate", "/metrics", "/anything"):  # not even which paths exist
        assert webhook.get(local_cluster.webhook_port, path)[0] == 401


def test_metrics_need_a_token_allowed_to_get_them(local_cluster: LocalCluster,
                                                  webhook: Webhook, scraper: str,
                                                  tmp_path: Path) -> None:
    port = webhook.metrics_port
    assert webhook.get(port, "/metrics")[0] == 401
    assert webhook.get(port, "/metrics", authorization="Basic dXNlcjpwYXNz")[0] == 401
    assert webhook.get(port, "/metrics", token="not-a-token")[0] == 401
    # A real token whose signature was altered.
    assert webhook.get(port, "/metrics", token=scraper[:-4] + "AAAA")[0] == 401
    own = token_for(local_cluster.kubectl, local_cluster.kubeconfig, "layer-locality",
                    "layer-locality")
    # The webhook's own account may review tokens but not read /metrics.
    assert webhook.get(port, "/metrics", token=own)[0] == 403
    # A token the cluster's signing key signed, for the scraper's account, an hour expired
    # (TokenRequest will not issue one shorter than 10 minutes).
    expired = resigned_token(local_cluster, scraper, -7200)
    assert webhook.get(port, "/metrics", token=expired)[0] == 401
    # The same made the same way but current is accepted: expiry is what refused it.
    assert webhook.get(port, "/metrics", token=resigned_token(local_cluster, scraper, -60))[0] \
        == 200
    # A ServiceAccount deleted before its token is first used.
    namespace = new_namespace(local_cluster, opted_in=False, prefix="gone")
    kubectl(local_cluster, "-n", namespace, "create", "serviceaccount", "gone")
    kubectl(local_cluster, "create", "clusterrolebinding", f"{namespace}-reader",
            f"--clusterrole={READER}", f"--serviceaccount={namespace}:gone")
    orphan = token_for(local_cluster.kubectl, local_cluster.kubeconfig, namespace, "gone")
    kubectl(local_cluster, "-n", namespace, "delete", "serviceaccount", "gone")
    assert webhook.get(port, "/metrics", token=orphan)[0] == 401
    kubectl(local_cluster, "delete", "clusterrolebinding", f"{namespace}-reader")
    # Authorized per path: the reader may get /metrics, nothing else.
    assert webhook.get(port, "/mutate", token=scraper)[0] == 403
    # `layer-locality report` reads the port with a token file, and says why not without.
    token_file = tmp_path / "token"
    token_file.write_text(scraper + "\n")
    report = ["report", "--url", f"https://127.0.0.1:{port}/metrics", "--ca",
              str(local_cluster.webhook_certs.ca_cert), "--output", "json"]
    ran = subprocess.run([sys.executable, "-m", "webhook", *report, "--token-file",
                          str(token_file)], capture_output=True, text=True, check=False)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["source"].startswith(f"https://127.0.0.1:{port}/metrics")
    ran = subprocess.run([sys.executable, "-m", "webhook", *report], capture_output=True,
                         text=True, check=False)
    assert ran.returncode == 2 and "HTTP 401" in ran.stderr, ran.stderr
    metrics = webhook.metrics(scraper)
    assert refusals(metrics, "metrics", "no_token") >= 1
    assert refusals(metrics, "metrics", "malformed") >= 1
    assert refusals(metrics, "metrics", "unauthenticated") >= 3
    assert refusals(metrics, "metrics", "forbidden") >= 1


def test_prometheus_scrapes_with_a_token_and_is_refused_without(
        webhook: Webhook, scraper: str, tmp_path: Path) -> None:
    binary = require_tool("prometheus")
    token_file = tmp_path / "token"
    token_file.write_text(scraper)
    target = {"static_configs": [{"targets": [f"127.0.0.1:{webhook.metrics_port}"]}],
              "scheme": "https",
              "tls_config": {"ca_file": str(webhook.cluster.webhook_certs.ca_cert)}}
    prometheus = start_prometheus(binary, tmp_path / "prometheus", {
        "global": {"scrape_interval": "1s", "scrape_timeout": "1s"},
        "scrape_configs": [
            {"job_name": "with-token", **target,
             "authorization": {"credentials_file": str(token_file)}},
            {"job_name": "without", **target}]})
    try:
        prometheus.wait_for('up{job="with-token"} == 1', "the scrape with a token")
        prometheus.wait_for('layer_locality_inventory_nodes{job="with-token"} > 0',
                            "the webhook's series")
        prometheus.wait_for('up{job="without"} == 0', "the refused scrape")
        targets = prometheus_targets(prometheus.url)
        assert "401" in targets["without"]["lastError"]
        assert targets["with-token"]["lastError"] == ""
    finally:
        prometheus.stop()


def prometheus_targets(url: str) -> dict[str, dict[str, Any]]:
    from tests.integration.prometheus_fixture import get_json

    active = get_json(f"{url}/api/v1/targets")["data"]["activeTargets"]
    return {t["labels"]["job"]: t for t in active}


def test_a_name_the_webhook_does_not_allow_fails_open_and_shows(
        local_cluster: LocalCluster, webhook: Webhook, scraper: str) -> None:
    refused = start(local_cluster, "--client-names", "not-the-api-server",
                    port=webhook.metrics_port)
    try:
        namespace = new_namespace(local_cluster, opted_in=True, prefix="wrong")
        pod = create_pod(local_cluster, namespace, pod_manifest("created-anyway"))
        assert pod["metadata"]["name"] == "created-anyway"
        assert not patched(pod)
        metrics = refused.metrics(scraper)
        assert refusals(metrics, "admission", "wrong_name") >= 1
        status, text = refused.get(local_cluster.webhook_port, "/readyz")
        assert status == 200
        assert "warning: admission calls refused" in text and "wrong_name" in text
        log = local_cluster.plane.log("webhook").read_text(errors="replace")
        assert "caller 127.0.0.1 refused on '/mutate': certificate names kube-apiserver" in log
    finally:
        start(local_cluster, port=webhook.metrics_port)  # the module's, for the later tests


def test_a_new_serving_ca_under_mutual_tls_fails_no_admission(
        local_cluster: LocalCluster, webhook: Webhook, scraper: str, tmp_path: Path) -> None:
    """Pods created non-stop while the webhook's serving certificate *and its CA* are replaced
    (`certs --new-ca`), as an in-cluster rollout does it: the caBundle with both CAs first,
    then the new pair; the API server keeps presenting its client certificate throughout."""
    import base64
    import shutil

    from tests.integration.cluster_fixture import wait_for
    from tests.integration.test_cluster_rotation import Creations, served_serial

    namespace = new_namespace(local_cluster, opted_in=True, prefix="rot")
    certs = local_cluster.webhook_certs
    staging = tmp_path / "certs"
    shutil.copytree(certs.cert.parent, staging)
    before = served_serial(local_cluster)

    def patch_bundle(pem: bytes) -> None:
        bundle = base64.b64encode(pem).decode()
        kubectl(local_cluster, "patch", "mutatingwebhookconfiguration", "layer-locality",
                "--type=json", "-p", json.dumps([
                    {"op": "replace", "path": f"/webhooks/{i}/clientConfig/caBundle",
                     "value": bundle} for i in range(2)]))

    def certs_command(out: Path, *extra: str) -> None:
        subprocess.run([sys.executable, "-m", "webhook", "certs", "--service",
                        "layer-locality", "--namespace", "layer-locality", "--out", str(out),
                        "--extra-san", "127.0.0.1", "--extra-san", "localhost", *extra],
                       check=True)

    with Creations(local_cluster, namespace, "r") as stream:
        stream.more(3, "pods before the rotation")
        certs_command(staging, "--new-ca")
        patch_bundle((staging / "ca.crt").read_bytes())
        stream.more(2, "pods with the new bundle")
        for name in ("ca.key", "ca.crt", "tls.key", "tls.crt"):  # key before certificate
            shutil.copy2(staging / name, certs.cert.parent / name)
        wait_for(lambda: served_serial(local_cluster) != before, 30, "the new certificate")
        stream.pause_past_idle()
        stream.more(3, "pods after the rotation")
    assert not stream.errors, stream.errors
    unpatched = stream.unpatched()
    assert unpatched == [], f"{len(unpatched)} of {len(stream.created)} pods were not patched"
    metrics = webhook.metrics(scraper)
    assert refusals(metrics, "admission", "handshake") == 0
    print(f"{len(stream.created)} pods created across the rotation, every one patched")
    # The next plain rotation drops the old CA from the bundle (as after a rollout): leave the
    # cluster as the other modules expect it, one CA in ca.crt and in the caBundle.
    certs_command(certs.cert.parent)
    assert len(x509.load_pem_x509_certificates(certs.ca_cert.read_bytes())) == 1
    patch_bundle(certs.ca_cert.read_bytes())
