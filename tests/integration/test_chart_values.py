"""The Helm chart's values reach the objects: the webhook's settings (rolling the pods), its
admission and metrics values, client certificates, images, the agent's account, policies,
lease and label values, pull secrets, the CRD's policy, pod labels, the disruption budget and
the NetworkPolicy's peers.
(Split from test_chart.py: helm, rendering and the modes are in chart_fixture.py.)"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import yaml
from cryptography import x509

from tests.integration.chart_fixture import (
    CHART,
    NAMESPACE,
    REPO,
    Obj,
    kinds,
    only,
    template,
    template_error,
)
from webhook import config, settings_load
from webhook.devcluster.install import render as kustomize_render

# ---- values reach the objects --------------------------------------------------------------

def test_settings_reach_the_webhook_and_roll_the_pods(helm: Path, tmp_path: Path) -> None:
    default = template(helm)
    tuned = template(helm, "settings.max_weight=40", "settings.min_bytes=50MiB",
                     "settings.spread_step=7", "replicas=3", "holdout.fraction=0.2")
    config_file = tmp_path / "config.yaml"
    config_file.write_text(only(tuned, "ConfigMap", "layer-locality-config")["data"]["config.yaml"])
    settings = settings_load.load_settings({"config": str(config_file)}, {})
    assert (settings.max_weight, settings.min_bytes, settings.spread_step) == (40, 50 << 20, 7)
    assert (settings.replicas, settings.holdout, settings.holdout_seed) == (3, 0.2,
                                                                           "layer-locality")
    assert only(tuned, "Deployment")["spec"]["replicas"] == 3

    def checksum(objects: list[Obj]) -> str:
        annotations = only(objects, "Deployment")["spec"]["template"]["metadata"]["annotations"]
        return str(annotations["checksum/config"])

    assert checksum(tuned) != checksum(default)
    assert checksum(template(helm)) == checksum(default)


def test_webhook_values(helm: Path) -> None:
    objects = template(helm, "webhook.timeoutSeconds=5", "webhook.optInLabel=example.com/steer",
                       "webhook.excludedNamespaces={kube-system,monitoring}")
    for hook in only(objects, "MutatingWebhookConfiguration")["webhooks"]:
        assert hook["timeoutSeconds"] == 5
        assert hook["failurePolicy"] == "Ignore"
        expressions = {e["key"]: e for e in hook["namespaceSelector"]["matchExpressions"]}
        assert expressions["example.com/steer"] == {"key": "example.com/steer",
                                                    "operator": "In", "values": ["true"]}
        assert expressions["kubernetes.io/metadata.name"]["values"] == [
            "kube-system", "monitoring", NAMESPACE]


def test_images_of_the_webhook_and_the_agent(helm: Path) -> None:
    digest = "sha256:" + "ab" * 32

    def images(*sets: str) -> tuple[str, str]:
        objects = template(helm, "agent.enabled=true", *sets)
        (webhook,) = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
        (agent,) = only(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"]
        return webhook["image"], agent["image"]

    version = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
    assert images() == (f"layer-locality:{version}",) * 2
    assert images("image.repository=registry.example.com/ll", "image.tag=1.2") == (
        "registry.example.com/ll:1.2",) * 2
    assert images("image.repository=r.example.com/ll", f"image.digest={digest}") == (
        f"r.example.com/ll@{digest}",) * 2
    assert images("agent.image.repository=r.example.com/agent", "agent.image.tag=v9") == (
        f"layer-locality:{version}", "r.example.com/agent:v9")
    # A tag of digits must be given as a string (--set-string): as a number YAML would turn
    # 20240101 into 2.0240101e+07.
    assert "tag" in template_error(helm, "image.tag=20240101")


def test_agent_policy_names_the_agents_own_account(helm: Path) -> None:
    objects = template(helm, "agent.enabled=true", "agent.namespace=nodes-agent")
    sa = only(objects, "ServiceAccount", "layer-locality-agent")
    assert sa["metadata"]["namespace"] == "nodes-agent"
    policies = [o for o in objects if o["kind"] == "ValidatingAdmissionPolicy"]
    assert sorted(p["metadata"]["name"] for p in policies) == [
        "layer-locality-agent-own-lease", "layer-locality-agent-own-node",
        "layer-locality-agent-own-node-labels"]
    for policy in policies:
        (condition,) = policy["spec"]["matchConditions"]
        assert ("'system:serviceaccount:nodes-agent:layer-locality-agent'"
                in condition["expression"])
    assert only(objects, "DaemonSet")["spec"]["template"]["spec"]["serviceAccountName"] == (
        "layer-locality-agent")
    # The Leases live in the agent's namespace; the webhook's account reads them there.
    for role in (o for o in objects if o["kind"] in ("Role", "RoleBinding")):
        assert role["metadata"]["namespace"] == "nodes-agent"
    reader = only(objects, "RoleBinding", "layer-locality-lease-reader")
    assert reader["subjects"] == [{"kind": "ServiceAccount", "name": "layer-locality",
                                   "namespace": NAMESPACE}]
    assert "agent.namespace" in template_error(helm, "agent.enabled=true",
                                               f"agent.namespace={NAMESPACE}")
    # Without the policies the agent may not patch Nodes at all, and writes no labels.
    no_policy = template(helm, "agent.enabled=true", "agent.ownNodePolicy=false")
    assert "ValidatingAdmissionPolicy" not in kinds(no_policy)
    assert "ValidatingAdmissionPolicyBinding" not in kinds(no_policy)
    (nodes,) = [r for r in only(no_policy, "ClusterRole", "layer-locality-agent")["rules"]
                if r["resources"] == ["nodes"]]
    assert nodes["verbs"] == ["get"]
    assert agent_env(no_policy)["LAYER_LOCALITY_MAX_LABELS"] == "0"


def agent_env(objects: list[Obj]) -> dict[str, Any]:
    (container,) = only(objects, "DaemonSet")["spec"]["template"]["spec"]["containers"]
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in container["env"]}


def test_agent_lease_and_label_values_reach_the_agent(helm: Path) -> None:
    env = agent_env(template(helm, "agent.enabled=true", "agent.leaseSeconds=60",
                             "agent.labelMinMiB=32", "agent.maxLabels=0"))
    assert (env["LAYER_LOCALITY_LEASE_SECONDS"], env["LAYER_LOCALITY_LABEL_MIN_MIB"],
            env["LAYER_LOCALITY_MAX_LABELS"]) == ("60", "32", "0")
    assert env["POD_NAMESPACE"] == {"fieldRef": {"fieldPath": "metadata.namespace"}}
    for bad, why in (("agent.leaseSeconds=5", "leaseSeconds"),
                     ("agent.leaseSeconds=90000", "leaseSeconds"),
                     ("agent.maxLabels=201", "maxLabels"), ("agent.labelMinMiB=0", "labelMinMiB")):
        assert why in template_error(helm, "agent.enabled=true", bad)


def test_crd_policy(helm: Path) -> None:
    crd = only(template(helm), "CustomResourceDefinition")
    assert crd["metadata"]["annotations"] == {"helm.sh/resource-policy": "keep"}
    crd = only(template(helm, "crds.keep=false"), "CustomResourceDefinition")
    assert "annotations" not in crd["metadata"]
    assert "CustomResourceDefinition" not in kinds(template(helm, "crds.install=false"))


def test_pod_labels_and_annotations_never_replace_the_charts(helm: Path) -> None:
    objects = template(helm, "podLabels.app\\.kubernetes\\.io/component=other",
                       "podLabels.team=storage", "podAnnotations.checksum/config=stale",
                       "podAnnotations.prometheus\\.io/path=/other")
    deployment = only(objects, "Deployment")
    metadata = deployment["spec"]["template"]["metadata"]
    assert metadata["labels"] == {**deployment["spec"]["selector"]["matchLabels"],
                                  "team": "storage"}
    default = only(template(helm), "Deployment")["spec"]["template"]["metadata"]["annotations"]
    assert metadata["annotations"]["checksum/config"] == default["checksum/config"]
    assert metadata["annotations"]["prometheus.io/path"] == "/other"


def test_one_replica_has_no_disruption_budget(helm: Path) -> None:
    assert "PodDisruptionBudget" in kinds(template(helm, "replicas=2"))
    assert "PodDisruptionBudget" not in kinds(template(helm, "replicas=1"))


def test_the_agent_pulls_with_its_own_secrets(helm: Path) -> None:
    objects = template(helm, "agent.enabled=true", "imagePullSecrets[0].name=webhook-pull",
                       "agent.imagePullSecrets[0].name=agent-pull")
    agent = only(objects, "DaemonSet")["spec"]["template"]["spec"]
    webhook = only(objects, "Deployment")["spec"]["template"]["spec"]
    assert agent["imagePullSecrets"] == [{"name": "agent-pull"}]
    assert webhook["imagePullSecrets"] == [{"name": "webhook-pull"}]


def _serve_settings(objects: list[Obj], tmp_path: Path) -> config.Settings:
    """The settings the chart's webhook container starts with (its flags, its config file)."""
    from webhook import cli

    (container,) = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    config_file = tmp_path / "config.yaml"
    config_file.write_text(only(objects, "ConfigMap", "layer-locality-config")["data"]
                           ["config.yaml"])
    args = [re.sub(r"^--config=.*", f"--config={config_file}", a) for a in container["args"]]
    parsed = vars(cli._parser().parse_args(["serve", *args]))
    parsed.pop("run", None)
    return settings_load.load_settings(parsed, {})


