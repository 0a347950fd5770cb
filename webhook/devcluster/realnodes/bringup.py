"""Bring real nodes up beside a control plane that runs in the cluster's network namespace.

Runs *inside* that namespace (`layer-locality cluster up --kubelets N` re-runs itself there
through nsenter): it refuses to touch anything while it still shares the host's network or
mount namespace. In order:

1. the node network: `lo` up, a bridge (no ports) holding 198.18.0.1 and every node IP, the
   Service range routed to it; no default route, no link out;
2. in the mount namespace: a /run of its own, a resolv.conf naming no server, and the
   kubelet's sysctls covered (sysctls.py);
3. the registry, with a registry bandwidth the throttle in front of it (throttle.py), and
   the pause image pushed to it (built here from hack/node's pause binary);
4. per node: a mount namespace of its own with its own /run, /var/log and /var/lib, a cgroup
   root, a
   client certificate, containerd, then the kubelet;
5. kube-proxy, once;
6. every node Ready (its own heartbeats; the node lifecycle controller lifts the not-ready
   taint)."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webhook.devcluster import install
from webhook.devcluster import pki as cluster_pki
from webhook.devcluster.controlplane import REAL_NODES, ControlPlane, write_kubeconfig
from webhook.devcluster.processes import (
    ClusterError,
    Process,
    fetch,
    free_port,
    listening,
    spawn,
    wait_until,
)
from webhook.devcluster.realnodes import cgroups, containerd, kubelet, kubeproxy, oci, sysctls
from webhook.devcluster.realnodes.namespaces import (
    NETNS_HOLDER,
    enter,
    mount,
    namespace_id,
    start_holder,
)
from webhook.devcluster.realnodes.network import (
    CONTROL_PLANE_IP,
    NODE_INTERFACE,
    NODE_NETWORK,
    REGISTRY_PORT,
    SERVICE_CIDR,
    NodeAddresses,
    in_test_network,
    node_addresses,
    registry_endpoint,
    registry_host,
)
from webhook.devcluster.realnodes.registry import configuration as registry_configuration
from webhook.devcluster.realnodes.registry import registry_binary
from webhook.devcluster.realnodes.throttle import REGISTRY_BANDWIDTH, THROTTLE

log = logging.getLogger(__name__)

# Inside a node's mount namespace: path -> the node directory's subdirectory bound over it.
NODE_MOUNTS = {"/run": "run", "/var/log": "log", "/var/lib": "var-lib"}
CLUSTER_ID = "cluster_id"
PAUSE_REPOSITORY = "ll/pause"
PAUSE_TAG = "3.10"
ZONES = ("zone-a", "zone-b", "zone-c")
READY_TIMEOUT = 120.0
RUNC = "runc"


@dataclass(frozen=True, slots=True)
class NodeRecord:
    """What teardown and the tests need to know of a real node (kept in the state file)."""

    name: str
    ip: str
    pod_cidr: str
    zone: str
    cgroup_root: str
    directory: str

    def to_json(self) -> dict[str, str]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, str]) -> NodeRecord:
        return cls(**data)


def recorded_nodes(plane: ControlPlane) -> list[NodeRecord]:
    return [NodeRecord.from_json(n) for n in json.loads(plane.extra.get(REAL_NODES) or "[]")]


def node_names(count: int) -> list[str]:
    return [f"node-{i}" for i in range(1, count + 1)]


def require_private_namespaces() -> None:
    """Refuse to configure anything from the host's own network or mount namespace."""
    for kind in ("net", "mnt"):
        if namespace_id(os.getpid(), kind) == namespace_id(1, kind):
            raise ClusterError(f"refusing to set up real nodes in the host's {kind} namespace: "
                               "`layer-locality cluster up --kubelets N` runs this part inside "
                               "a namespace of its own")


