"""The Helm chart installed, upgraded and uninstalled by the pinned helm on a real control plane
(the same as `make cluster INSTALL=helm` builds), admission going through the webhook on the
host (`webhook.url`): no kubelet runs, so the chart's own pods would never start.

The host webhook reads the settings the chart rendered (its ConfigMap), so a `helm upgrade`
that changes the weights reaches the webhook as the Deployment's rollout would: the test
restarts it with the new ConfigMap."""

from __future__ import annotations

import base64
import json
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509

from tests.helpers import preferred_terms, validate_pod, weight_by_hostname
from tests.integration.cluster_fixture import (
    COLD,
    DECISION,
    WARM,
    as_dict,
    helm_binary,
    new_namespace,
    pod_manifest,
    start_cluster,
    wait_for,
)
from webhook.devcluster.cluster import LocalCluster
from webhook.devcluster.install import RELEASE, helm_install_argv, repo_root, run_helm

pytestmark = pytest.mark.controlplane

CHART = repo_root() / "charts" / "layer-locality"
INSTANCE = f"app.kubernetes.io/instance={RELEASE}"
CRD = "customresourcedefinition.apiextensions.k8s.io/nodelayers.layer-locality.io"


@pytest.fixture(scope="module")
def helm() -> Path:
    return helm_binary()


@pytest.fixture(scope="module")
def bare_cluster(tmp_path_factory: pytest.TempPathFactory, helm: Path) -> Iterator[LocalCluster]:
    """A fresh control plane with nothing of the project's installed and no webhook running."""
    cluster = start_cluster(tmp_path_factory.mktemp("helm-cluster"), ["--log-level", "info"],
                            install_objects=False)
    try:
        yield cluster
    finally:
        cluster.down()


def helm_run(helm: Path, cluster: LocalCluster, *args: str) -> str:
    return run_helm([str(helm), *args, "--kubeconfig", str(cluster.kubeconfig),
                     "--namespace", RELEASE])


def install(helm: Path, cluster: LocalCluster, *sets: str) -> None:
    argv = helm_install_argv(helm, cluster.kubeconfig, cluster.webhook_url,
                             cluster.webhook_certs.ca_cert)
    for value in sets:
        argv += ["--set", value]
    run_helm(argv)


def start_webhook_with_chart_settings(cluster: LocalCluster) -> None:
    """The settings the chart rendered (ConfigMap layer-locality-config), as its pods read them."""
    config_map = json.loads(cluster.kubectl_run(
        ["-n", RELEASE, "get", "configmap", "layer-locality-config", "-o", "json"]))
    path = cluster.root / "chart-config.yaml"
    path.write_text(config_map["data"]["config.yaml"])
    cluster.start_webhook(["--config", str(path)])