def test_metrics_and_client_auth_values_reach_the_webhook(helm: Path, kube_bin: Path,
                                                          tmp_path: Path) -> None:
    default = template(helm)
    settings = _serve_settings(default, tmp_path)
    assert (settings.metrics_address, settings.metrics_auth) == (("0.0.0.0", 8081),
                                                                 "kubernetes")
    assert settings.client_ca is None
    plain = template(helm, "metrics.port=9090", "metrics.authorization=none")
    settings = _serve_settings(plain, tmp_path)
    assert (settings.metrics_address, settings.metrics_auth) == (("0.0.0.0", 9090), "none")
    assert not [o for o in plain if o["metadata"]["name"].endswith("-metrics-auth")]
    policy = only(plain, "NetworkPolicy")["spec"]["ingress"][0]["ports"]
    assert {p["port"] for p in policy} == {8443, 9090}

    from webhook.serving.certs import PEM, new_authority

    ca = tmp_path / "client-ca.crt"
    ca.write_bytes(new_authority("the API server's client CA").cert.public_bytes(PEM))
    on = template(helm, "clientAuth.enabled=true", "clientAuth.names={kube-apiserver,front}",
                  files=[f"clientAuth.caBundle={ca}"])
    settings = _serve_settings(on, tmp_path)
    assert settings.client_names == ("kube-apiserver", "front")
    pod = only(on, "Deployment")["spec"]["template"]["spec"]
    mount = next(m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "client-ca")
    assert settings.client_ca == f"{mount['mountPath']}/ca.crt"
    volume = next(v for v in pod["volumes"] if v["name"] == "client-ca")
    bundle = only(on, "ConfigMap", volume["configMap"]["name"])["data"]["ca.crt"]
    assert x509.load_pem_x509_certificate(bundle.encode()) == x509.load_pem_x509_certificate(
        ca.read_bytes())

    # The kustomize component gives the same flags and mount (its ConfigMap name is hashed).
    copy = tmp_path / "manifests"
    shutil.copytree(REPO / "manifests", copy)
    (copy / "components" / "client-auth" / "client-ca.crt").write_bytes(ca.read_bytes())
    rendered = [d for d in yaml.safe_load_all(kustomize_render(
        kube_bin / "kubectl", copy, ("client-auth",))) if d]
    (container,) = only(rendered, "Deployment")["spec"]["template"]["spec"]["containers"]
    chart_args = pod["containers"][0]["args"]
    assert container["args"] == [a for a in chart_args if a != "--client-names=front"]
    volume = next(v for v in only(rendered, "Deployment")["spec"]["template"]["spec"]["volumes"]
                  if v["name"] == "client-ca")
    bundle = only(rendered, "ConfigMap", volume["configMap"]["name"])["data"]["ca.crt"]
    assert bundle.strip() == ca.read_text().strip()


