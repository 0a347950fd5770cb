"""etcd, kube-apiserver, kube-scheduler and kube-controller-manager as host processes on
127.0.0.1 and free ports, in the manner of controller-runtime's envtest (plus the scheduler and
the controller-manager, which envtest leaves out).

Layout of a cluster directory (everything it needs, so `down` from another process works):
  state.json      ports and the processes (pid + start time) that `stop` ends
  kubeconfig      cluster-admin (client certificate, group system:masters)
  pki/            cluster CA, kube-apiserver serving pair, admin pair, service-account keys
  etcd/           etcd's data
  logs/NAME.log   each component's output
"""

from __future__ import annotations

import json
import ssl
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

from webhook.devcluster import pki as cluster_pki
from webhook.devcluster.processes import (
    ClusterError,
    Process,
    ProcessRecord,
    fetch,
    free_port,
    port_free,
    spawn,
    stop,
    wait_until,
)
from webhook.devcluster.realnodes.network import CONTROL_PLANE_IP

COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
# In 198.18.0.0/15 (the test network) as every address of the cluster: realnodes/network.py.
SERVICE_CIDR = "198.18.16.0/20"
ISSUER = "https://kubernetes.default.svc.cluster.local"
# No kubelet runs: the node lifecycle controller would taint every fake node unreachable once
# its (absent) heartbeat is overdue. Fake nodes are made Ready and untainted by nodes.py.
# With real nodes (kubelets heartbeat) the controller runs: it removes the not-ready taint
# once a node reports Ready and taints a node whose kubelet stops, after NODE_GRACE.
DISABLED_CONTROLLERS = ("node-lifecycle-controller",)
NODE_GRACE = "20s"  # the default, 50 s, makes every stopped-kubelet test wait a minute
# The state's `extra` key that marks a cluster with real nodes (realnodes/): its control plane
# serves the network namespace's node network, not only loopback.
REAL_NODES = "real_nodes"
# The state's `extra` key holding kube-scheduler's percentageOfNodesToScore ("": its default).
SCORE_PERCENTAGE = "percentage_of_nodes_to_score"
# The state's `extra` key holding the controller manager's and scheduler's client QPS ("":
# their defaults, 20 and 50; the burst is twice it).
CLIENT_QPS = "client_qps"
START_TIMEOUT = 90.0


class Ports(TypedDict):
    etcd: int
    etcd_peer: int
    apiserver: int
    scheduler: int
    controller_manager: int


class StateFile(TypedDict):
    bin_dir: str
    ports: Ports
    processes: list[ProcessRecord]
    extra: dict[str, str]


def choose_ports(apiserver: int | None = None) -> Ports:
    """Free ports on 127.0.0.1; a requested apiserver port must be free."""
    if apiserver is not None and not port_free(apiserver):
        raise ClusterError(f"port 127.0.0.1:{apiserver} is already in use: choose another "
                           "(or leave it out to take a free one)")
    return {"etcd": free_port(), "etcd_peer": free_port(),
            "apiserver": apiserver or free_port(), "scheduler": free_port(),
            "controller_manager": free_port()}


