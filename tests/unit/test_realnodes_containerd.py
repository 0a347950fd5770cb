"""Each real node's containerd configuration (webhook/devcluster/realnodes/containerd.py),
parsed back with tomllib and json: what the module promises (its own root, the default socket
in the node's mount namespace, runc with cgroupfs, the cluster's registry over plain HTTP at
the node's own IP, pods on the node's bridge with no way out) and where write() puts it."""

from __future__ import annotations

import ipaddress
import json
import tomllib
from pathlib import Path
from typing import Any

import pytest

from webhook.devcluster.realnodes.containerd import (
    SOCKET,
    cni_conflist,
    config,
    hosts_toml,
    write,
)
from webhook.devcluster.realnodes.network import (
    NodeAddresses,
    node_addresses,
    registry_endpoint,
    registry_host,
)

RFC2544 = ipaddress.IPv4Network("198.18.0.0/15")
SANDBOX = f"{registry_host()}/ll/pause:3.10"
CRI_IMAGES = "io.containerd.cri.v1.images"
CRI_RUNTIME = "io.containerd.cri.v1.runtime"


@pytest.fixture
def node() -> NodeAddresses:
    return node_addresses(4, "node-4")


def parsed_config(node_dir: Path, node: NodeAddresses) -> dict[str, Any]:
    return tomllib.loads(config(node_dir, node, SANDBOX, Path("/opt/ll/bin"),
                                Path("/usr/sbin/runc")))


def test_root_is_the_nodes_own_and_state_and_socket_are_the_defaults(
        tmp_path: Path, node: NodeAddresses) -> None:
    parsed = parsed_config(tmp_path / "node-4", node)
    assert parsed["version"] == 3
    assert Path(parsed["root"]).is_relative_to(tmp_path / "node-4")
    assert parsed["state"] == "/run/containerd"
    assert Path("/run/containerd/containerd.sock") == SOCKET
    assert parsed["grpc"]["address"] == str(SOCKET)
    assert parsed["imports"] == []


def test_two_nodes_never_share_an_image_store(tmp_path: Path) -> None:
    one = parsed_config(tmp_path / "node-1", node_addresses(1, "node-1"))
    two = parsed_config(tmp_path / "node-2", node_addresses(2, "node-2"))
    assert one["root"] != two["root"]
    assert not Path(one["root"]).is_relative_to(two["root"])
    assert not Path(two["root"]).is_relative_to(one["root"])


def test_the_cri_runtime_suits_this_machine(tmp_path: Path, node: NodeAddresses) -> None:
    runtime = parsed_config(tmp_path, node)["plugins"][CRI_RUNTIME]
    assert runtime["restrict_oom_score_adj"] is True
    assert runtime["netns_mounts_under_state_dir"] is True
    options = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert options["SystemdCgroup"] is False
    assert options["BinaryName"] == "/usr/sbin/runc"


def test_images_come_from_the_cluster_registry(tmp_path: Path, node: NodeAddresses) -> None:
    images = parsed_config(tmp_path, node)["plugins"][CRI_IMAGES]
    assert images["pinned_images"]["sandbox"] == SANDBOX
    assert Path(images["registry"]["config_path"]).is_relative_to(tmp_path)


def test_cni_dirs_and_the_stream_server(tmp_path: Path, node: NodeAddresses) -> None:
    plugins = parsed_config(tmp_path, node)["plugins"]
    cni = plugins[CRI_RUNTIME]["cni"]
    assert cni["bin_dirs"] == ["/opt/ll/bin"]
    assert Path(cni["conf_dir"]).is_relative_to(tmp_path)
    assert plugins["io.containerd.grpc.v1.cri"]["stream_server_address"] == node.ip


def test_nri_and_the_probing_plugins_are_disabled(tmp_path: Path, node: NodeAddresses) -> None:
    disabled = parsed_config(tmp_path, node)["disabled_plugins"]
    assert "io.containerd.nri.v1.nri" in disabled
    assert all(name.startswith("io.containerd.") for name in disabled)
    assert len(set(disabled)) == len(disabled)
    assert not {CRI_IMAGES, CRI_RUNTIME, "io.containerd.grpc.v1.cri",
                "io.containerd.snapshotter.v1.overlayfs"} & set(disabled)