def test_network_policy_peers_narrow_each_port(helm: Path) -> None:
    default = only(template(helm), "NetworkPolicy")["spec"]["ingress"]
    assert default == [{"ports": [{"protocol": "TCP", "port": 8443},
                                  {"protocol": "TCP", "port": 8081}]}]  # any peer
    narrowed = only(template(
        helm, "networkPolicy.admissionFrom[0].ipBlock.cidr=0.0.0.0/0",
        "networkPolicy.admissionFrom[0].ipBlock.except[0]=198.19.0.0/16",
        "networkPolicy.metricsFrom[0].namespaceSelector.matchLabels.team=monitoring"),
        "NetworkPolicy")["spec"]["ingress"]
    assert narrowed == [
        {"ports": [{"protocol": "TCP", "port": 8443}],
         "from": [{"ipBlock": {"cidr": "0.0.0.0/0", "except": ["198.19.0.0/16"]}}]},
        {"ports": [{"protocol": "TCP", "port": 8081}],
         "from": [{"namespaceSelector": {"matchLabels": {"team": "monitoring"}}}]}]
    only_metrics = only(template(
        helm, "networkPolicy.metricsFrom[0].podSelector.matchLabels.app=prometheus"),
        "NetworkPolicy")["spec"]["ingress"]
    assert only_metrics[0] == {"ports": [{"protocol": "TCP", "port": 8443}]}  # still any peer
