"""The registry host guard as pure functions (no network: refused addresses are only judged)."""

from __future__ import annotations

import ipaddress

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.registry.guard import (
    GuardError,
    HostPolicy,
    address_allowed,
    api_endpoint,
    is_public_address,
    parse_mirrors,
    split_host_port,
)

DEFAULT = HostPolicy.build()


@pytest.mark.parametrize(
    ("host", "port"),
    [
        ("docker.io", 443), ("registry-1.docker.io", 443), ("auth.docker.io", 443),
        ("registry.k8s.io", 443), ("ghcr.io", 443), ("quay.io", 443), ("gcr.io", 443),
        ("us-docker.pkg.dev", 443), ("europe-west1-docker.pkg.dev", 443),
        ("public.ecr.aws", 443), ("mcr.microsoft.com", 443),
    ],
)
def test_default_allowlist(host: str, port: int) -> None:
    assert DEFAULT.check(host, port).allowed


@pytest.mark.parametrize(
    ("host", "port"),
    [
        ("evil.example", 443), ("docker.io", 80), ("docker.io", 5000), ("pkg.dev", 443),
        ("notdocker.io", 443), ("ghcr.io.evil.example", 443), ("us-docker.pkg.dev", 8443),
        ("127.0.0.1", 443), ("127.0.0.1", 5000), ("localhost", 443), ("10.0.0.1", 443),
        ("169.254.169.254", 80), ("169.254.169.254", 443), ("192.168.1.1", 443),
        ("172.16.0.1", 443), ("100.100.100.200", 443), ("::1", 443), ("fd00:ec2::254", 443),
        ("::ffff:127.0.0.1", 443), ("::ffff:169.254.169.254", 443), ("0.0.0.0", 443),
        ("metadata.google.internal", 80), ("kubernetes.default.svc", 443),
    ],
)
def test_refused_by_default(host: str, port: int) -> None:
    assert not DEFAULT.check(host, port).allowed


def test_wildcards_never_match_ip_literals() -> None:
    policy = HostPolicy.build(allow=["*.internal"])
    assert policy.check("registry.internal", 443).allowed
    assert not policy.check("registry.internal", 5000).allowed
    assert not policy.check("internal", 443).allowed


def test_explicit_private_address_and_port() -> None:
    policy = HostPolicy.build(allow=["10.1.2.3:5000"], insecure=["127.0.0.1:5001"])
    assert policy.check("10.1.2.3", 5000).explicit
    assert not policy.check("10.1.2.3", 5001).allowed
    assert policy.check("127.0.0.1", 5001).allowed
    assert policy.scheme("127.0.0.1", 5001) == "http"
    assert policy.scheme("10.1.2.3", 5000) == "https"
    assert not policy.check("127.0.0.2", 5001).allowed


@given(st.ip_addresses())
def test_non_public_literals_need_an_exact_entry(address: ipaddress._BaseAddress) -> None:
    host = str(address)
    assert isinstance(address, ipaddress.IPv4Address | ipaddress.IPv6Address)
    decision = DEFAULT.check(host, 443)
    if not is_public_address(address):
        assert not decision.allowed
    policy = HostPolicy.build(allow=[f"[{host}]:443" if ":" in host else f"{host}:443"])
    assert policy.check(host, 443).allowed


@given(st.ip_addresses(v=4))
def test_mapped_v6_judged_like_v4(address: ipaddress.IPv4Address) -> None:
    mapped = ipaddress.IPv6Address(f"::ffff:{address}")
    assert is_public_address(mapped) == is_public_address(address)


@given(st.from_regex(r"[a-z0-9]{1,10}(\.[a-z0-9]{1,10}){0,3}", fullmatch=True),
       st.integers(1, 65535))
def test_unlisted_names_are_refused(name: str, port: int) -> None:
    policy = HostPolicy.build(defaults=False)
    assert not policy.check(name, port).allowed
    assert HostPolicy.build(allow=[f"{name}:{port}"], defaults=False).check(name, port).allowed


def test_dns_answers_into_private_space_only_for_explicit_names() -> None:
    policy = HostPolicy.build(allow=["mirror.cluster.local"])
    private = ipaddress.ip_address("10.0.0.7")
    public = ipaddress.ip_address("8.8.8.8")
    assert address_allowed(private, policy.check("mirror.cluster.local", 443))
    assert not address_allowed(private, policy.check("us-docker.pkg.dev", 443))
    assert address_allowed(public, policy.check("us-docker.pkg.dev", 443))
    assert not address_allowed(public, policy.check("evil.example", 443))


def test_endpoints_mirrors_and_docker_hub() -> None:
    assert api_endpoint("docker.io", {}, DEFAULT) == ("https", "registry-1.docker.io", 443)
    mirrors = parse_mirrors(["docker.io=mirror.local:5000", "index.docker.io=ignored:1"])
    assert mirrors == {"docker.io": "ignored:1"}
    mirrors = parse_mirrors(["docker.io=mirror.local:5000"])
    policy = HostPolicy.build(insecure=["mirror.local:5000"], mirrors=mirrors.values())
    assert api_endpoint("docker.io", mirrors, policy) == ("http", "mirror.local", 5000)
    with pytest.raises(GuardError):
        api_endpoint("127.0.0.1:5000", {}, DEFAULT)
    with pytest.raises(GuardError):
        parse_mirrors(["docker.io"])


def test_split_host_port() -> None:
    assert split_host_port("Example.COM.") == ("example.com", None)
    assert split_host_port("[::1]:5000") == ("::1", 5000)
    assert split_host_port("::1") == ("::1", None)
    assert split_host_port("h:443") == ("h", 443)
    for bad in ("h:0", "h:99999", "h:x", "[::1", ""):
        with pytest.raises(GuardError):
            split_host_port(bad)
