"""The kubelet's and kube-proxy's configurations for real nodes (realnodes/kubelet.py,
realnodes/kubeproxy.py): what each must hold to run on this machine without touching it —
cgroup v1 accepted with cgroupfs, every listening address inside the test network or loopback,
no anonymous or read-only access, the host's sysctls, iptables utility chains, OOM scores and
conntrack table left alone."""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Any

import pytest

from webhook.devcluster.realnodes import kubelet, kubeproxy
from webhook.devcluster.realnodes.bringup import NODE_MOUNTS
from webhook.devcluster.realnodes.network import POD_CIDR, NodeAddresses, node_addresses

RFC2544 = ipaddress.IPv4Network("198.18.0.0/15")
LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
CONTAINERD = "unix:///run/containerd/containerd.sock"


def contained(address: str) -> bool:
    ip = ipaddress.IPv4Address(address)
    return ip in RFC2544 or ip in LOOPBACK


@pytest.fixture
def node() -> NodeAddresses:
    return node_addresses(7, "node-7")


def kubelet_config(node: NodeAddresses, tmp_path: Path, **kwargs: bool) -> dict[str, Any]:
    return kubelet.configuration(node, tmp_path / node.name, tmp_path / "pki" / "ca.crt",
                                 "/layer-locality-run-node-7", **kwargs)


def test_the_kubelet_runs_on_cgroup_v1_with_cgroupfs(tmp_path: Path,
                                                     node: NodeAddresses) -> None:
    config = kubelet_config(node, tmp_path)
    assert config["kind"] == "KubeletConfiguration"
    assert config["apiVersion"] == "kubelet.config.k8s.io/v1beta1"
    assert config["failCgroupV1"] is False
    assert config["cgroupDriver"] == "cgroupfs"
    assert config["cgroupRoot"] == "/layer-locality-run-node-7"


def test_the_cgroup_root_is_the_one_given(tmp_path: Path, node: NodeAddresses) -> None:
    config = kubelet.configuration(node, tmp_path, tmp_path / "ca.crt", "/elsewhere-x")
    assert config["cgroupRoot"] == "/elsewhere-x"


def test_the_kubelet_listens_on_the_node_ip_only(tmp_path: Path, node: NodeAddresses) -> None:
    config = kubelet_config(node, tmp_path)
    assert config["address"] == node.ip
    assert config["healthzBindAddress"] == node.ip
    listening = {k: v for k, v in config.items() if k.lower().endswith("address")}
    assert {"address", "healthzBindAddress"} <= set(listening)
    for key, address in listening.items():
        assert contained(address), key
    assert config["readOnlyPort"] == 0


def test_every_node_listens_inside_the_test_network(tmp_path: Path) -> None:
    for index in (1, 100, 200):
        config = kubelet_config(node_addresses(index, f"n{index}"), tmp_path)
        assert contained(config["address"]) and contained(config["healthzBindAddress"])


def test_the_kubelet_authenticates_clients_by_certificate(tmp_path: Path,
                                                          node: NodeAddresses) -> None:
    authentication = kubelet_config(node, tmp_path)["authentication"]
    assert authentication["anonymous"] == {"enabled": False}
    assert authentication["x509"] == {"clientCAFile": str(tmp_path / "pki" / "ca.crt")}


def test_the_kubelet_talks_to_its_nodes_containerd(tmp_path: Path,
                                                   node: NodeAddresses) -> None:
    config = kubelet_config(node, tmp_path)
    assert config["containerRuntimeEndpoint"] == CONTAINERD
    assert config["imageServiceEndpoint"] == CONTAINERD
    assert config["podCIDR"] == node.pod_cidr


def test_the_kubelet_leaves_sysctls_and_iptables_alone(tmp_path: Path,
                                                       node: NodeAddresses) -> None:
    config = kubelet_config(node, tmp_path)
    assert config["protectKernelDefaults"] is False
    assert config["makeIPTablesUtilChains"] is False
    assert Path(config["resolvConf"]).is_relative_to(tmp_path / node.name)


