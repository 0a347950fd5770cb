"""The project's own manifests on the local cluster, and the webhook as a host process.

The manifests are rendered by kustomize (`kubectl kustomize`, the pinned kubectl) from
`manifests/base` plus `manifests/components/node-agent`, exactly as an install renders them,
then two things change because no kubelet runs:
- objects whose pods would need a kubelet (the webhook's Deployment, the agent's DaemonSet) are
  left out: with fake nodes the scheduler would bind their pods and they would never start;
- each webhook of the MutatingWebhookConfiguration gets `url: https://127.0.0.1:PORT<path>`
  (its service path: /mutate, /mutate/holdout-exempt) plus the caBundle of the certificate
  the host webhook serves (only clientConfig changes: selectors, matchConditions,
  failurePolicy and timeoutSeconds stay as shipped).

With `--install helm` the chart (charts/layer-locality) is installed instead, by the pinned
helm, with `webhook.url` and `webhook.caBundle` set: the chart then leaves the Deployment, its
Service and certificate out itself. `helm_install_argv` is the command, printed for the user.
"""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from webhook.devcluster.processes import ClusterError, child_env

LEFT_OUT_KINDS = frozenset({"Deployment", "DaemonSet"})
WEBHOOK_CONFIGURATION = "MutatingWebhookConfiguration"


def repo_root() -> Path:
    return Path(__file__).resolve().parent.parent.parent


def render(kubectl: Path, manifests: Path, components: Sequence[str] = ("node-agent",)) -> str:
    """`kubectl kustomize` of the base plus components, through a throwaway kustomization
    (the tracked ones are not edited)."""
    with tempfile.TemporaryDirectory(prefix="layer-locality-render-") as tmp:
        root = Path(tmp)
        lines = ["apiVersion: kustomize.config.k8s.io/v1beta1", "kind: Kustomization",
                 "resources:", f"  - {os.path.relpath(manifests / 'base', root)}"]
        if components:
            lines.append("components:")
            lines += [f"  - {os.path.relpath(manifests / 'components' / c, root)}"
                      for c in components]
        (root / "kustomization.yaml").write_text("\n".join(lines) + "\n")
        result = subprocess.run([str(kubectl), "kustomize", str(root)], capture_output=True,
                                text=True, check=False, env=child_env())
    if result.returncode != 0:
        raise ClusterError(f"kubectl kustomize failed:\n{result.stderr.strip()}")
    return result.stdout


def for_host_webhook(documents: Iterable[Mapping[str, Any]], url: str,
                     ca_bundle_pem: bytes) -> list[dict[str, Any]]:
    """The rendered objects without kubelet-bound workloads, the webhook configuration pointed
    at `url` (scheme and authority: each webhook keeps its path) (pure)."""
    out = []
    bundle = base64.b64encode(ca_bundle_pem).decode("ascii")
    for doc in documents:
        if not doc or doc.get("kind") in LEFT_OUT_KINDS:
            continue
        obj = dict(doc)
        if obj.get("kind") == WEBHOOK_CONFIGURATION:
            obj["webhooks"] = [
                {**hook, "clientConfig": {"url": url + _service_path(hook), "caBundle": bundle}}
                for hook in obj.get("webhooks", [])]
        out.append(obj)
    return out


def _service_path(hook: Mapping[str, Any]) -> str:
    client = hook.get("clientConfig")
    service = client.get("service") if isinstance(client, Mapping) else None
    path = service.get("path") if isinstance(service, Mapping) else None
    return path if isinstance(path, str) and path.startswith("/") else "/mutate"


def apply(kubectl: Path, kubeconfig: Path, objects: Sequence[Mapping[str, Any]]) -> None:
    text = yaml.safe_dump_all(list(objects), sort_keys=False)
    run_kubectl(kubectl, kubeconfig, ["apply", "-f", "-"], stdin=text)


def run_kubectl(kubectl: Path, kubeconfig: Path, args: Sequence[str],
                stdin: str | None = None) -> str:
    result = subprocess.run([str(kubectl), f"--kubeconfig={kubeconfig}", *args],
                            input=stdin, capture_output=True, text=True, check=False,
                            env=child_env())
    if result.returncode != 0:
        raise ClusterError(f"kubectl {' '.join(args)} failed:\n{result.stderr.strip()}")
    return result.stdout


RELEASE = "layer-locality"
CHART = Path("charts") / "layer-locality"


def helm_install_argv(helm: Path, kubeconfig: Path, url: str, ca_cert: Path,
                      chart: Path | None = None, extra: Sequence[str] = ()) -> list[str]:
    """`helm upgrade --install` of the chart into namespace layer-locality, its webhook
    configuration pointed at `url` and trusting `ca_cert` (pure)."""
    return [*helm_upgrade_argv(helm, kubeconfig, chart),
            "--set", f"webhook.url={url}", "--set-file", f"webhook.caBundle={ca_cert}",
            *extra]


def helm_upgrade_argv(helm: Path, kubeconfig: Path, chart: Path | None = None) -> list[str]:
    """`helm upgrade --install` of the chart as release and namespace layer-locality."""
    return [str(helm), "upgrade", "--install", RELEASE, str(chart or repo_root() / CHART),
            "--kubeconfig", str(kubeconfig), "--namespace", RELEASE, "--create-namespace"]


def run_helm(argv: Sequence[str]) -> str:
    result = subprocess.run(list(argv), capture_output=True, text=True, check=False,
                            env=child_env())
    if result.returncode != 0:
        raise ClusterError(f"{' '.join(argv[1:3])} failed:\n{result.stderr.strip()}")
    return result.stdout


def token_for(kubectl: Path, kubeconfig: Path, namespace: str, service_account: str,
              duration: str = "48h") -> str:
    """A real TokenRequest token for a ServiceAccount (what a pod's projected volume holds)."""
    return run_kubectl(kubectl, kubeconfig, ["-n", namespace, "create", "token",
                                             service_account, f"--duration={duration}"]).strip()


def serve_argv(listen: str, kubeconfig: Path, cert: Path, key: Path,
               catalog: Path | None, extra: Sequence[str] = (),
               registry: str | None = None) -> list[str]:
    """The webhook in live mode against the local cluster: offline, layers from the catalog
    (fake nodes: the cluster reaches no registry), or with real nodes asking the cluster's own
    `registry` (HOST:PORT, plain HTTP) too."""
    argv = [sys.executable, "-m", "webhook", "serve", "--listen", listen,
            "--kubeconfig", str(kubeconfig), "--tls-cert", str(cert), "--tls-key", str(key)]
    argv += ["--registry-insecure", registry] if registry else ["--offline"]
    # No Service routes to a webhook on the host: a drain would only slow `cluster down`.
    argv += ["--drain-seconds", "0"]
    if catalog is not None:
        argv += ["--catalog", str(catalog)]
    return [*argv, *extra]
