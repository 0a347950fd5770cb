"""A cluster with real nodes for tests: `layer-locality cluster up --kubelets N` (the CLI, as a
user runs it) — the control plane, N kubelets each with its own containerd v2, the CNI bridge,
kube-proxy and the registry, all inside a network namespace the run creates with no link out —
and `cluster down` at the end.

The tests reach the cluster only from inside that namespace: commands through nsenter
(`RealCluster.kubectl`), Python calls on threads that entered it (`RealCluster.call`). Images are
built here (webhook.devcluster.realnodes.oci) and pushed to the cluster's registry; the registry's
access log says which node fetched which blob.

Needs root, Go (hack/kube, hack/node), runc, iptables, busybox-static and docker-registry.
Without them the tests skip with the reason, or fail in CI (tests.helpers.in_ci)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

import pytest

from tests.helpers import fail_or_skip
from tests.integration import cluster_fixture
from webhook.devcluster.binaries import kube_bin_dir, node_bin_dir
from webhook.devcluster.controlplane import ControlPlane
from webhook.devcluster.install import repo_root
from webhook.devcluster.processes import ClusterError, Process, spawn
from webhook.devcluster.realnodes import oci
from webhook.devcluster.realnodes.bringup import NodeRecord, recorded_nodes
from webhook.devcluster.realnodes.namespaces import NETNS_HOLDER, NetnsRunner, enter
from webhook.devcluster.realnodes.network import registry_host
from webhook.devcluster.realnodes.registry import BlobFetch, blob_fetches

T = TypeVar("T")
OPT_IN = {"layer-locality.io/enabled": "true"}
DECISION = "layer-locality.io/decision"
PROGRAMS = {"runc": "runc", "iptables": "iptables", "busybox": "busybox-static",
            "docker-registry": "docker-registry", "nsenter": "util-linux",
            "unshare": "util-linux", "ip": "iproute2"}


def require_real_nodes() -> tuple[Path, Path]:
    """The kube and node binaries, or a skip (a failure in CI) saying what is missing."""
    if os.geteuid() != 0:
        fail_or_skip("real nodes need root (namespaces, mounts, cgroups, containerd)")
    for program, package in PROGRAMS.items():
        if shutil.which(program) is None and shutil.which(program, path="/usr/sbin:/sbin") \
                is None:
            fail_or_skip(f"{program} is missing (Debian package {package}; make system-deps "
                         "installs it)")
    try:
        kube, node = kube_bin_dir(), node_bin_dir()
    except ClusterError as exc:
        fail_or_skip(str(exc))
    if not (kube / "kubelet").is_file():
        fail_or_skip(f"{kube} has no kubelet: rebuild with hack/kube/build.sh")
    return kube, node


def cluster_up(root: Path, kubelets: int, *extra: str) -> None:
    kube, node = require_real_nodes()
    result = subprocess.run(
        [sys.executable, "-m", "webhook", "cluster", "up", "--dir", str(root),
         "--bin-dir", str(kube), "--node-bin", str(node), "--kubelets", str(kubelets),
         *extra], capture_output=True, text=True, check=False, cwd=repo_root(), timeout=600)
    if result.returncode != 0:
        fail_or_skip(f"the cluster with real nodes did not start:\n{result.stderr[-3000:]}")


@contextlib.contextmanager
def running(root: Path, kubelets: int, *extra: str) -> Iterator[NetnsRunner]:
    """A cluster up for the block, and down after it whatever happened (a failed or
    interrupted start included): yields a runner of calls inside its namespace."""
    runner = None
    try:
        cluster_up(root, kubelets, *extra)
        plane = ControlPlane.load(root)
        assert plane is not None
        runner = NetnsRunner(plane.processes[NETNS_HOLDER].pid)
        yield runner
    finally:
        if runner is not None:
            runner.close()
        result = cluster_down(root)
        assert result.returncode == 0, result.stderr


def cluster_down(root: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webhook", "cluster", "down", "--dir",
                           str(root)], capture_output=True, text=True, check=False,
                          cwd=repo_root(), timeout=300)


@dataclass
class RealCluster:
    root: Path
    kube_bin: Path
    runner: NetnsRunner
    helm: Path | None = None
    _api: Any = field(default=None, repr=False)

    # ---- state ----------------------------------------------------------------------------
    @property
    def plane(self) -> ControlPlane:
        plane = ControlPlane.load(self.root)
        assert plane is not None, f"no cluster state in {self.root}"
        return plane

    @property
    def holder(self) -> Process:
        return self.plane.processes[NETNS_HOLDER]

    def nodes(self) -> list[NodeRecord]:
        return recorded_nodes(self.plane)

    def node(self, name: str) -> NodeRecord:
        return next(n for n in self.nodes() if n.name == name)

    def node_ips(self) -> dict[str, str]:
        return {n.name: n.ip for n in self.nodes()}

    # ---- reaching the cluster -------------------------------------------------------------
    def in_namespace(self, argv: list[str], stdin: str | None = None,
                     check: bool = True, timeout: float = 120) -> str:
        result = subprocess.run([*enter(self.holder, wd=repo_root()), *argv], input=stdin,
                                text=True,
                                capture_output=True, check=False, timeout=timeout,
                                env={**os.environ, "KUBECONFIG": str(self.plane.kubeconfig)})
        if check and result.returncode != 0:
            raise AssertionError(f"{argv[:4]} failed ({result.returncode}): "
                                 f"{result.stderr.strip()[-2000:]}")
        return result.stdout

    def kubectl(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        return self.in_namespace([str(self.kube_bin / "kubectl"), *args], stdin, check)

    def helm_run(self, *args: str) -> str:
        assert self.helm is not None, "this cluster was started without helm"
        return self.in_namespace([str(self.helm), "--kubeconfig", str(self.plane.kubeconfig),
                                  *args])

    def kubectl_json(self, *args: str) -> Any:
        return json.loads(self.kubectl(*args, "-o", "json"))

    def call(self, fn: Callable[[Any], T], timeout: float = 120) -> T:
        """fn(api_client) on a thread inside the namespace (a kubernetes.client.ApiClient)."""
        def run() -> T:
            if self._api is None:
                from kubernetes import config

                self._api = config.new_client_from_config(  # type: ignore[no-untyped-call]
                    config_file=str(self.plane.kubeconfig))
            return fn(self._api)
        return self.runner.run(run, timeout=timeout)

    def core(self, fn: Callable[[Any], T]) -> T:
        from kubernetes import client

        return self.call(lambda api: fn(client.CoreV1Api(api)))

    def push(self, image: oci.Image, mount_from: str = "") -> None:
        self.runner.run(lambda: oci.push(f"http://{registry_host()}", image,
                                         mount_from=mount_from))

    def ref(self, image: oci.Image) -> str:
        return image.ref(registry_host())

    # ---- the registry's own record --------------------------------------------------------
    def fetches(self) -> list[BlobFetch]:
        return blob_fetches(self.plane.log("registry").read_text(errors="replace"))

    # ---- nodes ----------------------------------------------------------------------------
    def in_node(self, node: str, argv: list[str], check: bool = True) -> str:
        """A command in the node's mount namespace (its /run: containerd's socket)."""
        holder = self.plane.processes[f"mounts-{node}"]
        return self.in_namespace([*enter(holder, net=False), *argv], check=check)

    def ctr(self, node: str, *args: str, check: bool = True) -> str:
        node_bin = Path(self.plane.processes[f"containerd-{node}"].argv[-2]).parent
        return self.in_node(node, [str(node_bin / "ctr"), "--address",
                                   "/run/containerd/containerd.sock", "-n", "k8s.io", *args],
                            check=check)

    def stop_kubelet(self, node: str) -> None:
        from webhook.devcluster.processes import stop

        stop(self.plane.processes[f"kubelet-{node}"])

    def start_kubelet(self, node: str) -> Process:
        """The node's kubelet again, with the argv it had (same config, root dir, cgroup)."""
        plane = self.plane
        old = plane.processes[f"kubelet-{node}"]
        # Its argv enters the holders by pid: only while they are the processes recorded.
        for holder in (NETNS_HOLDER, f"mounts-{node}"):
            assert plane.processes[holder].alive(), f"{holder} is gone: not restarting"
        process = spawn(old.name, old.argv, old.log,
                        env={"PATH": str(Path(old.argv[0]).parent) + ":/usr/sbin:/usr/bin"})
        plane.processes[old.name] = process
        plane.save()
        return process

    # ---- objects --------------------------------------------------------------------------
    def new_namespace(self, opted_in: bool, prefix: str = "rn") -> str:
        name = f"{prefix}-{uuid.uuid4().hex[:6]}"
        self.core(lambda core: core.create_namespace(
            {"metadata": {"name": name, "labels": dict(OPT_IN) if opted_in else {}}}))
        wait_for(lambda: bool(self.core(lambda core: core.list_namespaced_service_account(
            name, field_selector="metadata.name=default").items)), 30,
            f"the default ServiceAccount of {name}")
        return name

    def hold(self, image: oci.Image, node: str, name: str = "holder") -> str:
        """Push `image` and run it on `node` (a plain namespace of its own) until Running, so
        the node holds its layers; returns that namespace."""
        self.push(image)
        plain = self.new_namespace(opted_in=False)
        self.kubectl("-n", plain, "create", "-f", "-",
                     stdin=json.dumps(pod_manifest(name, self.ref(image), node=node)))
        self.wait_running(plain, name)
        return plain

    def node_images(self, node: str) -> list[dict[str, Any]]:
        images: list[dict[str, Any]] = self.kubectl_json("get", "node", node)["status"].get(
            "images") or []
        return images

    def pod(self, namespace: str, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.kubectl_json("-n", namespace, "get", "pod", name)
        return found

    def wait_running(self, namespace: str, name: str, timeout: float = 120) -> dict[str, Any]:
        def running() -> bool:
            return bool(self.pod(namespace, name)["status"].get("phase") == "Running")
        wait_for(running, timeout, f"pod {namespace}/{name} Running")
        return self.pod(namespace, name)

    def events(self, namespace: str, pod: str) -> list[dict[str, Any]]:
        items: list[dict[str, Any]] = self.kubectl_json(
            "-n", namespace, "get", "events",
            "--field-selector", f"involvedObject.name={pod}")["items"]
        return items


def pod_manifest(name: str, image: str, *, node: str | None = None,
                 labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """A pod that starts at once, stops at once (sleep as PID 1 ignores SIGTERM: grace 0)."""
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "app", "image": image, "imagePullPolicy": "IfNotPresent",
                        "resources": {"requests": {"cpu": "10m", "memory": "8Mi"}}}]}
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": dict(labels or {"app": name})}, "spec": spec}


