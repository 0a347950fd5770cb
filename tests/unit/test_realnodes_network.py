"""The real nodes' address plan and its guard (webhook/devcluster/realnodes/network.py), as
pure functions: what the guard lets through, and that the plan keeps every node, pod and
Service address inside 198.18.0.0/15 with nothing shared between nodes."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.devcluster.realnodes import network
from webhook.devcluster.realnodes.network import (
    CONTROL_PLANE_IP,
    MAX_NODES,
    POD_CIDR,
    REGISTRY_PORT,
    SERVICE_CIDR,
    in_test_network,
    node_addresses,
    registry_endpoint,
    registry_host,
)

# RFC 2544's benchmarking range and loopback, written here rather than read from the module.
RFC2544 = ipaddress.IPv4Network("198.18.0.0/15")
LOOPBACK = ipaddress.IPv4Network("127.0.0.0/8")
NODE_NETWORK = ipaddress.IPv4Network(str(network.NODE_NETWORK))


@pytest.mark.parametrize("address", [
    "127.0.0.1", "127.0.0.0", "127.255.255.255",
    "198.18.0.0", "198.18.0.1", "198.18.0.11", "198.18.16.1", "198.19.1.5", "198.19.255.255",
])
def test_loopback_and_the_test_network_are_accepted(address: str) -> None:
    assert in_test_network(address)


@pytest.mark.parametrize("address", [
    "198.17.255.255", "198.20.0.0", "128.0.0.0", "126.255.255.255",
    "10.0.0.1", "172.16.0.1", "192.168.0.1", "0.0.0.0", "255.255.255.255", "8.8.8.8",
])
def test_other_ipv4_addresses_are_refused(address: str) -> None:
    assert not in_test_network(address)


@pytest.mark.parametrize("address", [
    "localhost", "", "198.18.0.1:5000", "registry.local", " 198.18.0.1", "198.18.0.1 ",
    "198.18.0.1/32", "198.18.0", "198.18.0.1.1", "198.18.0.256", "198.018.0.1",
    "::1", "::ffff:198.18.0.1", "::ffff:127.0.0.1", "fe80::1", "[198.18.0.1]",
])
def test_names_ipv6_and_malformed_strings_are_refused(address: str) -> None:
    assert not in_test_network(address)


def _around(first: int, second: int, span: int) -> st.SearchStrategy[int]:
    """Addresses from first.second.0.0 to `span` /16s further: the edges of a range."""
    low = (first << 24) | (second << 16)
    return st.integers(min_value=low, max_value=low + (span << 16) - 1)


ADDRESSES = st.one_of(st.integers(min_value=0, max_value=2**32 - 1),
                      _around(198, 16, 8), _around(126, 0, 3 * 256))


@given(ADDRESSES)
def test_the_guard_agrees_with_octet_arithmetic(value: int) -> None:
    first, second = value >> 24, (value >> 16) & 0xFF
    expected = first == 127 or (first == 198 and second in (18, 19))
    assert in_test_network(str(ipaddress.IPv4Address(value))) is expected


@given(st.integers(min_value=0, max_value=2**128 - 1))
def test_every_ipv6_address_is_refused(value: int) -> None:
    assert not in_test_network(str(ipaddress.IPv6Address(value)))


ALL_NODES = [node_addresses(i, f"node-{i}") for i in range(1, MAX_NODES + 1)]


@pytest.mark.parametrize("index", [0, -1, MAX_NODES + 1, MAX_NODES + 50])
def test_an_index_outside_the_plan_is_refused(index: int) -> None:
    with pytest.raises(ValueError, match=str(index)):
        node_addresses(index, "node-x")


@given(st.integers(min_value=1, max_value=MAX_NODES), st.text(min_size=1, max_size=20))
def test_a_node_keeps_its_index_and_name(index: int, name: str) -> None:
    node = node_addresses(index, name)
    assert (node.index, node.name) == (index, name)


def test_every_node_address_is_in_the_test_network() -> None:
    for node in ALL_NODES:
        ip = ipaddress.IPv4Address(node.ip)
        subnet = ipaddress.IPv4Network(node.pod_cidr)
        gateway = ipaddress.IPv4Address(node.gateway)
        assert in_test_network(node.ip) and ip in RFC2544, node
        assert ip in NODE_NETWORK and ip not in (NODE_NETWORK.network_address,
                                                 NODE_NETWORK.broadcast_address), node
        assert ip != ipaddress.IPv4Address(CONTROL_PLANE_IP), node
        assert subnet.subnet_of(RFC2544) and subnet.subnet_of(ipaddress.IPv4Network(POD_CIDR))
        assert in_test_network(node.gateway) and gateway in subnet, node
        assert gateway not in (subnet.network_address, subnet.broadcast_address), node


def test_no_two_nodes_share_an_ip_a_subnet_or_a_bridge() -> None:
    assert len({n.ip for n in ALL_NODES}) == MAX_NODES
    assert len({n.bridge for n in ALL_NODES}) == MAX_NODES
    assert len({n.gateway for n in ALL_NODES}) == MAX_NODES
    subnets = [ipaddress.IPv4Network(n.pod_cidr) for n in ALL_NODES]
    for i, one in enumerate(subnets):
        for other in subnets[i + 1:]:
            assert not one.overlaps(other), (one, other)


def test_bridge_names_fit_a_linux_interface_name() -> None:
    for node in ALL_NODES:
        assert 0 < len(node.bridge) <= 15 and "/" not in node.bridge and " " not in node.bridge


def test_node_service_and_pod_ranges_are_disjoint_and_inside_the_test_network() -> None:
    services = ipaddress.IPv4Network(SERVICE_CIDR)
    pods = ipaddress.IPv4Network(POD_CIDR)
    for planned in (NODE_NETWORK, services, pods):
        assert planned.subnet_of(RFC2544), planned
    assert not NODE_NETWORK.overlaps(services)
    assert not NODE_NETWORK.overlaps(pods)
    assert not services.overlaps(pods)


def test_no_node_address_falls_in_the_service_range() -> None:
    services = ipaddress.IPv4Network(SERVICE_CIDR)
    for node in ALL_NODES:
        assert ipaddress.IPv4Address(node.ip) not in services
        assert not ipaddress.IPv4Network(node.pod_cidr).overlaps(services)


def test_the_registry_is_reached_at_each_nodes_own_ip() -> None:
    endpoints = set()
    for node in ALL_NODES:
        host, _, port = registry_endpoint(node).rpartition(":")
        assert (host, int(port)) == (node.ip, REGISTRY_PORT)
        endpoints.add(registry_endpoint(node))
    assert len(endpoints) == MAX_NODES


def test_the_registry_name_is_the_control_plane_address() -> None:
    host, _, port = registry_host().rpartition(":")
    assert (host, int(port)) == (CONTROL_PLANE_IP, REGISTRY_PORT)
    assert in_test_network(host)
    assert registry_host() not in {registry_endpoint(n) for n in ALL_NODES}
