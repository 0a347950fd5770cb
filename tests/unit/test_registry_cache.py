"""Resolver caching with a fake client (no sockets): LRU bounds, negative-cache backoff,
refusals before any I/O, and the GuardedResolver's DNS filtering."""

from __future__ import annotations

import socket
from typing import Any

import pytest
from aiohttp.abc import AbstractResolver, ResolveResult

from webhook.core.images import parse_image
from webhook.core.layers import Layer, Platform
from webhook.registry.client import Endpoint, RegistryClient, RegistryError
from webhook.registry.guard import HostPolicy
from webhook.registry.manifest import OCI_MANIFEST, Manifest
from webhook.registry.resolver import RegistryResolver, ResolverLimits
from webhook.registry.transport import GuardedResolver


def digest(n: int) -> str:
    return f"sha256:{n:064x}"


class FakeClient(RegistryClient):
    """Answers from a table; counts calls; never opens a connection."""

    def __init__(self, fail: RegistryError | None = None) -> None:
        super().__init__(HostPolicy.build(allow=["reg.example"]))
        self.calls: list[tuple[str, str]] = []
        self.fail = fail

    async def tag_digest(self, endpoint: Endpoint, repository: str, tag: str) -> str:
        self.calls.append(("tag", f"{repository}:{tag}"))
        if self.fail:
            raise self.fail
        return digest(int(tag))

    async def manifest(self, endpoint: Endpoint, repository: str, ref: str) -> Manifest:
        self.calls.append(("manifest", ref))
        if self.fail:
            raise self.fail
        return Manifest(OCI_MANIFEST, layers=(Layer(digest(10**6 + int(ref[7:], 16)), 5),),
                        config_digest=None)

    async def close(self) -> None:
        return None


async def test_lru_bound_and_default_platform() -> None:
    client = FakeClient()
    resolver = RegistryResolver(client, limits=ResolverLimits(max_digests=2))
    for n in (1, 2, 3):
        image = await resolver.resolve(parse_image(f"reg.example/app:{n}"))
        assert image is not None and list(image.platforms) == [Platform("linux", "amd64")]
    assert resolver.cached(parse_image(f"reg.example/app@{digest(1)}")) is None  # evicted
    assert resolver.cached(parse_image(f"reg.example/app@{digest(3)}")) is not None
    assert len(resolver) == 2


async def test_negative_cache_backs_off() -> None:
    now = [0.0]
    client = FakeClient(fail=RegistryError("boom", kind="http_error", status=500))
    resolver = RegistryResolver(client, clock=lambda: now[0],
                                limits=ResolverLimits(negative_ttl=10, negative_max_ttl=25))
    ref = parse_image("reg.example/app:1")
    attempts = []
    for step in (0, 5, 11, 25, 32, 60, 84, 86):
        now[0] = step
        before = len(client.calls)
        assert await resolver.resolve(ref) is None
        attempts.append(len(client.calls) > before)
    # Retries at 0, then after 10 s (11), then 20 s (32 > 31), then capped at 25 s (60, 86).
    assert attempts == [True, False, True, False, True, True, False, True]


async def test_failure_reason_is_kept_until_the_reference_resolves() -> None:
    now = [0.0]
    client = FakeClient(fail=RegistryError("token realm a:1 refused: nope", kind="refused"))
    resolver = RegistryResolver(client, clock=lambda: now[0])
    ref = parse_image("reg.example/app:1")
    assert resolver.failure(ref) is None  # never tried
    assert await resolver.resolve(ref) is None
    assert resolver.failure(ref) == "token realm a:1 refused: nope"
    assert resolver.failure(parse_image("reg.example/app:2")) is None
    client.fail = None
    now[0] = 1000.0  # past the negative entry
    assert await resolver.resolve(ref) is not None
    assert resolver.failure(ref) is None
    refused = parse_image("10.0.0.1/app:1")  # refused before any I/O: the guard's reason
    assert await resolver.resolve(refused) is None
    assert "10.0.0.1 is not public" in (resolver.failure(refused) or "")


async def test_rate_limit_pauses_the_registry() -> None:
    now = [0.0]
    client = FakeClient(fail=RegistryError("429", kind="rate_limited", status=429,
                                           retry_after=100))
    resolver = RegistryResolver(client, clock=lambda: now[0])
    assert await resolver.resolve(parse_image("reg.example/app:1")) is None
    client.fail = None
    calls = len(client.calls)
    assert await resolver.resolve(parse_image("reg.example/other:2")) is None  # paused
    assert len(client.calls) == calls
    now[0] = 101
    assert await resolver.resolve(parse_image("reg.example/other:2")) is not None


async def test_refused_registry_costs_no_call() -> None:
    client = FakeClient()
    resolver = RegistryResolver(client)
    for name in ("evil.example/x:1", "127.0.0.1:5000/x:1", "169.254.169.254/latest:1"):
        assert await resolver.resolve(parse_image(name)) is None
    assert client.calls == []
    assert resolver.stats.failures["refused"] == 3


class FixedResolver(AbstractResolver):
    def __init__(self, *addresses: str) -> None:
        self.addresses = addresses

    async def resolve(self, host: str, port: int = 0,
                      family: socket.AddressFamily = socket.AF_INET) -> list[ResolveResult]:
        return [ResolveResult(hostname=host, host=a, port=port, family=socket.AF_INET, proto=0,
                              flags=0) for a in self.addresses]

    async def close(self) -> None:
        return None


async def test_guarded_resolver_filters_private_answers() -> None:
    policy = HostPolicy.build(allow=["mirror.corp"])
    guarded = GuardedResolver(policy, FixedResolver("10.0.0.5", "8.8.4.4"))
    kept: Any = await guarded.resolve("us-docker.pkg.dev", 443)
    assert [r["host"] for r in kept] == ["8.8.4.4"]
    kept = await guarded.resolve("mirror.corp", 443)  # explicitly listed: private is fine
    assert [r["host"] for r in kept] == ["10.0.0.5", "8.8.4.4"]
    with pytest.raises(OSError, match="no allowed address"):
        await GuardedResolver(policy, FixedResolver("169.254.169.254")).resolve("ghcr.io", 443)


async def test_lookups_under_way_are_bounded() -> None:
    """Past max_inflight distinct lookups, new ones are shed (no preference) instead of piling
    up tasks behind the per-registry limit."""
    import asyncio

    gate = asyncio.Event()

    class SlowClient(FakeClient):
        async def tag_digest(self, endpoint: Endpoint, repository: str, tag: str) -> str:
            await gate.wait()
            return await super().tag_digest(endpoint, repository, tag)

    resolver = RegistryResolver(SlowClient(), limits=ResolverLimits(max_inflight=3))
    waiting = [asyncio.ensure_future(resolver.resolve(parse_image(f"reg.example/app:{n}")))
               for n in range(3)]
    await asyncio.sleep(0)
    assert await resolver.resolve(parse_image("reg.example/app:99")) is None
    assert resolver.stats.cache["shed"] == 1
    gate.set()
    assert all(image is not None for image in await asyncio.gather(*waiting))
    await resolver.close()


def test_wildcard_hosts_share_one_bucket() -> None:
    policy = HostPolicy.build(allow=["registry.corp.example:5000"])
    assert policy.bucket("europe-docker.pkg.dev") == "*.pkg.dev"
    assert policy.bucket("x1234.pkg.dev") == "*.pkg.dev"
    assert policy.bucket("ghcr.io") == "ghcr.io"
    assert policy.bucket("registry.corp.example:5000") == "registry.corp.example:5000"
