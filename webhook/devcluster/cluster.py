"""A whole local cluster: the control plane, fake nodes, the project's manifests, and the
webhook serving from the host with a real ServiceAccount token (its RBAC is the shipped one).

`up` is what `make cluster` and the test fixture run; `down` stops every process it started,
by pid, from the state file, so it works from another process."""

from __future__ import annotations

import json
import os
import shutil
import ssl
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from webhook.devcluster import install
from webhook.devcluster.controlplane import ControlPlane, choose_ports, write_kubeconfig
from webhook.devcluster.nodes import BIG_LIST, create_nodes, read_node_list, stderr_report
from webhook.devcluster.processes import (
    ClusterError,
    Process,
    fetch,
    free_port,
    port_free,
    spawn,
    stop,
    wait_until,
)
from webhook.devcluster.realnodes.network import registry_host
from webhook.serving.certs import CertificateFiles, generate

WEBHOOK = "webhook"
WEBHOOK_NAMESPACE = "layer-locality"
WEBHOOK_SERVICE_ACCOUNT = "layer-locality"
WEBHOOK_READY_TIMEOUT = 60.0


def load_node_items(path: Path) -> list[dict[str, Any]]:
    """Items of a NodeList file (JSON or YAML: nodes.read_node_list); ClusterError if it is
    not one. A big list's reading time goes to stderr."""
    started = time.monotonic()
    try:
        items = read_node_list(path)
    except ValueError as exc:
        raise ClusterError(str(exc)) from exc
    if len(items) >= BIG_LIST:
        stderr_report(f"read {len(items)} nodes from {path} in "
                      f"{time.monotonic() - started:.1f} s")
    return items


@dataclass
class LocalCluster:
    plane: ControlPlane
    kubectl: Path

    @property
    def root(self) -> Path:
        return self.plane.root

    @property
    def kubeconfig(self) -> Path:
        return self.plane.kubeconfig

    # ---- the webhook on the host ----------------------------------------------------------
    @property
    def webhook_dir(self) -> Path:
        return self.root / WEBHOOK

    @property
    def webhook_certs(self) -> CertificateFiles:
        d = self.webhook_dir / "certs"
        return CertificateFiles(d / "ca.crt", d / "tls.crt", d / "tls.key")

    @property
    def webhook_kubeconfig(self) -> Path:
        return self.webhook_dir / "kubeconfig"

    @property
    def webhook_port(self) -> int:
        return int(self.plane.extra["webhook_port"])

    @property
    def webhook_url(self) -> str:
        return f"https://127.0.0.1:{self.webhook_port}"

    def webhook_process(self) -> Process | None:
        return self.plane.processes.get(WEBHOOK)

    def start_webhook(self, extra_args: Sequence[str] = ()) -> Process:
        """Start (or start again) the webhook on its port; ready once its inventory synced."""
        self.stop_webhook()  # never two: the state file tracks one
        return self._start_webhook(WEBHOOK, self.webhook_port, extra_args)

    def start_webhook_replica(self, index: int, port: int,
                              extra_args: Sequence[str] = ()) -> Process:
        """Another webhook process (`webhook-<index>`) on `port`, for a balancer on the
        webhook's port to spread connections over (evaluation.balancer); stopped with the
        cluster."""
        return self._start_webhook(f"{WEBHOOK}-{index}", port, extra_args)

    def _start_webhook(self, name: str, port: int, extra_args: Sequence[str]) -> Process:
        argv = install.serve_argv(
            f"127.0.0.1:{port}", self.webhook_kubeconfig,
            self.webhook_certs.cert, self.webhook_certs.key,
            Path(self.plane.extra["catalog"]) if self.plane.extra.get("catalog") else None,
            [*json.loads(self.plane.extra.get("webhook_args", "[]")), *extra_args],
            registry=registry_host() if self.plane.real_nodes else None)
        process = spawn(name, argv, self.plane.log(name), cwd=install.repo_root())
        self.plane.processes[name] = process
        self.plane.save()
        context = ssl.create_default_context(cafile=str(self.webhook_certs.ca_cert))
        wait_until(process, lambda: fetch(f"https://127.0.0.1:{port}/readyz", context) is not None,
                   WEBHOOK_READY_TIMEOUT, "ready (/readyz)")
        return process

    def stop_webhook(self) -> None:
        process = self.webhook_process()
        if process is not None:
            stop(process)

    def refresh_webhook_token(self) -> None:
        token = install.token_for(self.kubectl, self.kubeconfig, WEBHOOK_NAMESPACE,
                                  WEBHOOK_SERVICE_ACCOUNT)
        write_kubeconfig(self.webhook_kubeconfig, self.plane.server, self.plane.pki.ca_cert,
                         user={"token": token}, name="layer-locality-webhook")

    def kubectl_run(self, args: Sequence[str], stdin: str | None = None) -> str:
        return install.run_kubectl(self.kubectl, self.kubeconfig, args, stdin)

    def api_client(self) -> Any:
        """A kubernetes.client.ApiClient as cluster-admin."""
        from kubernetes import config

        return config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig))

    def down(self) -> None:
        if self.plane.real_nodes:
            from webhook.devcluster.realnodes.teardown import teardown

            teardown(self.plane)
        else:
            self.plane.stop()