def test_images_stay_until_the_disk_is_full(tmp_path: Path, node: NodeAddresses) -> None:
    config = kubelet_config(node, tmp_path)
    assert (config["imageGCHighThresholdPercent"], config["imageGCLowThresholdPercent"]) == (
        100, 99)


def test_image_gc_on_request_collects_before_the_disk_is_full(
        tmp_path: Path, node: NodeAddresses) -> None:
    config = kubelet_config(node, tmp_path, image_gc=True)
    high, low = config["imageGCHighThresholdPercent"], config["imageGCLowThresholdPercent"]
    assert 0 <= low < high < 100


def flags(argv: list[str]) -> dict[str, str]:
    parsed = {}
    for arg in argv:
        assert arg.startswith("--") and "=" in arg, arg
        key, _, value = arg[2:].partition("=")
        assert key not in parsed, key
        parsed[key] = value
    return parsed


def test_kubelet_argv(tmp_path: Path, node: NodeAddresses) -> None:
    node_dir = tmp_path / node.name
    argv = kubelet.argv(Path("/opt/kube/kubelet"), node, node_dir, "zone-b")
    assert argv[0] == "/opt/kube/kubelet"
    parsed = flags(argv[1:])
    assert parsed["config"] == str(node_dir / "kubelet.yaml")
    assert parsed["kubeconfig"] == str(node_dir / "kubelet.kubeconfig")
    assert parsed["hostname-override"] == node.name
    assert parsed["node-ip"] == node.ip
    labels = dict(label.split("=", 1) for label in parsed["node-labels"].split(","))
    assert labels == {"topology.kubernetes.io/zone": "zone-b"}
    # Under /var/lib, which each node's mount namespace binds to a directory of its own
    # (bringup.NODE_MOUNTS): short socket paths, state per node.
    for key in ("root-dir", "cert-dir"):
        assert Path(parsed[key]).is_relative_to("/var/lib"), key
    assert "/var/lib" in NODE_MOUNTS
    assert parsed["root-dir"] != parsed["cert-dir"]


def test_two_nodes_keep_their_state_apart(tmp_path: Path) -> None:
    one, two = node_addresses(1, "node-1"), node_addresses(2, "node-2")
    a = flags(kubelet.argv(Path("k"), one, tmp_path / "node-1", "zone-a")[1:])
    b = flags(kubelet.argv(Path("k"), two, tmp_path / "node-2", "zone-a")[1:])
    for key in ("config", "kubeconfig", "hostname-override", "node-ip"):
        assert a[key] != b[key], key
    # The same path in each node's own mount namespace, where /var/lib is the node's directory.
    assert a["root-dir"] == b["root-dir"] == "/var/lib/kubelet"


def proxy_config(tmp_path: Path) -> dict[str, Any]:
    return kubeproxy.configuration(tmp_path / "kubeconfig", "node-1", 41001, 41002)


def test_kube_proxy_serves_the_pod_range_with_iptables(tmp_path: Path) -> None:
    config = proxy_config(tmp_path)
    assert config["kind"] == "KubeProxyConfiguration"
    assert config["mode"] == "iptables"
    assert config["clusterCIDR"] == POD_CIDR
    assert ipaddress.IPv4Network(config["clusterCIDR"]).subnet_of(RFC2544)
    assert config["hostnameOverride"] == "node-1"
    assert config["clientConnection"]["kubeconfig"] == str(tmp_path / "kubeconfig")


def test_kube_proxy_listens_on_loopback_at_the_ports_given(tmp_path: Path) -> None:
    config = proxy_config(tmp_path)
    for key, port in (("metricsBindAddress", 41001), ("healthzBindAddress", 41002)):
        host, _, given = config[key].rpartition(":")
        assert host == "127.0.0.1" and int(given) == port, key


def test_kube_proxy_leaves_the_host_alone(tmp_path: Path) -> None:
    config = proxy_config(tmp_path)
    assert config["oomScoreAdj"] == 0
    conntrack = config["conntrack"]
    assert (conntrack["maxPerCore"], conntrack["min"]) == (0, 0)
    for key, value in conntrack.items():
        if key.endswith("Timeout"):
            assert value == "0s", key
