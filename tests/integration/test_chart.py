"""The Helm chart (charts/layer-locality), rendered by the pinned helm (hack/helm/build.sh).

The chart and the kustomize manifests cannot drift: with the defaults (plus the node agent and
monitoring switched on) the chart renders the same objects as manifests/base with both
components, compared field by field after removing only what each tool adds of its own (its
labels, kustomize's name hashes, Helm's checksum annotation and generated certificate). The
checks of test_manifests_*.py on the kustomize output therefore hold for the chart too.

Without helm (no Go toolchain, a failed build) these tests skip with the reason, or fail under
CI.
"""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
import sys
import tomllib
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from kubernetes_validate.utils import SchemaNotFoundError, latest_version

from tests.integration.cluster_fixture import helm_binary, kube_binaries
from webhook import config, options, settings_load
from webhook.devcluster.install import render as kustomize_render

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "layer-locality"
RELEASE = NAMESPACE = "layer-locality"
K8S_VERSION = latest_version()

Obj = dict[str, Any]

# Labels only one of the two tools writes.
TOOL_LABELS = frozenset({"app.kubernetes.io/managed-by", "app.kubernetes.io/part-of",
                         "app.kubernetes.io/instance", "app.kubernetes.io/version",
                         "helm.sh/chart"})
CONFIG_HASH = re.compile(r"(layer-locality-config)-[a-z0-9]{10}\b")


@pytest.fixture(scope="session")
def helm() -> Path:
    return helm_binary()


@pytest.fixture(scope="session")
def kube_bin() -> Path:
    return kube_binaries()


def run_helm(helm: Path, args: Sequence[str],
             check: bool = True) -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(helm), *args], capture_output=True, text=True, check=False)
    if check:
        assert result.returncode == 0, f"helm {' '.join(args)}:\n{result.stderr}"
    return result


def template(helm: Path, *sets: str, files: Sequence[str] = ()) -> list[Obj]:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for value in sets:
        args += ["--set", value]
    for value in files:
        args += ["--set-file", value]
    return [d for d in yaml.safe_load_all(run_helm(helm, args).stdout) if d]


def template_error(helm: Path, *sets: str) -> str:
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for value in sets:
        args += ["--set", value]
    result = run_helm(helm, args, check=False)
    assert result.returncode != 0, f"helm template {' '.join(sets)} was accepted"
    return result.stderr


