"""The webhook as the real kube-apiserver calls it: opt-in by namespace label, opt-out by pod
label, matchConditions, and `kubectl apply --dry-run=server`, with the MutatingWebhookConfiguration
exactly as shipped (only its clientConfig points at the host). Everything asserted is read back
from the real API server."""

from __future__ import annotations

import json
import ssl
import uuid
from typing import Any

import pytest
import yaml

from tests.helpers import preferred_terms, validate_pod, weight_by_hostname
from tests.integration.cluster_fixture import (
    APP_IMAGE,
    COLD,
    DECISION,
    WARM,
    as_dict,
    new_namespace,
    pod_manifest,
    wait_for,
)
from webhook.core.dryrun import NOT_STEERED_ANNOTATION
from webhook.core.reasons import Reason
from webhook.devcluster.cluster import LocalCluster
from webhook.devcluster.processes import fetch

pytestmark = pytest.mark.controlplane


def create_pod(cluster: LocalCluster, namespace: str, manifest: dict[str, Any]) -> dict[str, Any]:
    from kubernetes import client

    with cluster.api_client() as api:
        core: Any = client.CoreV1Api(api)
        created = core.create_namespaced_pod(namespace, manifest)
        return as_dict(api, created)


def read_pod(cluster: LocalCluster, namespace: str, name: str) -> dict[str, Any]:
    from kubernetes import client

    with cluster.api_client() as api:
        return as_dict(api, client.CoreV1Api(api).read_namespaced_pod(name, namespace))


def metrics_text(cluster: LocalCluster) -> str:
    """The webhook's /metrics, verified against its CA."""
    context = ssl.create_default_context(cafile=str(cluster.webhook_certs.ca_cert))
    body = fetch(f"{cluster.webhook_url}/metrics", context, timeout=5)
    assert body is not None, "the webhook's /metrics did not answer 200"
    return body.decode()


def reviews_total(cluster: LocalCluster) -> float:
    """Sum of layer_locality_reviews_total over its labels, from the webhook's /metrics."""
    text = metrics_text(cluster)
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("layer_locality_reviews_total{"))


def test_versions_are_the_pinned_ones(local_cluster: LocalCluster) -> None:
    from webhook.devcluster.install import repo_root

    go_mod = (repo_root() / "hack" / "kube" / "go.mod").read_text()
    pinned = next(line.split()[-1] for line in go_mod.splitlines()
                  if line.split()[:1] == ["k8s.io/kubernetes"]
                  or line.split()[:2] == ["require", "k8s.io/kubernetes"])
    version = json.loads(local_cluster.kubectl_run(["version", "-o", "json"]))
    assert version["serverVersion"]["gitVersion"] == pinned
    assert version["clientVersion"]["gitVersion"] == pinned


def test_a_plain_pod_binds_to_a_fake_node(local_cluster: LocalCluster) -> None:
    namespace = new_namespace(local_cluster, opted_in=False)
    create_pod(local_cluster, namespace, pod_manifest("plain", image="busybox:1.36", bind=True))
    wait_for(lambda: bool(read_pod(local_cluster, namespace, "plain")["spec"].get("nodeName")),
             60, "the scheduler to bind the pod")
    pod = read_pod(local_cluster, namespace, "plain")
    assert pod["spec"]["nodeName"] in (*WARM, *COLD)
    conditions = {c["type"]: c["status"] for c in pod["status"]["conditions"]}
    assert conditions["PodScheduled"] == "True"


def test_opted_in_namespace_gets_terms_and_the_decision(local_cluster: LocalCluster) -> None:
    namespace = new_namespace(local_cluster, opted_in=True)
    create_pod(local_cluster, namespace, pod_manifest("steered"))
    pod = read_pod(local_cluster, namespace, "steered")
    validate_pod(pod)
    decision = json.loads(pod["metadata"]["annotations"][DECISION])
    assert decision["v"] >= 1
    weights = weight_by_hostname(pod, (*WARM, *COLD))
    # Both python:3.11 nodes hold nearly all of the app's bytes; no cold node holds any.
    assert min(weights[n] for n in WARM) > max(weights[n] for n in COLD), weights


def test_unlabelled_namespace_and_opted_out_pod_are_untouched(
        local_cluster: LocalCluster) -> None:
    before = reviews_total(local_cluster)
    plain_ns = new_namespace(local_cluster, opted_in=False)
    create_pod(local_cluster, plain_ns, pod_manifest("stock"))
    opted_in = new_namespace(local_cluster, opted_in=True)
    create_pod(local_cluster, opted_in,
               pod_manifest("skip", labels={"layer-locality.io/skip": "true"}))
    # spec.nodeName set: the shipped matchCondition `not-already-bound` stops the call.
    bound = pod_manifest("prebound", image="busybox:1.36", bind=True)
    bound["spec"]["nodeName"] = COLD[0]
    create_pod(local_cluster, opted_in, bound)
    for namespace, name in ((plain_ns, "stock"), (opted_in, "skip"), (opted_in, "prebound")):
        pod = read_pod(local_cluster, namespace, name)
        assert DECISION not in (pod["metadata"].get("annotations") or {}), name
        assert preferred_terms(pod) == [], name
    # The API server's selectors and matchConditions kept all three from the webhook...
    assert reviews_total(local_cluster) == before
    # ...while an ordinary pod of the opted-in namespace is reviewed (the counter moves).
    create_pod(local_cluster, opted_in, pod_manifest("reviewed"))
    assert reviews_total(local_cluster) == before + 1