def _ip(*args: str) -> None:
    result = subprocess.run(["ip", *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise ClusterError(f"ip {' '.join(args)}: {result.stderr.strip()}")


def setup_network(nodes: Sequence[NodeAddresses]) -> None:
    addresses = [CONTROL_PLANE_IP, *(n.ip for n in nodes)]
    for address in addresses:
        if not in_test_network(address):  # the plan is fixed; this guards a change to it
            raise ClusterError(f"{address} is outside the test network 198.18.0.0/15")
    _ip("link", "set", "lo", "up")
    _ip("link", "add", NODE_INTERFACE, "type", "bridge")
    for address in addresses:
        _ip("addr", "add", f"{address}/{NODE_NETWORK.prefixlen}", "dev", NODE_INTERFACE)
    _ip("link", "set", NODE_INTERFACE, "up")
    # Local processes (the API server calling a webhook's Service) need a route to a ClusterIP
    # before kube-proxy's OUTPUT rule rewrites it to a pod.
    _ip("route", "add", SERVICE_CIDR, "dev", NODE_INTERFACE)


def _binary(directory: Path, name: str) -> Path:
    path = directory / name
    if not path.is_file():
        raise ClusterError(f"{path} is missing: build the node runtime first "
                           "(hack/node/build.sh prints the directory to use)")
    return path


def require_registry_binary() -> Path:
    found = registry_binary()
    if found is not None:
        return found
    raise ClusterError("docker-registry (CNCF distribution) is not installed: "
                       "apt-get install -y docker-registry (make system-deps does)")


def start_registry(plane: ControlPlane, host: str = "") -> Process:
    """The registry on `host` only, or on every address of the namespace ("")."""
    directory = plane.root / "registry"
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "config.yml"
    config.write_text(json.dumps(registry_configuration(directory / "storage", host), indent=2))
    process = spawn("registry", [str(require_registry_binary()), "serve", str(config)],
                    plane.log("registry"), env={"PATH": "/usr/bin:/bin"})
    plane.processes["registry"] = process
    plane.save()
    wait_until(process, lambda: fetch(f"http://{registry_host()}/v2/") is not None, 30.0,
               "serving /v2/")
    return process


def start_throttle(plane: ControlPlane, nodes: Sequence[NodeAddresses], rate: float) -> Process:
    """The throttle on every node's registry endpoint, forwarding to the registry on
    198.18.0.1 (which then must listen there only); accepting connections when this returns."""
    if not rate > 0:
        raise ClusterError(f"a registry bandwidth must be positive, got {rate!r} bytes/s")
    listen = [registry_endpoint(node) for node in nodes]
    argv = [sys.executable, "-m", "webhook", "cluster", "throttle",
            *(arg for endpoint in listen for arg in ("--listen", endpoint)),
            "--upstream", registry_host(), "--rate", str(int(rate))]
    process = spawn(THROTTLE, argv, plane.log(THROTTLE), cwd=install.repo_root())
    plane.processes[THROTTLE] = process
    plane.extra[REGISTRY_BANDWIDTH] = str(int(rate))
    plane.save()
    # A probe connection per node: the summary's connection counts include it.
    wait_until(process, lambda: all(listening(REGISTRY_PORT, node.ip) for node in nodes), 30.0,
               f"listening on {', '.join(listen)}")
    return process


def _unix_socket_answers(directory: Path, name: str) -> bool:
    """Connect through /proc/self/fd/N/NAME: a socket path is limited to 107 bytes, which a
    cluster under a deep directory (pytest's) exceeds."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.settimeout(1)
            return sock.connect_ex(f"/proc/self/fd/{fd}/{name}") == 0
    finally:
        os.close(fd)


def start_node(plane: ControlPlane, node: NodeAddresses, zone: str, kube_bin: Path,
               node_bin: Path) -> NodeRecord:
    root = plane.root
    node_dir = root / "nodes" / node.name
    for sub in NODE_MOUNTS.values():
        (node_dir / sub).mkdir(parents=True, exist_ok=True)
    # Unique per cluster (two clusters on one machine never share a root), and made fresh.
    cgroup_root = f"/layer-locality-{plane.extra[CLUSTER_ID]}-{node.name}"
    if cgroups.existing(cgroup_root):
        raise ClusterError(f"cgroup {cgroup_root} exists already: another cluster's?")
    record = NodeRecord(node.name, node.ip, node.pod_cidr, zone, cgroup_root, str(node_dir))
    records = [*recorded_nodes(plane), record]
    plane.extra[REAL_NODES] = json.dumps([r.to_json() for r in records])
    plane.save()  # before anything is made: teardown finds it even if the rest fails
    cgroups.create(cgroup_root, owner=plane.processes[NETNS_HOLDER].pid)
    holder = start_holder(f"mounts-{node.name}", plane.log(f"mounts-{node.name}"), net=False)
    plane.processes[holder.name] = holder
    plane.save()
    # The node's own /run, /var/log and /var/lib: containerd's default socket, runc's state,
    # pod logs, the kubelet's root (/var/lib/kubelet: short socket paths, its device-plugin
    # socket per node), the CNI cache (/var/lib/cni). /var/lib is a directory of the node's:
    # the host's own stays untouched and unseen there.
    for target, sub in NODE_MOUNTS.items():
        mount("--bind", str(node_dir / sub), target, prefix=enter(holder, net=False))
    # The whole prefix, the cluster's network namespace included, although this process is in
    # it already: the recorded argv then restarts the component from anywhere (a test does).
    in_node = [*enter(plane.processes[NETNS_HOLDER], mount=False), *enter(holder, net=False)]
    sandbox = f"{registry_host()}/{PAUSE_REPOSITORY}:{PAUSE_TAG}"
    runc = shutil.which(RUNC) or shutil.which(RUNC, path="/usr/sbin:/usr/bin")
    if runc is None:
        raise ClusterError("runc is not installed: apt-get install -y runc (make system-deps)")
    config = containerd.write(node_dir, node, sandbox, node_bin, Path(runc))
    # The shim is found on PATH: the pinned one before any other (Debian's 1.6 shim).
    env = {"PATH": f"{node_bin}:/usr/sbin:/usr/bin:/sbin:/bin"}
    runtime = spawn(f"containerd-{node.name}",
                    [*in_node, str(_binary(node_bin, "containerd")), f"--config={config}"],
                    plane.log(f"containerd-{node.name}"), env=env)
    plane.processes[runtime.name] = runtime
    plane.save()
    wait_until(runtime, lambda: _unix_socket_answers(node_dir / "run" / "containerd",
                                                     containerd.SOCKET.name), 60.0,
               f"serving {containerd.SOCKET}")
    keys = plane.pki
    cluster_pki.node_client(root / "pki", node.name, node_dir / "kubelet-client.crt",
                            node_dir / "kubelet-client.key")
    write_kubeconfig(node_dir / "kubelet.kubeconfig", plane.server, keys.ca_cert,
                     user={"client-certificate": str(node_dir / "kubelet-client.crt"),
                           "client-key": str(node_dir / "kubelet-client.key")},
                     name=f"kubelet-{node.name}")
    (node_dir / "resolv.conf").write_text(kubelet.RESOLV_CONF)
    (node_dir / "kubelet.yaml").write_text(json.dumps(
        kubelet.configuration(node, node_dir, keys.ca_cert, cgroup_root), indent=2))
    agent = spawn(f"kubelet-{node.name}",
                  [*in_node, *kubelet.argv(_binary(kube_bin, "kubelet"), node, node_dir, zone)],
                  plane.log(f"kubelet-{node.name}"), env=env)
    plane.processes[agent.name] = agent
    plane.save()
    return record


def start_kube_proxy(plane: ControlPlane, kube_bin: Path, hostname: str) -> Process:
    config = plane.root / "kube-proxy.yaml"
    metrics, healthz = free_port(), free_port()
    config.write_text(json.dumps(kubeproxy.configuration(plane.kubeconfig, hostname, metrics,
                                                         healthz), indent=2))
    process = spawn("kube-proxy", [str(_binary(kube_bin, "kube-proxy")), f"--config={config}"],
                    plane.log("kube-proxy"), env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"})
    plane.processes["kube-proxy"] = process
    plane.save()
    wait_until(process, lambda: fetch(f"http://127.0.0.1:{healthz}/healthz") is not None,
               60.0, "healthy (/healthz)")
    return process


def wait_ready(plane: ControlPlane, names: Sequence[str], list_nodes: Callable[[], Any],
               timeout: float = READY_TIMEOUT) -> None:
    """Every named node Ready and free of the not-ready taint; a kubelet that dies fails fast
    with its log's tail."""
    deadline = time.monotonic() + timeout
    pending = set(names)
    while True:
        for node in list_nodes().items:
            conditions = {c.type: c.status for c in (node.status.conditions or [])}
            taints = {t.key for t in (node.spec.taints or [])}
            if conditions.get("Ready") == "True" and \
                    "node.kubernetes.io/not-ready" not in taints:
                pending.discard(node.metadata.name)
        if not pending:
            return
        for name in pending:
            process = plane.processes.get(f"kubelet-{name}")
            if process is not None and not process.alive():
                raise ClusterError(f"kubelet of {name} exited; the end of {process.log}:\n"
                                   f"{process.tail(30)}")
        if time.monotonic() > deadline:
            raise ClusterError(f"nodes not Ready after {timeout:.0f} s: "
                               f"{', '.join(sorted(pending))}")
        time.sleep(0.5)


def planned_nodes(count: int) -> list[NodeAddresses]:
    return [node_addresses(i, name) for i, name in enumerate(node_names(count), start=1)]


def cover_host_files(root: Path) -> None:
    """In the cluster's mount namespace: a /run of its own (a tmpfs: runtime sockets and locks
    never land in the host's /run), and a resolv.conf naming no server (the namespace has no
    way out, and no component should even try the host's resolver)."""
    mount("-t", "tmpfs", "-o", "mode=755,size=64m", "layer-locality-run", "/run")
    target = Path(os.path.realpath("/etc/resolv.conf"))
    if target.is_relative_to("/run"):  # a link into /run (systemd-resolved): now our tmpfs
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(kubelet.RESOLV_CONF)
        return
    resolv = root / "resolv.conf"
    resolv.write_text(kubelet.RESOLV_CONF)
    mount("--bind", str(resolv), str(target))


def prepare_namespace(root: Path, count: int) -> None:
    """Steps 1 and 2, before the control plane starts (a new namespace's `lo` is down)."""
    require_private_namespaces()
    setup_network(planned_nodes(count))
    cover_host_files(root)
    sysctls.cover(root / "sysctls")


def start_nodes(plane: ControlPlane, count: int, kube_bin: Path, node_bin: Path, *,
                registry_bandwidth: float | None = None) -> None:
    """Steps 3 to 6, on a control plane already started in the prepared namespace.
    `registry_bandwidth`: bytes per second each node may download from the registry (None:
    no limit, and no throttle)."""
    require_private_namespaces()
    removed, left = cgroups.sweep()  # roots a killed run left (no teardown ran)
    for name in removed:
        log.info("removed the cgroup root %s: its cluster ended without a teardown", name)
    for problem in left:
        log.warning("cgroup root left as it is: %s", problem)
    nodes = planned_nodes(count)
    if registry_bandwidth is None:
        start_registry(plane)
    else:
        # The node IPs' port 5000 is the throttle's: the registry keeps 198.18.0.1 alone.
        start_registry(plane, CONTROL_PLANE_IP)
        start_throttle(plane, nodes, registry_bandwidth)
    oci.push(f"http://{registry_host()}",
             oci.pause_image(_binary(node_bin, "pause"), PAUSE_REPOSITORY, PAUSE_TAG))
    for node in nodes:
        start_node(plane, node, ZONES[(node.index - 1) % len(ZONES)], kube_bin, node_bin)
    start_kube_proxy(plane, kube_bin, nodes[0].name)
    from kubernetes import client, config

    with config.new_client_from_config(config_file=str(plane.kubeconfig)) as api:  # type: ignore[no-untyped-call]
        wait_ready(plane, [n.name for n in nodes], client.CoreV1Api(api).list_node)