def running_cluster(root: Path) -> LocalCluster | None:
    """The cluster recorded in `root` if any of its processes still runs."""
    plane = ControlPlane.load(root)
    if plane is None or not plane.running():
        return None
    return LocalCluster(plane, plane.bin_dir / "kubectl")


def up(root: Path, bin_dir: Path, nodes: Sequence[Mapping[str, Any]], *,
       catalog: Path | None = None, manifests: Path | None = None,
       apiserver_port: int | None = None, webhook_port: int | None = None,
       webhook_args: Sequence[str] = (), start_webhook: bool = True,
       helm: Path | None = None, install_objects: bool = True,
       kubelets: int = 0, node_bin: Path | None = None,
       netns_holder: Process | None = None,
       registry_bandwidth: float | None = None,
       percentage_of_nodes_to_score: int | None = None,
       client_qps: int | None = None) -> LocalCluster:
    """Start everything; on failure stop what was started and raise ClusterError.

    `kubelets` real nodes (realnodes/) need the node runtime's binaries (`node_bin`) and a
    holder of the network namespace this process already runs in (`netns_holder`, made by
    `layer-locality cluster up --kubelets N` before it re-ran itself there).
    `registry_bandwidth` (bytes per second, per node) puts a throttle between the nodes and the
    registry (realnodes/throttle.py); None: none. `percentage_of_nodes_to_score` (0-100) sets
    kube-scheduler's percentageOfNodesToScore; None: its adaptive default. `client_qps` lifts
    the controller manager's and the scheduler's API client limits (QPS, burst twice it);
    None: their defaults (20 and 50), which set how fast a ReplicaSet creates pods.

    The project's objects come from the kustomize manifests, or from the chart when `helm`
    (the binary) is given; `install_objects=False` installs neither (the caller installs,
    then calls refresh_webhook_token and start_webhook)."""
    if registry_bandwidth is not None and not kubelets:
        raise ClusterError("a registry bandwidth needs real nodes (kubelets)")
    if percentage_of_nodes_to_score is not None and not 0 <= percentage_of_nodes_to_score <= 100:
        raise ClusterError("percentageOfNodesToScore must be within 0..100")
    if client_qps is not None and not 1 <= client_qps <= 10_000:
        raise ClusterError("the client QPS must be within 1..10000")
    existing = running_cluster(root)
    if existing is not None:
        pids = ", ".join(f"{p.name} {p.pid}" for p in existing.plane.running())
        raise ClusterError(f"a cluster is already running from {root} ({pids}); "
                           "stop it first (make cluster-down)")
    if webhook_port is not None and not port_free(webhook_port):
        raise ClusterError(f"port 127.0.0.1:{webhook_port} is already in use: choose another "
                           "webhook port (or leave it out to take a free one)")
    # A stopped cluster's leftovers (etcd data, certificates, logs) would leak into this one.
    for stale in ("etcd", "pki", WEBHOOK, "logs", "nodes", "registry", "sysctls"):
        shutil.rmtree(root / stale, ignore_errors=True)
    plane = ControlPlane(root, bin_dir, choose_ports(apiserver_port))
    plane.extra = {"webhook_port": str(webhook_port or free_port()),
                   "catalog": str(catalog) if catalog else "",
                   "webhook_args": json.dumps(list(webhook_args))}
    if percentage_of_nodes_to_score is not None:
        from webhook.devcluster.controlplane import SCORE_PERCENTAGE

        plane.extra[SCORE_PERCENTAGE] = str(percentage_of_nodes_to_score)
    if client_qps is not None:
        from webhook.devcluster.controlplane import CLIENT_QPS

        plane.extra[CLIENT_QPS] = str(client_qps)
    if kubelets:
        if netns_holder is None or node_bin is None:
            raise ClusterError("real nodes need the namespace holder and the node binaries")
        import uuid

        from webhook.devcluster.controlplane import REAL_NODES
        from webhook.devcluster.realnodes.bringup import CLUSTER_ID
        from webhook.devcluster.realnodes.namespaces import NETNS_HOLDER, NETNS_KEY, namespace_id

        if namespace_id(netns_holder.pid, "net") != namespace_id(os.getpid(), "net"):
            raise ClusterError(f"this process is not in the network namespace of pid "
                               f"{netns_holder.pid}: refusing to set up real nodes")
        plane.extra[REAL_NODES] = "[]"
        plane.extra[CLUSTER_ID] = uuid.uuid4().hex[:10]
        plane.extra[NETNS_KEY] = namespace_id(netns_holder.pid, "net") or ""
        plane.processes[NETNS_HOLDER] = netns_holder
    cluster = LocalCluster(plane, bin_dir / "kubectl")
    try:
        if kubelets:
            from webhook.devcluster.realnodes.bringup import prepare_namespace

            prepare_namespace(root, kubelets)
        plane.start()
        if kubelets and node_bin is not None:
            from webhook.devcluster.realnodes.bringup import start_nodes

            start_nodes(plane, kubelets, bin_dir, node_bin,
                        registry_bandwidth=registry_bandwidth)
        from kubernetes import client

        with cluster.api_client() as api:
            fake = create_nodes(client.CoreV1Api(api), nodes, report=stderr_report)
        if kubelets and fake:
            import sys

            plane.extra["fake_nodes"] = json.dumps(fake)
            process = spawn("heartbeat", [sys.executable, "-m", "webhook", "cluster",
                                          "heartbeat", "--dir", str(root)],
                            plane.log("heartbeat"), cwd=install.repo_root())
            plane.processes["heartbeat"] = process
            plane.save()
        generate(WEBHOOK_SERVICE_ACCOUNT, WEBHOOK_NAMESPACE, cluster.webhook_dir / "certs",
                 days=30, extra_sans=["127.0.0.1", "localhost"])
        if not install_objects:
            return cluster
        if helm is not None:
            install.run_helm(install.helm_install_argv(
                helm, cluster.kubeconfig, cluster.webhook_url, cluster.webhook_certs.ca_cert))
        else:
            rendered = yaml.safe_load_all(install.render(
                cluster.kubectl, manifests or install.repo_root() / "manifests"))
            objects = install.for_host_webhook(
                rendered, cluster.webhook_url,
                cluster.webhook_certs.ca_cert.read_bytes())
            install.apply(cluster.kubectl, cluster.kubeconfig, objects)
        cluster.refresh_webhook_token()
        if start_webhook:
            cluster.start_webhook()
    except BaseException:
        cluster.down()
        raise
    return cluster
