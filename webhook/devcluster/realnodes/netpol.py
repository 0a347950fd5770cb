"""NetworkPolicy enforcement for a cluster with real nodes: kube-network-policies' controller
(built by hack/netpol/build.sh), once for the whole cluster, as kube-proxy is: the nodes share
one network namespace, so one instance judges every node's pods.

The controller's own nftables `queue` rule needs CONFIG_NFT_QUEUE, which this machine's kernel
lacks; its syncs fail (logged) while its nfqueue listener works. An iptables rule in the
cluster's namespace feeds that queue instead: the first packet of every pod-to-pod connection
(FORWARD, source and destination in the pod range). Traffic from the namespace's own processes
to pods (the API server calling a webhook, the kubelets' probes) is OUTPUT, never judged.
Without a listener the queue drops (no --queue-bypass), so the rule is added only once the
enforcer listens, and deleted before it stops.

Callable from anywhere (a test on the host, or bring-up inside the namespace): the rule and the
process enter the cluster's namespaces through the holder, like the kubelets' recorded argv."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from webhook.devcluster.controlplane import ControlPlane
from webhook.devcluster.processes import ClusterError, Process, spawn, stop, wait_until
from webhook.devcluster.realnodes.bringup import recorded_nodes
from webhook.devcluster.realnodes.namespaces import NETNS_HOLDER, enter
from webhook.devcluster.realnodes.network import POD_CIDR

NETPOL = "netpol"  # its name in plane.processes, and its log's
BINARY = "kube-network-policies"
QUEUE = 100
CHAIN = "FORWARD"
READY_TIMEOUT = 60.0
PATH = "/usr/sbin:/usr/bin:/sbin:/bin"


def forward_rule(pod_cidr: str = POD_CIDR, queue: int = QUEUE) -> list[str]:
    """The rule after `iptables -I FORWARD 1` (or -C/-D FORWARD): a new pod-to-pod connection's
    packets go to nfqueue `queue` until the enforcer's verdict (later packets are conntrack's)."""
    return ["-s", pod_cidr, "-d", pod_cidr, "-m", "conntrack", "--ctstate", "NEW",
            "-j", "NFQUEUE", "--queue-num", str(queue)]


def _holder(plane: ControlPlane) -> Process | None:
    holder = plane.processes.get(NETNS_HOLDER)
    return holder if holder is not None and holder.alive() else None


def _iptables(holder: Process, *args: str) -> subprocess.CompletedProcess[str]:
    """iptables in the cluster's network and mount namespaces (kube-proxy's /run, so its
    xtables lock too)."""
    iptables = shutil.which("iptables") or shutil.which("iptables", path=PATH)
    if iptables is None:
        raise ClusterError("iptables is not installed: apt-get install -y iptables")
    try:
        return subprocess.run([*enter(holder), iptables, "-w", *args], capture_output=True,
                              text=True, check=False, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ClusterError(f"iptables {' '.join(args[:2])}: {exc}") from exc


def _rule_present(holder: Process, rule: list[str]) -> bool:
    result = _iptables(holder, "-C", CHAIN, *rule)
    if result.returncode not in (0, 1):  # 1: no such rule
        raise ClusterError(f"iptables -C {CHAIN}: {result.stderr.strip()}")
    return result.returncode == 0


def _queue_bound(pid: int, queue: int) -> bool:
    """Whether a listener is bound to `queue` in `pid`'s network namespace."""
    try:
        lines = Path(f"/proc/{pid}/net/netfilter/nfnetlink_queue").read_text().splitlines()
    except OSError:
        return False
    return any(line.split()[:1] == [str(queue)] for line in lines)


def start_enforcer(plane: ControlPlane, bin_dir: Path, queue: int = QUEUE) -> Process:
    """Start the enforcer (bin_dir: what hack/netpol/build.sh prints) as cluster-admin, wait
    until it listens on `queue`, then add the rule feeding it; recorded as "netpol"."""
    holder = _holder(plane)
    if holder is None:
        raise ClusterError("the cluster's network namespace holder is not running")
    old = plane.processes.get(NETPOL)
    if old is not None and old.alive():
        raise ClusterError(f"the enforcer runs already (pid {old.pid})")
    binary = bin_dir / BINARY
    if not binary.is_file():
        raise ClusterError(f"{binary} is missing: hack/netpol/build.sh prints the directory")
    nodes = recorded_nodes(plane)
    # Any node: the name only selects which pod events re-run the (failing) nftables sync.
    hostname = nodes[0].name if nodes else "node-1"
    # -v=2: a line per verdict (only the first packet of a pod-to-pod connection is judged).
    argv = [*enter(holder), str(binary), f"--kubeconfig={plane.kubeconfig}",
            f"--nfqueue-id={queue}", f"--hostname-override={hostname}", "-v=2"]
    process = spawn(NETPOL, argv, plane.log(NETPOL), env={"PATH": PATH})
    plane.processes[NETPOL] = process
    plane.save()
    # nsenter execs the binary (no fork for net and mount): the pid is the enforcer's. It opens
    # the queue only after its informers have synced.
    wait_until(process, lambda: _queue_bound(process.pid, queue), READY_TIMEOUT,
               f"listening on nfqueue {queue}")
    rule = forward_rule(POD_CIDR, queue)
    if not _rule_present(holder, rule):
        result = _iptables(holder, "-I", CHAIN, "1", *rule)
        if result.returncode != 0:
            stop(process)
            raise ClusterError(f"iptables -I {CHAIN}: {result.stderr.strip()}")
    return process


def stop_enforcer(plane: ControlPlane, queue: int = QUEUE) -> None:
    """Delete the rule (every copy), then stop the enforcer by pid; idempotent. Without the
    namespace's holder there is no rule left to delete (the namespace went with it)."""
    holder = _holder(plane)
    if holder is not None:
        rule = forward_rule(POD_CIDR, queue)
        while _rule_present(holder, rule):
            result = _iptables(holder, "-D", CHAIN, *rule)
            if result.returncode != 0:
                raise ClusterError(f"iptables -D {CHAIN}: {result.stderr.strip()}")
    process = plane.processes.get(NETPOL)
    if process is not None:
        stop(process)
