"""The address plan of a cluster with real nodes, and the guard that keeps its traffic inside
the test network: every address is in 198.18.0.0/15 (RFC 2544, reserved for network testing),
inside a network namespace the cluster creates with no link out of it.

  198.18.0.0/24   the node network, on one bridge with no ports: .1 the control plane and the
                  registry, .11, .12, ... the nodes
  198.18.16.0/20  the Service range (198.18.16.1 is the `kubernetes` Service)
  198.19.0.0/16   pods: node N (1-based) gets 198.19.N.0/24 on a bridge of its own

Pure: no I/O, so the guard is unit-tested as a function."""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

TEST_NETWORK = ipaddress.ip_network("198.18.0.0/15")
LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
NODE_NETWORK = ipaddress.ip_network("198.18.0.0/24")
SERVICE_CIDR = "198.18.16.0/20"
POD_CIDR = "198.19.0.0/16"
CONTROL_PLANE_IP = "198.18.0.1"
KUBERNETES_SERVICE_IP = "198.18.16.1"
REGISTRY_PORT = 5000
FIRST_NODE_HOST = 11
MAX_NODES = 200  # node IPs .11-.210 and pod subnets 198.19.1-200.0/24
NODE_INTERFACE = "ll-nodes"


def in_test_network(address: str) -> bool:
    """Whether traffic to `address` stays on this machine's test network: loopback, or
    198.18.0.0/15 (reachable only inside the cluster's namespace). Anything else, or not an
    IPv4 address at all (a name would be looked up), is refused."""
    try:
        ip = ipaddress.IPv4Address(address)
    except ValueError:
        return False
    return ip in LOOPBACK or ip in TEST_NETWORK


@dataclass(frozen=True, slots=True)
class NodeAddresses:
    """What one real node is given: its name, node IP, pod subnet and CNI bridge."""

    index: int  # 1-based
    name: str
    ip: str
    pod_cidr: str
    gateway: str
    bridge: str


def node_addresses(index: int, name: str) -> NodeAddresses:
    if not 1 <= index <= MAX_NODES:
        raise ValueError(f"node index {index} is outside 1..{MAX_NODES}")
    ip = str(NODE_NETWORK.network_address + FIRST_NODE_HOST + index - 1)
    subnet = ipaddress.ip_network(f"198.19.{index}.0/24")
    return NodeAddresses(index, name, ip, str(subnet), str(subnet.network_address + 1),
                         f"ll-cni{index}")


def registry_endpoint(node: NodeAddresses) -> str:
    """The registry as node `node` reaches it: the registry listens on every address of the
    namespace, and each node's containerd talks to it at the node's own IP, so the registry's
    access log tells the nodes apart by the request's Host."""
    return f"{node.ip}:{REGISTRY_PORT}"


def registry_host() -> str:
    """The registry's name in image references: what every node, pod and the webhook use."""
    return f"{CONTROL_PLANE_IP}:{REGISTRY_PORT}"