def wait_for(check: Callable[[], bool], timeout: float, what: str) -> None:
    # Each check here runs kubectl through nsenter: half a second between them, not 0.2.
    cluster_fixture.wait_for(check, timeout, what, interval=0.5)


def app_image(repository: str, *layers: oci.Layer, tag: str = "1") -> oci.Image:
    """An image whose process sleeps (busybox must be among the layers)."""
    return oci.Image(repository, tag, tuple(layers), entrypoint=("/bin/sleep",),
                     cmd=("3600",))


@pytest.fixture(scope="module")
def real_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """Three real nodes (zones a, b, c), the webhook on the cluster's side of the namespace
    (as `cluster up` installs it), online against the cluster's registry."""
    root = tmp_path_factory.mktemp("real")
    kube, _ = require_real_nodes()
    with running(root, 3) as runner:
        yield RealCluster(root, kube, runner)


@pytest.fixture(scope="module")
def installed_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RealCluster]:
    """Three real nodes and the product installed into them as an operator would
    (`cluster up --install in-cluster`: the image built here pushed to the cluster's registry,
    the chart with its defaults and the node agent); no webhook on the host."""
    from webhook.devcluster.binaries import helm_bin_dir, image_layout

    root = tmp_path_factory.mktemp("installed")
    kube, _ = require_real_nodes()
    if shutil.which("skopeo") is None or shutil.which("mmdebstrap") is None:
        fail_or_skip("skopeo and mmdebstrap are missing (make system-deps installs them)")
    try:
        helm, layout = helm_bin_dir(), image_layout()
    except ClusterError as exc:
        fail_or_skip(str(exc))
    with running(root, 3, "--install", "in-cluster", "--helm-bin", str(helm),
                 "--image-layout", str(layout)) as runner:
        yield RealCluster(root, kube, runner, helm=helm / "helm")