def test_a_path_with_quotes_and_backslashes_survives_toml(node: NodeAddresses) -> None:
    odd = Path('/tmp/a "quoted" dir\\with\\backslashes/node')
    parsed = parsed_config(odd, node)
    assert Path(parsed["root"]).is_relative_to(odd)


def test_hosts_toml_sends_pulls_to_the_nodes_own_ip(node: NodeAddresses) -> None:
    parsed = tomllib.loads(hosts_toml(node))
    server = f"http://{node.ip}:5000"
    assert parsed["server"] == server
    assert parsed["host"] == {server: {"capabilities": ["pull", "resolve"]}}
    assert server.removeprefix("http://") == registry_endpoint(node)


def test_each_node_pulls_at_a_different_address() -> None:
    servers = {tomllib.loads(hosts_toml(node_addresses(i, f"n{i}")))["server"]
               for i in range(1, 21)}
    assert len(servers) == 20


def test_the_cni_bridge_is_the_nodes_own(tmp_path: Path, node: NodeAddresses) -> None:
    conflist = json.loads(json.dumps(cni_conflist(tmp_path, node)))
    bridge = next(p for p in conflist["plugins"] if p["type"] == "bridge")
    assert bridge["bridge"] == node.bridge
    assert bridge["ipMasq"] is False
    assert bridge["ipam"]["ranges"] == [[{"subnet": node.pod_cidr, "gateway": node.gateway}]]
    assert Path(bridge["ipam"]["dataDir"]).is_relative_to(tmp_path)


def test_pods_are_routed_to_the_test_network_only(tmp_path: Path, node: NodeAddresses) -> None:
    conflist: Any = cni_conflist(tmp_path, node)
    [bridge] = [p for p in conflist["plugins"] if p["type"] == "bridge"]
    routes = [ipaddress.ip_network(r["dst"]) for r in bridge["ipam"]["routes"]]
    assert routes
    for route in routes:
        assert route.version == 4 and route.subnet_of(RFC2544), route
        assert route != ipaddress.ip_network("0.0.0.0/0")
    # the routes reach the nodes, the Services and every other node's pods
    for target in ("198.18.0.11", "198.18.16.1", "198.19.200.7"):
        assert any(ipaddress.ip_address(target) in r for r in routes), target


def test_write_puts_each_file_where_containerd_reads_it(
        tmp_path: Path, node: NodeAddresses) -> None:
    node_dir = tmp_path / "nodes" / node.name
    path = write(node_dir, node, SANDBOX, Path("/opt/ll/bin"), Path("/usr/sbin/runc"))
    assert path.is_relative_to(node_dir)
    parsed = tomllib.loads(path.read_text())
    assert parsed == parsed_config(node_dir, node)
    config_path = Path(parsed["plugins"][CRI_IMAGES]["registry"]["config_path"])
    hosts = config_path / registry_host() / "hosts.toml"
    assert tomllib.loads(hosts.read_text()) == tomllib.loads(hosts_toml(node))
    conf_dir = Path(parsed["plugins"][CRI_RUNTIME]["cni"]["conf_dir"])
    [conflist] = [p for p in conf_dir.iterdir() if p.suffix == ".conflist"]
    assert json.loads(conflist.read_text()) == cni_conflist(node_dir, node)


def test_write_again_replaces_the_files(tmp_path: Path) -> None:
    first, second = node_addresses(1, "node-1"), node_addresses(2, "node-1")
    write(tmp_path, first, SANDBOX, Path("/bin"), Path("/runc"))
    path = write(tmp_path, second, SANDBOX, Path("/bin"), Path("/runc"))
    stream = tomllib.loads(path.read_text())["plugins"]["io.containerd.grpc.v1.cri"]
    assert stream["stream_server_address"] == second.ip
    hosts = tmp_path / "certs.d" / registry_host() / "hosts.toml"
    assert tomllib.loads(hosts.read_text())["server"] == f"http://{second.ip}:5000"