def create_pod(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    from kubernetes import client

    with cluster.api_client() as api:
        core: Any = client.CoreV1Api(api)
        created = core.create_namespaced_pod(namespace, pod_manifest(name))
        return as_dict(api, created)


def advantage(pod: dict[str, Any]) -> int:
    """How much more NodeAffinity score the best node gets than the worst (a baseline term
    that every node matches adds to both)."""
    weights = weight_by_hostname(pod, (*WARM, *COLD)).values()
    return max(weights) - min(weights)


def leftovers(cluster: LocalCluster) -> set[str]:
    """Every object of every listable kind that carries the release's instance label."""
    kinds = cluster.kubectl_run(["api-resources", "--verbs=list", "-o", "name"]).split()
    out = cluster.kubectl_run(["get", ",".join(kinds), "-A", "-l", INSTANCE, "-o", "name",
                               "--ignore-not-found"])
    return set(out.split())


def test_install_upgrade_uninstall_through_the_chart(helm: Path,
                                                    bare_cluster: LocalCluster) -> None:
    cluster = bare_cluster
    install(helm, cluster)
    cluster.refresh_webhook_token()  # the chart made the ServiceAccount and its RBAC
    start_webhook_with_chart_settings(cluster)
    hooks = json.loads(cluster.kubectl_run(
        ["get", "mutatingwebhookconfiguration", RELEASE, "-o", "json"]))["webhooks"]
    assert [h["clientConfig"]["url"] for h in hooks] == [
        f"{cluster.webhook_url}/mutate", f"{cluster.webhook_url}/mutate/holdout-exempt"]

    namespace = new_namespace(cluster, opted_in=True)
    pod = create_pod(cluster, namespace, "installed")
    validate_pod(pod)
    assert DECISION in pod["metadata"]["annotations"]
    weights = weight_by_hostname(pod, (*WARM, *COLD))
    assert min(weights[n] for n in WARM) > max(weights[n] for n in COLD), weights
    # A warm node saves nearly the whole pull: its advantage is near max_weight (100).
    assert advantage(pod) > 40

    # Pods keep being created while the release is upgraded with other weights: every one is
    # patched (the webhook configuration is updated in place, never missing).
    created: list[dict[str, Any]] = []
    errors: list[BaseException] = []
    stop = threading.Event()

    def keep_creating() -> None:
        try:
            while not stop.is_set():
                created.append(create_pod(cluster, namespace, f"during-{uuid.uuid4().hex[:6]}"))
                time.sleep(0.1)
        except BaseException as exc:  # reported below
            errors.append(exc)

    creator = threading.Thread(target=keep_creating)
    creator.start()
    try:
        time.sleep(0.5)
        helm_run(helm, cluster, "upgrade", RELEASE, str(CHART), "--reuse-values",
                 "--set", "settings.max_weight=40")
        time.sleep(0.5)
    finally:
        stop.set()
        creator.join(timeout=30)
    assert not errors, errors
    assert len(created) >= 5
    unpatched = [p["metadata"]["name"] for p in created
                 if DECISION not in (p["metadata"].get("annotations") or {})
                 or not preferred_terms(p)]
    assert unpatched == []
    history = json.loads(helm_run(helm, cluster, "history", RELEASE, "-o", "json"))
    assert [(r["revision"], r["status"]) for r in history] == [(1, "superseded"),
                                                               (2, "deployed")]

    # The new settings reach the webhook as the Deployment's rollout would bring them.
    start_webhook_with_chart_settings(cluster)
    upgraded = create_pod(cluster, namespace, "upgraded")
    assert 0 < advantage(upgraded) <= 40
    hooks_after = json.loads(cluster.kubectl_run(
        ["get", "mutatingwebhookconfiguration", RELEASE, "-o", "json"]))["webhooks"]
    assert [h["clientConfig"] for h in hooks_after] == [h["clientConfig"] for h in hooks]

    # Uninstall: nothing of the release is left but the CRD, which the chart keeps on purpose
    # (crds.keep), and the namespace helm created (helm never deletes it).
    helm_run(helm, cluster, "uninstall", RELEASE, "--wait")
    wait_for(lambda: leftovers(cluster) == {CRD}, 60, "everything but the CRD to go")
    after = create_pod(cluster, namespace, "after-uninstall")
    assert DECISION not in (after["metadata"].get("annotations") or {})
    assert preferred_terms(after) == []

    # With crds.keep=false the CRD goes too.
    install(helm, cluster, "crds.keep=false")
    helm_run(helm, cluster, "uninstall", RELEASE, "--wait")
    wait_for(lambda: leftovers(cluster) == set(), 60, "everything, the CRD included, to go")
    assert json.loads(helm_run(helm, cluster, "list", "-o", "json")) == []


def secret_data(cluster: LocalCluster, name: str) -> dict[str, str]:
    secret = json.loads(cluster.kubectl_run(["-n", RELEASE, "get", "secret", name, "-o", "json"]))
    return {k: base64.b64decode(v).decode() for k, v in secret["data"].items()}


def ca_bundles(cluster: LocalCluster) -> set[str]:
    hooks = json.loads(cluster.kubectl_run(
        ["get", "mutatingwebhookconfiguration", RELEASE, "-o", "json"]))["webhooks"]
    return {base64.b64decode(h["clientConfig"]["caBundle"]).decode() for h in hooks}


def test_self_signed_certificate_is_kept_on_upgrade_and_renewed_near_expiry(
        helm: Path, bare_cluster: LocalCluster) -> None:
    """The in-cluster mode's generated CA and serving certificate, read back by `helm upgrade`
    (lookup) from the real API server. The webhook pods are kept unschedulable (a nodeSelector
    no node matches): no kubelet would run them, and unbound pods go at once on uninstall."""
    cluster = bare_cluster
    unschedulable = "nodeSelector.layer-locality\\.io/test-no-node=none"
    run_helm([str(helm), "install", RELEASE, str(CHART), "--kubeconfig", str(cluster.kubeconfig),
              "--namespace", RELEASE, "--create-namespace", "--set", unschedulable])
    try:
        tls, ca = secret_data(cluster, "layer-locality-tls"), secret_data(cluster,
                                                                          "layer-locality-ca")
        assert ca_bundles(cluster) == {tls["ca.crt"]} == {ca["tls.crt"]}
        certificate = x509.load_pem_x509_certificate(tls["tls.crt"].encode())
        certificate.verify_directly_issued_by(x509.load_pem_x509_certificate(
            ca["tls.crt"].encode()))

        helm_run(helm, cluster, "upgrade", RELEASE, str(CHART), "--reuse-values",
                 "--set", "settings.max_weight=60")
        assert secret_data(cluster, "layer-locality-tls") == tls
        assert secret_data(cluster, "layer-locality-ca") == ca
        assert ca_bundles(cluster) == {tls["ca.crt"]}

        # Less than renewDays left (a year's certificate, renewDays 400): the upgrade signs a
        # new certificate with the same CA (10 years), so the caBundle stays.
        helm_run(helm, cluster, "upgrade", RELEASE, str(CHART), "--reuse-values",
                 "--set", "certificates.selfSigned.renewDays=400")
        renewed = secret_data(cluster, "layer-locality-tls")
        assert renewed["tls.crt"] != tls["tls.crt"] and renewed["tls.key"] != tls["tls.key"]
        assert renewed["ca.crt"] == tls["ca.crt"]
        assert ca_bundles(cluster) == {tls["ca.crt"]}
        x509.load_pem_x509_certificate(renewed["tls.crt"].encode()).verify_directly_issued_by(
            x509.load_pem_x509_certificate(ca["tls.crt"].encode()))
    finally:
        helm_run(helm, cluster, "uninstall", RELEASE, "--wait")
    wait_for(lambda: leftovers(cluster) == {CRD}, 60, "everything but the CRD to go")
    cluster.kubectl_run(["delete", CRD, "--wait"])
