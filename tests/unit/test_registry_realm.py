"""Which token realm may be contacted, and whether the registry's credentials go with it: the
pure verdict (no network; refused hosts are only judged)."""

from __future__ import annotations

import pytest

from webhook.registry.guard import HostPolicy
from webhook.registry.realm import judge_realm

# The setup: the registry and its token service on different hosts and ports.
REGISTRY = ("registry.example", 5000)
POLICY = HostPolicy.build(allow=["registry.example:5000", "auth.example:5001", "*.corp.example"],
                          insecure=["plain.example:8080", "registry.example:5080"])


def verdict(realm: str, registry: str = "registry.example:5000",
            endpoint: tuple[str, int] = REGISTRY, policy: HostPolicy = POLICY) -> tuple[bool, bool]:
    judged = judge_realm(realm, registry, endpoint, policy)
    return judged.contact, judged.registry_credentials


@pytest.mark.parametrize(
    "realm",
    [
        "https://auth.example:5001/token",  # the issue: a separate, exactly listed token service
        "https://AUTH.example:5001/jwt/auth?x=1",  # host case, a query of its own
        "https://registry.example:5000/token",  # the registry itself
        "http://plain.example:8080/token",  # plain HTTP, but listed insecure
    ],
)
def test_registry_credentials_go_to_an_exactly_listed_realm(realm: str) -> None:
    assert verdict(realm) == (True, True)


def test_known_token_service_of_a_public_registry() -> None:
    default = HostPolicy.build()
    assert verdict("https://auth.docker.io/token", "docker.io", ("registry-1.docker.io", 443),
                   default) == (True, True)
    # ...but not the token service of another registry.
    assert verdict("https://auth.docker.io/token", "ghcr.io", ("ghcr.io", 443),
                   default) == (True, False)


@pytest.mark.parametrize(
    "realm",
    [
        "https://ghcr.io/token",  # allowed by the default list, for another registry
        "https://auth.corp.example/token",  # allowed through a wildcard only
    ],
)
def test_realm_allowed_but_not_named_gets_no_registry_credentials(realm: str) -> None:
    judged = judge_realm(realm, "registry.example:5000", REGISTRY, POLICY)
    assert (judged.contact, judged.registry_credentials) == (True, False)
    assert "--registry-allow" in judged.reason  # says how to allow it


@pytest.mark.parametrize(
    ("realm", "why"),
    [
        ("https://auth.example:5002/token", "not in the allowlist"),  # listed host, other port
        ("https://registry.example:5001/token", "not in the allowlist"),  # registry, other port
        ("https://evil.example/token", "not in the allowlist"),
        ("https://127.0.0.2:5001/token", "not public"),
        ("https://169.254.169.254/latest", "not public"),
        ("https://[::1]:5001/token", "not public"),
        ("http://auth.example:5001/token", "plain HTTP"),  # listed, but not insecure
        ("http://registry.example:5000/token", "plain HTTP"),
        ("https://robot:pw@auth.example:5001/token", "credentials in its URL"),
        ("ftp://auth.example:5001/token", "not an http(s) URL"),
        ("/token", "not an http(s) URL"),
        ("", "not an http(s) URL"),
        ("https://auth.example:99999/token", "bad port"),
    ],
)
def test_refused_realm_is_never_contacted(realm: str, why: str) -> None:
    judged = judge_realm(realm, "registry.example:5000", REGISTRY, POLICY)
    assert (judged.contact, judged.registry_credentials) == (False, False)
    assert why in judged.reason


def test_an_insecure_registry_may_use_a_plain_realm_on_itself() -> None:
    assert verdict("http://registry.example:5080/token", "registry.example:5080",
                   ("registry.example", 5080)) == (True, True)


@pytest.mark.parametrize(
    ("realm", "key"),
    [
        ("https://auth.example/token", "auth.example"),
        ("https://auth.example:5001/token", "auth.example:5001"),
        ("http://plain.example:8080/token", "plain.example:8080"),
    ],
)
def test_credentials_key_of_the_realm_host(realm: str, key: str) -> None:
    policy = HostPolicy.build(allow=["auth.example", "auth.example:5001"],
                              insecure=["plain.example:8080"])
    assert judge_realm(realm, "r.example", ("r.example", 443), policy).credentials_key == key