def only(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [o for o in objects
             if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def kinds(objects: list[Obj]) -> set[str]:
    return {o["kind"] for o in objects}


# ---- lint and schema ---------------------------------------------------------------------

MODES = {
    "defaults": [],
    "cert-manager": ["certificates.mode=cert-manager"],
    "cert-manager-issuer": ["certificates.mode=cert-manager",
                            "certificates.certManager.issuerRef.kind=ClusterIssuer",
                            "certificates.certManager.issuerRef.name=corp-ca"],
    "agent-monitoring": ["agent.enabled=true", "monitoring.serviceMonitor.enabled=true",
                         "monitoring.prometheusRule.enabled=true",
                         "monitoring.dashboard.enabled=true"],
}


@pytest.mark.parametrize("mode", MODES)
def test_helm_lint_is_clean(helm: Path, mode: str) -> None:
    args = ["lint", str(CHART), "--strict", "--namespace", NAMESPACE]
    for value in MODES[mode]:
        args += ["--set", value]
    result = run_helm(helm, args)
    assert "0 chart(s) failed" in result.stdout, result.stdout


def test_schema_is_generated_from_the_webhook_settings() -> None:
    result = subprocess.run([sys.executable, str(REPO / "hack" / "chart_schema.py"), "--check"],
                            capture_output=True, text=True, check=False, cwd=REPO)
    assert result.returncode == 0, result.stderr
    schema = json.loads((CHART / "values.schema.json").read_text())
    settings = schema["properties"]["settings"]["properties"]
    owned = {"listen", "tls_cert", "tls_key", "demo", "nodes", "kubeconfig", "replicas",
             "holdout", "holdout_seed", "registry_auth", "metrics_listen", "metrics_auth",
             "client_ca", "client_names"}
    assert set(settings) == {o.name for o in options.OPTIONS} - owned


def test_chart_version_and_files_follow_the_project() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert (chart["version"], chart["appVersion"]) == (version, version)
    copies = {"crd-nodelayers.yaml": "manifests/base/crd-nodelayers.yaml",
              "dashboard.json": "manifests/components/monitoring/dashboard.json",
              "prometheusrule.yaml": "manifests/components/monitoring/prometheusrule.yaml"}
    for name, source in copies.items():
        assert (CHART / "files" / name).read_bytes() == (REPO / source).read_bytes(), (
            f"charts/layer-locality/files/{name} differs from {source}: copy it again")


@pytest.mark.parametrize(("value", "why"), [
    ("settings.max_wieght=50", "max_wieght"),
    ("settings.log_level=verbose", "log_level"),
    ("settings.min_bytes=lots", "min_bytes"),
    ("settings.listen=0.0.0.0:9000", "listen"),
    ("webhook.failurePolicy=Fail", "failurePolicy"),
    ("webhook.timeoutSeconds=31", "timeoutSeconds"),
    ("webhook.url=https://127.0.0.1:8443/mutate", "url"),
    ("webhook.url=http://127.0.0.1:8443", "url"),
    ("holdout.fraction=1", "fraction"),
    ("certificates.mode=none", "mode"),
    ("replicas=0", "replicas"),
    ("clientAuth.enabled=true", "caBundle"),
    ("metrics.port=8443", "port"),
    ("metrics.authorization=open", "authorization"),
])
def test_schema_refuses_bad_values(helm: Path, value: str, why: str) -> None:
    assert why in template_error(helm, value)


def test_every_mode_renders_objects_the_kubernetes_schema_accepts(helm: Path) -> None:
    seen: set[str] = set()
    for sets in MODES.values():
        for obj in template(helm, *sets):
            seen.add(obj["kind"])
            try:
                kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
            except SchemaNotFoundError:
                # Custom resources: cert-manager's and the Prometheus Operator's kinds.
                assert obj["apiVersion"] in ("cert-manager.io/v1", "monitoring.coreos.com/v1")
            except kubernetes_validate.ValidationError as exc:  # pragma: no cover - on failure
                pytest.fail(f"{obj['kind']}/{obj['metadata']['name']}: {exc.message} "
                            f"at {list(exc.path)}")
    assert {"Deployment", "MutatingWebhookConfiguration", "DaemonSet", "Certificate",
            "ServiceMonitor", "PrometheusRule", "ValidatingAdmissionPolicy"} <= seen


# ---- the chart and the kustomize manifests render the same objects -------------------------

def normalised(obj: Obj) -> Obj:
    """What both tools must agree on: without the labels and annotations one of them adds,
    kustomize's ConfigMap name hash, and the caBundle (Helm's is generated)."""
    out: Obj = json.loads(CONFIG_HASH.sub(r"\1", json.dumps(obj)))
    for meta in _metadata(out):
        labels = {k: v for k, v in (meta.get("labels") or {}).items() if k not in TOOL_LABELS}
        annotations = {k: v for k, v in (meta.get("annotations") or {}).items()
                       if not k.startswith("checksum/") and k != "helm.sh/resource-policy"}
        meta.pop("labels", None)
        meta.pop("annotations", None)
        if labels:
            meta["labels"] = labels
        if annotations:
            meta["annotations"] = annotations
    for hook in out.get("webhooks", []):
        hook["clientConfig"].pop("caBundle", None)
    data = out.get("data") or {}
    if out["kind"] == "ConfigMap":
        for key, text in data.items():
            data[key] = json.loads(text) if key.endswith(".json") else yaml.safe_load(text)
    return out


def _metadata(obj: Obj) -> Iterator[Obj]:
    yield obj.setdefault("metadata", {})
    template = (obj.get("spec") or {}).get("template")
    if isinstance(template, dict) and "metadata" in template:
        yield template["metadata"]


def keyed(objects: list[Obj]) -> dict[tuple[str, str, str], Obj]:
    out = {}
    for obj in objects:
        meta = obj["metadata"]
        key = (obj["kind"], meta.get("namespace", ""), CONFIG_HASH.sub(r"\1", meta["name"]))
        assert key not in out, f"rendered twice: {key}"
        out[key] = normalised(obj)
    return out


def test_chart_renders_what_the_kustomize_manifests_render(helm: Path, kube_bin: Path) -> None:
    chart = keyed(template(helm, *MODES["agent-monitoring"]))
    manifests = keyed([d for d in yaml.safe_load_all(kustomize_render(
        kube_bin / "kubectl", REPO / "manifests", ("node-agent", "monitoring"))) if d])
    # Each tool's own: the release namespace is Helm's (`--create-namespace`, or made by the
    # operator), while the kustomize base creates it; the chart generates the TLS Secrets
    # that the kustomize overlays add.
    only_manifests = {("Namespace", "", NAMESPACE)}
    only_chart = {("Secret", NAMESPACE, "layer-locality-ca"),
                  ("Secret", NAMESPACE, "layer-locality-tls")}
    assert set(manifests) - set(chart) == only_manifests
    assert set(chart) - set(manifests) == only_chart
    for key in sorted(set(chart) & set(manifests)):
        assert chart[key] == manifests[key], f"{key} differs between the chart and manifests/"


def test_cert_manager_mode_renders_the_overlay_objects(helm: Path, kube_bin: Path) -> None:
    rendered = subprocess.run([str(kube_bin / "kubectl"), "kustomize",
                               str(REPO / "manifests" / "overlays" / "cert-manager")],
                              capture_output=True, text=True, check=True).stdout
    overlay = keyed([d for d in yaml.safe_load_all(rendered) if d])
    chart = keyed(template(helm, *MODES["cert-manager"]))
    cert_manager = {k for k in overlay if k[0] in ("Issuer", "Certificate")}
    assert len(cert_manager) == 4
    for key in cert_manager:
        assert chart[key] == overlay[key], key
    hooks_key = ("MutatingWebhookConfiguration", "", RELEASE)
    assert chart[hooks_key] == overlay[hooks_key]  # the inject-ca-from annotation included
    assert not any(k[0] == "Secret" for k in chart)


def test_cert_manager_with_an_issuer_of_the_operators(helm: Path) -> None:
    objects = template(helm, *MODES["cert-manager-issuer"])
    (certificate,) = [o for o in objects if o["kind"] == "Certificate"]
    assert certificate["spec"]["issuerRef"] == {"kind": "ClusterIssuer", "name": "corp-ca"}
    assert "Issuer" not in kinds(objects)


# ---- certificates ---------------------------------------------------------------------------

def test_self_signed_certificate_serves_the_service_and_is_the_bundle(helm: Path) -> None:
    objects = template(helm)
    tls = only(objects, "Secret", "layer-locality-tls")
    ca_secret = only(objects, "Secret", "layer-locality-ca")
    cert = x509.load_pem_x509_certificate(base64.b64decode(tls["data"]["tls.crt"]))
    ca = x509.load_pem_x509_certificate(base64.b64decode(tls["data"]["ca.crt"]))
    assert base64.b64decode(ca_secret["data"]["tls.crt"]) == base64.b64decode(
        tls["data"]["ca.crt"])
    names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(names.get_values_for_type(x509.DNSName)) >= {
        "layer-locality.layer-locality.svc", "layer-locality.layer-locality.svc.cluster.local"}
    cert.verify_directly_issued_by(ca)
    for hook in only(objects, "MutatingWebhookConfiguration")["webhooks"]:
        assert base64.b64decode(hook["clientConfig"]["caBundle"]) == base64.b64decode(
            tls["data"]["ca.crt"])
    # The pods mount the serving Secret only: the CA's key is not in it.
    deployment = only(objects, "Deployment")
    volumes = {v["name"]: v for v in deployment["spec"]["template"]["spec"]["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "layer-locality-tls"
    assert set(tls["data"]) == {"tls.crt", "tls.key", "ca.crt"}


def test_an_operators_secret_needs_its_ca(helm: Path, tmp_path: Path) -> None:
    assert "webhook.caBundle" in template_error(
        helm, "certificates.mode=secret", "certificates.secretName=my-tls")
    ca = tmp_path / "ca.crt"
    ca.write_text(_a_ca_pem(tmp_path))
    objects = template(helm, "certificates.mode=secret", "certificates.secretName=my-tls",
                       files=[f"webhook.caBundle={ca}"])
    assert "Secret" not in kinds(objects)
    volumes = only(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": "my-tls"}} in volumes
    for hook in only(objects, "MutatingWebhookConfiguration")["webhooks"]:
        assert base64.b64decode(hook["clientConfig"]["caBundle"]).decode() == ca.read_text()


def _a_ca_pem(directory: Path) -> str:
    from webhook.serving.certs import generate

    files = generate("layer-locality", "layer-locality", directory / "certs", days=1)
    return files.ca_cert.read_text()


# ---- the webhook outside the cluster (webhook.url) -----------------------------------------

def test_url_mode_points_both_webhooks_at_the_url(helm: Path, tmp_path: Path) -> None:
    assert "webhook.caBundle is required" in template_error(
        helm, "webhook.url=https://127.0.0.1:8443")
    ca = tmp_path / "ca.crt"
    ca.write_text(_a_ca_pem(tmp_path))
    objects = template(helm, "webhook.url=https://127.0.0.1:8443/",
                       files=[f"webhook.caBundle={ca}"])
    hooks = only(objects, "MutatingWebhookConfiguration")["webhooks"]
    assert [h["clientConfig"]["url"] for h in hooks] == [
        "https://127.0.0.1:8443/mutate", "https://127.0.0.1:8443/mutate/holdout-exempt"]
    assert all("service" not in h["clientConfig"] for h in hooks)
    # Nothing in the cluster would serve: no Deployment, Service, certificate or policy.
    assert not kinds(objects) & {"Deployment", "Service", "Secret", "PodDisruptionBudget",
                                 "NetworkPolicy"}
    assert {"ServiceAccount", "ClusterRole", "ConfigMap", "CustomResourceDefinition"} <= kinds(
        objects)


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


def test_a_ca_bundle_with_the_charts_own_ca_is_refused(helm: Path, tmp_path: Path) -> None:
    ca = tmp_path / "ca.crt"
    ca.write_text(_a_ca_pem(tmp_path))
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE,
            "--set-file", f"webhook.caBundle={ca}"]
    result = run_helm(helm, args, check=False)
    assert result.returncode != 0 and "self-signed" in result.stderr


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
