"""A real control plane for tests: etcd, kube-apiserver, kube-scheduler and
kube-controller-manager built from the pinned Go module (hack/kube/build.sh), started on
127.0.0.1 once per session, with fake nodes, the project's manifests and the webhook on the host.

Without the binaries (no Go toolchain, a failed build) the tests marked `controlplane` skip
with the reason, or fail in CI (tests.helpers.in_ci: `.ci/run` sets CI=true).
Every process is stopped by pid at the end of the session, whatever the tests did.

The nodes: two hold python:3.11 (real layers from the demo catalog), four do not. The catalog
adds `registry.layer-locality.test/team/app:1.0`, an image built FROM python:3.11 (its layers
plus a small app layer) that no node holds by name, so the stock ImageLocality plugin cannot
credit it and any preference for the python nodes is the webhook's.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import fail_or_skip
from webhook.devcluster.binaries import helm_bin_dir, kube_bin_dir
from webhook.devcluster.cluster import LocalCluster, up
from webhook.devcluster.install import repo_root
from webhook.devcluster.processes import ClusterError

DATA = repo_root() / "webhook" / "data"
APP_IMAGE = "registry.layer-locality.test/team/app:1.0"
BASE_IMAGE = "docker.io/library/python:3.11"
OPT_IN = {"layer-locality.io/enabled": "true"}
DECISION = "layer-locality.io/decision"
WARM = ("warm-a", "warm-b")
COLD = ("cold-a", "cold-b", "cold-c1", "cold-c2")
ZONES = {"warm-a": "zone-a", "warm-b": "zone-b", "cold-a": "zone-a", "cold-b": "zone-b",
         "cold-c1": "zone-c", "cold-c2": "zone-c"}


def kube_binaries() -> Path:
    """The pinned binaries: $LAYER_LOCALITY_KUBE_BIN, else what hack/kube/build.sh prints
    (a cached build returns at once; a cold one builds)."""
    try:
        return kube_bin_dir()
    except ClusterError as exc:
        fail_or_skip(str(exc))


def helm_binary() -> Path:
    """The pinned helm: $LAYER_LOCALITY_HELM_BIN/helm, else built by hack/helm/build.sh."""
    try:
        return helm_bin_dir() / "helm"
    except ClusterError as exc:
        fail_or_skip(str(exc))


def catalog_entries() -> dict[str, Any]:
    return {entry["ref"]: entry
            for entry in json.loads((DATA / "demo-catalog.json").read_text())["images"]}


def app_catalog_entry() -> dict[str, Any]:
    """An image built FROM python:3.11: its real layers plus one 6 MB layer of its own."""
    import hashlib

    base = catalog_entries()[BASE_IMAGE]
    platform = base["platforms"]["linux/amd64"]

    def fake(label: str) -> str:
        return "sha256:" + hashlib.sha256(label.encode()).hexdigest()

    return {"ref": APP_IMAGE, "digest": fake("app index"), "platforms": {"linux/amd64": {
        "digest": fake("app manifest"),
        "layers": [*platform["layers"], {"digest": fake("app layer"), "size": 6_000_000}]}}}


def status_image(ref: str) -> dict[str, Any]:
    """A node.status.images entry as containerd reports it: repo@index-digest and the tag."""
    entry = catalog_entries()[ref]
    repo = ref.rsplit(":", 1)[0]
    size = sum(layer["size"] for layer in entry["platforms"]["linux/amd64"]["layers"])
    return {"names": [f"{repo}@{entry['digest']}", ref], "sizeBytes": size}


def node_items() -> list[dict[str, Any]]:
    images = {"warm-a": [BASE_IMAGE, "docker.io/library/redis:7.0"],
              "warm-b": [BASE_IMAGE],
              # Images sharing no layer with python:3.11 (node:18 would share 322 MB of it).
              "cold-a": ["docker.io/library/node:18-slim"],
              "cold-b": ["docker.io/library/nginx:1.23"],
              "cold-c1": [], "cold-c2": ["docker.io/library/debian:bookworm"]}
    return [{
        "metadata": {"name": name, "labels": {
            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64", "topology.kubernetes.io/zone": ZONES[name]}},
        "status": {"images": sorted((status_image(r) for r in refs),
                                    key=lambda i: -int(i["sizeBytes"]))},
    } for name, refs in images.items()]


def start_cluster(root: Path, webhook_args: list[str], **options: Any) -> LocalCluster:
    """The nodes and catalog above on a fresh control plane under `root`, the webhook started
    with `webhook_args` (`options`: more of devcluster.cluster.up's); the caller stops it
    (cluster.down())."""
    root.mkdir(parents=True, exist_ok=True)
    catalog = root / "catalog.json"
    catalog.write_text(json.dumps({"images": [*catalog_entries().values(),
                                              app_catalog_entry()]}))
    try:
        return up(root, kube_binaries(), node_items(), catalog=catalog,
                  webhook_args=webhook_args, **options)
    except ClusterError as exc:
        fail_or_skip(f"the local control plane did not start: {exc}")


@pytest.fixture(scope="session")
def local_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    # Rotation is checked every second (default 10) so the test waits less. Idle keep-alive
    # connections close after 2 s (default 75): the rotation test needs the API server to
    # open new ones.
    cluster = start_cluster(tmp_path_factory.mktemp("cluster"),
                            ["--log-level", "info", "--tls-reload-seconds", "1",
                             "--idle-seconds", "2"])
    try:
        yield cluster
    finally:
        cluster.down()


# ---- helpers for tests on the cluster --------------------------------------------------------

def new_namespace(cluster: LocalCluster, opted_in: bool, prefix: str = "t") -> str:
    """A fresh namespace (opted in or not) whose default ServiceAccount exists (pods need it)."""
    from kubernetes import client

    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    with cluster.api_client() as api:
        core: Any = client.CoreV1Api(api)
        core.create_namespace({"metadata": {"name": name,
                                            "labels": dict(OPT_IN) if opted_in else {}}})
        wait_for(lambda: bool(core.list_namespaced_service_account(
            name, field_selector="metadata.name=default").items), 30,
            f"the default ServiceAccount of {name}")
    return name


def wait_for(check: Callable[[], bool], timeout: float, what: str,
             interval: float = 0.2) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


# A scheduler that does not run: the pod is admitted (and patched) but never bound, so it
# leaves no layers "in flight" on a node for later tests (the webhook counts a bound pod's
# layers on its node for --inflight-seconds). Not a nodeSelector no node matches: the webhook
# honours the pod's node selection and would leave such a pod unpatched (no_nodes).
NEVER_BIND_SCHEDULER = "layer-locality-test-no-scheduler"


def pod_manifest(name: str, image: str = APP_IMAGE, labels: Mapping[str, str] | None = None,
                 bind: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{
        "name": "app", "image": image,
        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}
    if not bind:
        spec["schedulerName"] = NEVER_BIND_SCHEDULER
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": dict(labels or {"app": name})}, "spec": spec}


def top_node(cluster: LocalCluster, namespace: str, image: str) -> str | None:
    """The first node of the decision a dry-run create of a pod running `image` gets (None:
    not patched): asks the webhook through the real API server, creates nothing."""
    out = cluster.kubectl_run(
        ["-n", namespace, "create", "--dry-run=server", "-o", "json", "-f", "-"],
        stdin=json.dumps(pod_manifest(f"probe-{uuid.uuid4().hex[:6]}", image=image)))
    annotations = json.loads(out)["metadata"].get("annotations") or {}
    if DECISION not in annotations:
        return None
    top = json.loads(annotations[DECISION]).get("top") or []
    return str(top[0]["node"]) if top else None


def as_dict(api: Any, obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = api.sanitize_for_serialization(obj)
    return out
