"""The product installed into real nodes as an operator installs it: the image built here
(hack/image/build.sh, an OCI layout) copied by skopeo into the cluster's registry, then the
Helm chart with its default values — two replicas behind the Service, self-signed
certificates, PDB, NetworkPolicy — plus what this air-gapped cluster needs: the image's
repository in the cluster's registry, and that registry allowed over plain HTTP so the
webhook can read layer lists. `agent=True` also runs the node agent's DaemonSet.

Runs inside the cluster's network namespace (the registry and the API server are there)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from webhook.devcluster.install import (
    CHART,
    RELEASE,
    helm_upgrade_argv,
    repo_root,
    run_helm,
    run_kubectl,
)
from webhook.devcluster.processes import ClusterError, child_env
from webhook.devcluster.realnodes.network import registry_host

if TYPE_CHECKING:
    from webhook.devcluster.cluster import LocalCluster

REPOSITORY = "layer-locality"


def image_repository() -> str:
    return f"{registry_host()}/{REPOSITORY}"


def push_layout(layout: Path, tag: str, prefix: Sequence[str] = ()) -> str:
    """skopeo copy oci:LAYOUT:TAG to the cluster's registry (`prefix`: nsenter into the
    namespace, when the caller is not in it); returns the pushed reference."""
    target = f"{image_repository()}:{tag}"
    result = subprocess.run(
        [*prefix, "skopeo", "copy", "--quiet", "--dest-tls-verify=false",
         f"oci:{layout}:{tag}", f"docker://{target}"],
        capture_output=True, text=True, check=False, env=child_env())
    if result.returncode != 0:
        raise ClusterError(f"skopeo could not push {layout} to {target}: "
                           f"{result.stderr.strip()}")
    return target


def helm_values(tag: str, *, agent: bool) -> dict[str, object]:
    """What the chart needs beyond its defaults here: where the image is, and the registry."""
    values: dict[str, object] = {
        "image": {"repository": image_repository(), "tag": tag},
        "settings": {"registry_insecure": [registry_host()]},
    }
    if agent:
        values["agent"] = {"enabled": True}
    return values


def helm_install_argv(helm: Path, kubeconfig: Path, tag: str, *, agent: bool,
                      extra: Sequence[str] = (), chart: Path | None = None) -> list[str]:
    """`helm upgrade --install` of the chart, in-cluster (pure)."""
    values = helm_values(tag, agent=agent)
    return [*helm_upgrade_argv(helm, kubeconfig, chart),
            "--set-json", f"image={json.dumps(values['image'])}",
            "--set-json", f"settings={json.dumps(values['settings'])}",
            *(["--set", "agent.enabled=true"] if agent else []), *extra]


def version() -> str:
    import tomllib

    project = tomllib.loads((repo_root() / "pyproject.toml").read_text())["project"]
    return str(project["version"])


def install(cluster: LocalCluster, layout: Path | None, helm: Path,
            rollout_timeout: str = "180s", extra: Sequence[str] = ()) -> str:
    """Push the image, install the chart with the agent, wait for both rollouts; returns
    what was done, for the user (the commands to upgrade and uninstall)."""
    if layout is None:
        raise ClusterError("--install in-cluster needs the image (--image-layout)")
    tag = version()
    pushed = push_layout(layout, tag)
    argv = helm_install_argv(helm, cluster.kubeconfig, tag, agent=True, extra=extra)
    run_helm([*argv, "--wait", "--timeout", rollout_timeout])
    for kind, name, namespace in (("deployment", RELEASE, RELEASE),
                                  ("daemonset", f"{RELEASE}-agent", f"{RELEASE}-agent")):
        run_kubectl(cluster.kubectl, cluster.kubeconfig,
                    ["-n", namespace, "rollout", "status", f"{kind}/{name}",
                     f"--timeout={rollout_timeout}"])
    return (f"installed in-cluster: image {pushed}, chart {CHART} (release {RELEASE}), "
            f"the node agent on every node\n  {' '.join(argv)}")