def test_the_webhook_namespace_is_never_steered(local_cluster: LocalCluster) -> None:
    """kube-system and the webhook's own namespace are excluded by the shipped
    namespaceSelector even when labelled."""
    local_cluster.kubectl_run(["label", "--overwrite", "namespace", "kube-system",
                               "layer-locality.io/enabled=true"])
    try:
        manifest = pod_manifest("system-pod")
        out = local_cluster.kubectl_run(["-n", "kube-system", "create", "--dry-run=server",
                                         "-o", "json", "-f", "-"], stdin=json.dumps(manifest))
        assert DECISION not in (json.loads(out)["metadata"].get("annotations") or {})
    finally:
        local_cluster.kubectl_run(["label", "namespace", "kube-system",
                                   "layer-locality.io/enabled-"])


def test_dry_run_shows_the_patch_and_reserves_nothing(local_cluster: LocalCluster) -> None:
    namespace = new_namespace(local_cluster, opted_in=True)
    manifest = {**pod_manifest("dry"), "metadata": {"name": "dry", "namespace": namespace,
                                                    "labels": {"app": "dry"}}}
    out = local_cluster.kubectl_run(["apply", "--dry-run=server", "-o", "yaml", "-f", "-"],
                                    stdin=yaml.safe_dump(manifest))
    shown = yaml.safe_load(out)
    assert DECISION in shown["metadata"]["annotations"]
    dry_terms = preferred_terms(shown)
    assert dry_terms
    validate_pod(shown)
    # Nothing was created.
    listed = json.loads(local_cluster.kubectl_run(["-n", namespace, "get", "pods", "-o", "json"]))
    assert listed["items"] == []
    # The real create that follows gets the same terms: the dry run reserved nothing.
    created = create_pod(local_cluster, namespace, pod_manifest("dry"))
    assert preferred_terms(created) == dry_terms


def test_a_dry_run_left_alone_explains_itself_and_the_create_carries_nothing(
        local_cluster: LocalCluster) -> None:
    """A pod of an image no registry the webhook may ask knows: the dry run through the real
    API server shows why it got no terms; the pod created for real carries nothing."""
    namespace = new_namespace(local_cluster, opted_in=True)
    manifest = pod_manifest("unknown", image="registry.invalid/team/unknown:v1")
    out = local_cluster.kubectl_run(["-n", namespace, "create", "--dry-run=server", "-o",
                                     "json", "-f", "-"], stdin=json.dumps(manifest))
    shown = json.loads(out)
    note = (shown["metadata"].get("annotations") or {}).get(NOT_STEERED_ANNOTATION, "")
    assert note.startswith(f"{Reason.UNRESOLVED.value}: ") and "registry.invalid" in note
    assert preferred_terms(shown) == [] and DECISION not in shown["metadata"]["annotations"]
    created = create_pod(local_cluster, namespace, manifest)
    assert NOT_STEERED_ANNOTATION not in (created["metadata"].get("annotations") or {})


def test_dry_run_of_a_deployment_shows_no_patch(local_cluster: LocalCluster) -> None:
    """A Deployment is not a Pod: its pods are created later by the ReplicaSet controller and
    admitted then, so the dry run of the Deployment itself shows the template unchanged."""
    namespace = new_namespace(local_cluster, opted_in=True)
    deployment = deployment_manifest("dry-deploy", namespace, replicas=2)
    out = local_cluster.kubectl_run(["apply", "--dry-run=server", "-o", "yaml", "-f", "-"],
                                    stdin=yaml.safe_dump(deployment))
    template = yaml.safe_load(out)["spec"]["template"]
    assert "affinity" not in template["spec"]
    assert DECISION not in (template["metadata"].get("annotations") or {})


def deployment_manifest(name: str, namespace: str, replicas: int,
                        image: str = APP_IMAGE, bind: bool = False) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels},
                                  "spec": pod_manifest(name, image, labels, bind)["spec"]}}}


def test_opt_in_applies_to_pods_created_afterwards(local_cluster: LocalCluster) -> None:
    """Labelling a namespace takes effect for the next pod (the server evaluates the
    namespaceSelector per request)."""
    namespace = new_namespace(local_cluster, opted_in=False)
    create_pod(local_cluster, namespace, pod_manifest("before"))
    local_cluster.kubectl_run(["label", "namespace", namespace,
                               "layer-locality.io/enabled=true"])
    wait_for(lambda: DECISION in (create_pod(
        local_cluster, namespace, pod_manifest(f"after-{uuid.uuid4().hex[:8]}"))["metadata"]
        .get("annotations") or {}), 30, "a pod created after the label to be patched")
    assert DECISION not in (read_pod(local_cluster, namespace, "before")["metadata"]
                            .get("annotations") or {})