@dataclass
class ControlPlane:
    root: Path
    bin_dir: Path
    ports: Ports
    processes: dict[str, Process] = field(default_factory=dict)
    # Other processes started beside the control plane (the webhook), stopped with it.
    extra: dict[str, str] = field(default_factory=dict)

    # ---- layout ---------------------------------------------------------------------------
    @property
    def state_file(self) -> Path:
        return self.root / "state.json"

    @property
    def kubeconfig(self) -> Path:
        return self.root / "kubeconfig"

    @property
    def pki(self) -> cluster_pki.ClusterPki:
        return cluster_pki.ClusterPki.at(self.root / "pki")

    @property
    def server(self) -> str:
        return f"https://127.0.0.1:{self.ports['apiserver']}"

    @property
    def real_nodes(self) -> bool:
        return bool(self.extra.get(REAL_NODES))

    def log(self, name: str) -> Path:
        return self.root / "logs" / f"{name}.log"

    def binary(self, name: str) -> Path:
        path = self.bin_dir / name
        if not path.is_file():
            raise ClusterError(f"{path} is missing: build the control plane first "
                               "(hack/kube/build.sh prints the directory to use)")
        return path

    # ---- state ----------------------------------------------------------------------------
    def save(self) -> None:
        state: StateFile = {"bin_dir": str(self.bin_dir), "ports": self.ports,
                            "processes": [p.record() for p in self.processes.values()],
                            "extra": self.extra}
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2))
        tmp.replace(self.state_file)

    @classmethod
    def load(cls, root: Path) -> ControlPlane | None:
        try:
            data = json.loads((root / "state.json").read_text())
        except (OSError, ValueError):
            return None
        processes = {r["name"]: Process.from_record(r) for r in data["processes"]}
        return cls(root, Path(data["bin_dir"]), data["ports"], processes,
                   dict(data.get("extra", {})))

    def running(self) -> list[Process]:
        return [p for p in self.processes.values() if p.alive()]

    # ---- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Start every component in order, each ready before the next; on any failure stop
        what was started and raise ClusterError with the failing component's log tail."""
        self.root.mkdir(parents=True, exist_ok=True)
        for name in COMPONENTS:
            self.binary(name)
        cluster_pki.ensure(self.root / "pki")
        self._write_kubeconfig()
        try:
            for name in COMPONENTS:
                self.start_component(name)
        except BaseException:
            self.stop()
            raise

    def start_component(self, name: str) -> Process:
        argv, ready, what = self._command(name)
        process = spawn(name, argv, self.log(name))
        self.processes[name] = process
        self.save()
        wait_until(process, ready, START_TIMEOUT, what)
        return process

    def stop_component(self, name: str) -> None:
        process = self.processes.get(name)
        if process is not None:
            stop(process)

    def restart(self, name: str) -> Process:
        """Stop one component and start it again with the same ports and data."""
        self.stop_component(name)
        return self.start_component(name)

    def stop(self) -> None:
        """Stop every process this cluster started, newest first, by pid."""
        for process in reversed(list(self.processes.values())):
            stop(process)
        self.save()

    # ---- commands -------------------------------------------------------------------------
    def _command(self, name: str) -> tuple[list[str], Callable[[], bool], str]:
        p = self.ports
        keys = self.pki
        if name == "etcd":
            client = f"http://127.0.0.1:{p['etcd']}"
            peer = f"http://127.0.0.1:{p['etcd_peer']}"
            return [
                str(self.binary("etcd")), "--name=local", f"--data-dir={self.root / 'etcd'}",
                f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
                f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
                f"--initial-cluster=local={peer}", "--log-level=warn",
                # A throwaway development store: fsync buys nothing and costs seconds.
                "--unsafe-no-fsync",
            ], lambda: b'"health":"true"' in (fetch(f"{client}/health") or b""), "healthy"
        if name == "kube-apiserver":
            return [
                str(self.binary("kube-apiserver")),
                f"--etcd-servers=http://127.0.0.1:{p['etcd']}",
                *self._apiserver_network(),
                f"--secure-port={p['apiserver']}",
                f"--tls-cert-file={keys.apiserver_cert}",
                f"--tls-private-key-file={keys.apiserver_key}",
                f"--client-ca-file={keys.ca_cert}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                "--authorization-mode=Node,RBAC",
                f"--service-account-issuer={ISSUER}",
                f"--service-account-key-file={keys.sa_pub}",
                f"--service-account-signing-key-file={keys.sa_key}",
                "--allow-privileged=true",
                f"--admission-control-config-file={self._admission_config()}",
            ], self._apiserver_ready, "ready (/readyz)"
        if name == "kube-controller-manager":
            controllers = "*" if self.real_nodes else "*," + ",".join(
                f"-{c}" for c in DISABLED_CONTROLLERS)
            grace = [f"--node-monitor-grace-period={NODE_GRACE}", "--node-monitor-period=2s"]
            qps = self.extra.get(CLIENT_QPS)
            limits = [f"--kube-api-qps={qps}", f"--kube-api-burst={2 * int(qps)}"] if qps else []
            return [
                *self._client_component(name, p["controller_manager"]),
                f"--controllers={controllers}", *(grace if self.real_nodes else []), *limits,
                f"--service-account-private-key-file={keys.sa_key}",
                f"--root-ca-file={keys.ca_cert}",
                f"--cluster-signing-cert-file={keys.ca_cert}",
                f"--cluster-signing-key-file={keys.ca_key}",
            ], lambda: _healthz(p["controller_manager"]), "healthy (/healthz)"
        if name == "kube-scheduler":
            argv = self._client_component(name, p["scheduler"])
            percentage, qps = self.extra.get(SCORE_PERCENTAGE), self.extra.get(CLIENT_QPS)
            if percentage or qps:
                argv.append(f"--config={self._scheduler_config(percentage, qps)}")
            return argv, lambda: _healthz(p["scheduler"]), "healthy (/healthz)"
        raise ClusterError(f"unknown component {name}")

    def _apiserver_network(self) -> list[str]:
        if not self.real_nodes:
            # 127.0.0.1 cannot be an Endpoints address: skip the `kubernetes` Service's
            # endpoint reconciler instead of logging its refusal forever. TaintNodesByCondition
            # taints every new Node not-ready for the node lifecycle controller to lift, and
            # that controller is off without kubelets: with the plugin each fake node took a
            # second write, half the API server's CPU of a 5,000-node `cluster up`.
            return ["--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
                    "--endpoint-reconciler-type=none",
                    "--disable-admission-plugins=TaintNodesByCondition"]
        keys = self.pki
        # Inside the cluster's own network namespace: every address there is the cluster's.
        # Pods reach it through the `kubernetes` Service (kube-proxy), kubectl through
        # 127.0.0.1; it reaches kubelets by their node IP (no DNS) with the admin certificate.
        return ["--bind-address=0.0.0.0", f"--advertise-address={CONTROL_PLANE_IP}",
                f"--kubelet-client-certificate={keys.admin_cert}",
                f"--kubelet-client-key={keys.admin_key}",
                "--kubelet-preferred-address-types=InternalIP"]

    def _client_component(self, name: str, port: int) -> list[str]:
        """A component that talks to kube-apiserver as cluster-admin and serves its own
        /healthz on 127.0.0.1:`port`; no leader election (one instance)."""
        kubeconfig = self.kubeconfig
        return [str(self.binary(name)), f"--kubeconfig={kubeconfig}",
                f"--authentication-kubeconfig={kubeconfig}",
                f"--authorization-kubeconfig={kubeconfig}", "--leader-elect=false",
                "--bind-address=127.0.0.1", f"--secure-port={port}"]

    def _scheduler_config(self, percentage: str | None, qps: str | None) -> Path:
        """A KubeSchedulerConfiguration setting percentageOfNodesToScore and the client's
        QPS when given (with --config the scheduler takes its kubeconfig from the file, not
        from the flag)."""
        path = self.root / "scheduler-config.yaml"
        connection: dict[str, Any] = {"kubeconfig": str(self.kubeconfig)}
        if qps:
            connection.update(qps=float(qps), burst=2 * int(qps))
        config: dict[str, Any] = {
            "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
            "clientConnection": connection}
        if percentage:
            config["percentageOfNodesToScore"] = int(percentage)
        path.write_text(json.dumps(config, indent=2))
        return path

    def _admission_config(self) -> Path:
        """An AdmissionConfiguration whose webhook kubeconfig makes kube-apiserver present
        its client certificate (pki.WEBHOOK_CLIENT_NAME) to every admission webhook, as a
        kubeadm operator sets it up for `serve --client-ca` (docs/deploy.md). A webhook that
        asks for no certificate gets none."""
        keys = self.pki
        kubeconfig = self.root / "webhook-admission-kubeconfig.yaml"
        user = {"client-certificate": str(keys.webhook_client_cert),
                "client-key": str(keys.webhook_client_key)}
        # "*": any webhook host (a URL's host or a Service's DNS name).
        kubeconfig.write_text(json.dumps({
            "apiVersion": "v1", "kind": "Config", "users": [{"name": "*", "user": user}]}))
        webhook = {"apiVersion": "apiserver.config.k8s.io/v1",
                   "kind": "WebhookAdmissionConfiguration", "kubeConfigFile": str(kubeconfig)}
        path = self.root / "admission-config.yaml"
        path.write_text(json.dumps({
            "apiVersion": "apiserver.config.k8s.io/v1", "kind": "AdmissionConfiguration",
            "plugins": [{"name": plugin, "configuration": webhook} for plugin in
                        ("MutatingAdmissionWebhook", "ValidatingAdmissionWebhook")]}, indent=2))
        return path

    def _apiserver_ready(self) -> bool:
        return fetch(f"{self.server}/readyz", self.tls_context()) == b"ok"

    def tls_context(self) -> ssl.SSLContext:
        """Verifies the API server and presents the admin certificate."""
        context = ssl.create_default_context(cafile=str(self.pki.ca_cert))
        context.load_cert_chain(str(self.pki.admin_cert), str(self.pki.admin_key))
        return context

    def _write_kubeconfig(self) -> None:
        keys = self.pki
        write_kubeconfig(self.kubeconfig, self.server, keys.ca_cert, user={
            "client-certificate": str(keys.admin_cert), "client-key": str(keys.admin_key)})


def write_kubeconfig(path: Path, server: str, ca: Path, user: dict[str, str],
                     name: str = "layer-locality-local") -> None:
    """A one-context kubeconfig (JSON is YAML); `user` holds client-certificate/-key or token."""
    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": name, "cluster": {"server": server,
                                                "certificate-authority": str(ca)}}],
        "users": [{"name": name, "user": user}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(config, indent=2))
    tmp.chmod(0o600)
    tmp.replace(path)


def _healthz(port: int) -> bool:
    # The scheduler and the controller-manager serve /healthz with a self-signed certificate
    # they make at start; this probe on loopback only asks whether they are up.
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return fetch(f"https://127.0.0.1:{port}/healthz", context) == b"ok"
