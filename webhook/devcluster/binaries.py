"""Where the pinned control plane binaries are, and which Kubernetes version they are: shared by
`layer-locality evaluate` and the tests on the local control plane."""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from webhook.devcluster.install import repo_root
from webhook.devcluster.processes import ClusterError

ENV = "LAYER_LOCALITY_KUBE_BIN"
BUILD_SCRIPT = Path("hack") / "kube" / "build.sh"
BUILD_TIMEOUT = 3600.0  # a cold build takes about 9 minutes on 2 cores
NODE_ENV = "LAYER_LOCALITY_NODE_BIN"
NODE_BUILD_SCRIPT = Path("hack") / "node" / "build.sh"
HELM_ENV = "LAYER_LOCALITY_HELM_BIN"
HELM_BUILD_SCRIPT = Path("hack") / "helm" / "build.sh"
NETPOL_ENV = "LAYER_LOCALITY_NETPOL_BIN"
NETPOL_BUILD_SCRIPT = Path("hack") / "netpol" / "build.sh"


def kube_bin_dir(env: Mapping[str, str] | None = None, root: Path | None = None,
                 timeout: float = BUILD_TIMEOUT) -> Path:
    """The pinned binaries: $LAYER_LOCALITY_KUBE_BIN, else the directory hack/kube/build.sh
    prints (a cached build returns at once; a cold one builds). ClusterError when neither."""
    return _built(ENV, BUILD_SCRIPT, "the control plane", env, root, timeout)


def node_bin_dir(env: Mapping[str, str] | None = None, root: Path | None = None,
                 timeout: float = BUILD_TIMEOUT) -> Path:
    """containerd, its shim, ctr, the CNI plugins and pause: $LAYER_LOCALITY_NODE_BIN, else
    what hack/node/build.sh prints. ClusterError when neither."""
    return _built(NODE_ENV, NODE_BUILD_SCRIPT, "the node runtime", env, root, timeout)


IMAGE_ENV = "LAYER_LOCALITY_IMAGE_LAYOUT"
IMAGE_BUILD_SCRIPT = Path("hack") / "image" / "build.sh"


def image_layout(env: Mapping[str, str] | None = None, root: Path | None = None,
                 timeout: float = BUILD_TIMEOUT) -> Path:
    """The project's image as an OCI layout (tag: the project version):
    $LAYER_LOCALITY_IMAGE_LAYOUT, else what hack/image/build.sh prints (root, mmdebstrap,
    umoci; cached by the hash of its inputs). ClusterError when neither."""
    import sys

    env = dict(os.environ if env is None else env)
    env.setdefault("PIP_PYTHON", sys.executable)
    return _built(IMAGE_ENV, IMAGE_BUILD_SCRIPT, "the image", env, root, timeout)


def helm_bin_dir(env: Mapping[str, str] | None = None, root: Path | None = None,
                 timeout: float = BUILD_TIMEOUT) -> Path:
    """The pinned helm's directory: $LAYER_LOCALITY_HELM_BIN, else what hack/helm/build.sh
    prints. ClusterError when neither."""
    return _built(HELM_ENV, HELM_BUILD_SCRIPT, "helm", env, root, timeout)


def netpol_bin_dir(env: Mapping[str, str] | None = None, root: Path | None = None,
                   timeout: float = BUILD_TIMEOUT) -> Path:
    """The NetworkPolicy enforcer's directory (kube-network-policies, for real nodes):
    $LAYER_LOCALITY_NETPOL_BIN, else what hack/netpol/build.sh prints. ClusterError when
    neither."""
    return _built(NETPOL_ENV, NETPOL_BUILD_SCRIPT, "the NetworkPolicy enforcer", env, root,
                  timeout)


def _built(variable: str, build_script: Path, what: str, env: Mapping[str, str] | None,
           root: Path | None, timeout: float) -> Path:
    env = os.environ if env is None else env
    given = env.get(variable)
    if given:
        return Path(given)
    script = (root or repo_root()) / build_script
    if not script.exists():
        raise ClusterError(f"{script} not found (not a checkout): name the binaries' directory "
                           f"with ${variable}")
    try:
        result = subprocess.run([str(script)], capture_output=True, text=True, check=False,
                                timeout=timeout, env=dict(env))
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClusterError(f"{what} could not be built: {exc}") from exc
    if result.returncode != 0:
        tail = "\n".join(result.stderr.strip().splitlines()[-15:])
        raise ClusterError(f"{what} could not be built ({build_script}):\n{tail}")
    return Path(result.stdout.strip())


def kube_version(root: Path | None = None) -> str | None:
    """The k8s.io/kubernetes version hack/kube/go.mod pins (v1.37.2), None outside a checkout."""
    try:
        text = ((root or repo_root()) / "hack" / "kube" / "go.mod").read_text()
    except OSError:
        return None
    found = re.search(r"^\s*(?:require\s+)?k8s\.io/kubernetes\s+(v\S+)", text, re.MULTILINE)
    return found[1] if found else None
