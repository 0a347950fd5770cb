"""One kubelet per node, as a real machine runs it, with what this machine needs
(../shared/notes/real-nodes.md):

- cgroup v1 is accepted (`failCgroupV1: false`; kubelet 1.37 refuses v1 otherwise), driver
  cgroupfs, a cgroup root per node (cgroups.py);
- the host's sysctls are left alone: `protectKernelDefaults: false` makes the kubelet set
  vm.overcommit_memory, kernel.panic and kernel.panic_on_oops, so the cluster's mount
  namespace shows it files that already hold those values (sysctls.py), and it writes there;
- no iptables chains of its own (`makeIPTablesUtilChains: false`: kube-proxy owns iptables in
  the namespace), swap tolerated, eviction and image GC thresholds low enough for a shared disk.

It authenticates as `system:node:NAME` (group system:nodes) with a client certificate from the
cluster CA, so the Node authorizer and the NodeRestriction admission plugin judge it as they
would a real node, and pods on it get kubelet-issued, node-bound ServiceAccount tokens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from webhook.devcluster.realnodes.containerd import SOCKET
from webhook.devcluster.realnodes.network import NodeAddresses

KUBELET_PORT = 10250  # every node has its own IP, so each kubelet can take the usual port
HEALTHZ_PORT = 10248


def configuration(node: NodeAddresses, node_dir: Path, ca_cert: Path, cgroup_root: str,
                  *, image_gc: bool = False) -> dict[str, Any]:
    """The KubeletConfiguration (kubelet.config.k8s.io/v1beta1) of one node."""
    endpoint = f"unix://{SOCKET}"
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration",
        "address": node.ip, "port": KUBELET_PORT, "readOnlyPort": 0,
        "healthzBindAddress": node.ip, "healthzPort": HEALTHZ_PORT,
        "authentication": {"anonymous": {"enabled": False}, "webhook": {"enabled": True},
                           "x509": {"clientCAFile": str(ca_cert)}},
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": endpoint, "imageServiceEndpoint": endpoint,
        "failCgroupV1": False, "cgroupDriver": "cgroupfs", "cgroupRoot": cgroup_root,
        "failSwapOn": False, "protectKernelDefaults": False, "makeIPTablesUtilChains": False,
        "enforceNodeAllocatable": ["pods"],
        "podCIDR": node.pod_cidr,
        # The images kubelet may pull at once, as containerd pulls layers in parallel anyway.
        "serializeImagePulls": False,
        "resolvConf": str(node_dir / "resolv.conf"),
        "podLogsDir": "/var/log/pods",  # the node's own /var/log (its mount namespace)
        "evictionHard": {"memory.available": "64Mi", "nodefs.available": "1%",
                         "imagefs.available": "1%", "nodefs.inodesFree": "1%"},
        # Images stay until the disk is full unless a test is about image GC.
        "imageGCHighThresholdPercent": 85 if image_gc else 100,
        "imageGCLowThresholdPercent": 80 if image_gc else 99,
        "nodeStatusMaxImages": 50,
        "registerNode": True,
        "rotateCertificates": False, "serverTLSBootstrap": False,
        "shutdownGracePeriod": "0s",
    }


def argv(binary: Path, node: NodeAddresses, node_dir: Path, zone: str) -> list[str]:
    return [
        str(binary), f"--config={node_dir / 'kubelet.yaml'}",
        f"--kubeconfig={node_dir / 'kubelet.kubeconfig'}",
        # The defaults, in the node's own /var/lib (its mount namespace): short unix socket
        # paths, and the device-plugin socket the kubelet puts there whatever --root-dir says.
        "--root-dir=/var/lib/kubelet", "--cert-dir=/var/lib/kubelet/pki",
        f"--hostname-override={node.name}", f"--node-ip={node.ip}",
        f"--node-labels=topology.kubernetes.io/zone={zone}",
    ]


RESOLV_CONF = ("# The local cluster has no DNS and its network namespace no way out: pods look\n"
               "# nothing up (ClusterFirst falls back to this file).\noptions ndots:1\n")
