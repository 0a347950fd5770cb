"""The registry resolver against the real CNCF distribution registry (Debian `docker-registry`)
on 127.0.0.1, with images pushed through its HTTP API. Misbehaviour (tampered bodies, slow or
failing answers) comes from a loopback proxy in front of the real registry."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from tests.integration.registry_images_fixture import RegistryImages
from tests.integration.registry_proxy_fixture import ConnectionCounter
from webhook.core.images import parse_image
from webhook.core.layers import Layer, Platform
from webhook.registry.client import RegistryClient
from webhook.registry.guard import HostPolicy
from webhook.registry.resolver import RegistryResolver, ResolverLimits, ResolverStats

AMD64 = Platform("linux", "amd64")
ARM64 = Platform("linux", "arm64")


def resolver_for(*hosts: str, limits: ResolverLimits | None = None,
                 clock: Callable[[], float] | None = None) -> RegistryResolver:
    """A resolver that allows exactly `hosts` (plain HTTP) besides the defaults."""
    stats = ResolverStats()
    policy = HostPolicy.build(insecure=hosts)
    client = RegistryClient(policy, timeout=10, on_request=stats.on_request)
    if clock is None:
        return RegistryResolver(client, limits=limits, stats=stats)
    return RegistryResolver(client, limits=limits, stats=stats, clock=clock)


def layers_of(pairs: tuple[tuple[str, int], ...]) -> tuple[Layer, ...]:
    return tuple(Layer(d, s) for d, s in pairs)


async def test_docker_v2_single_manifest_by_tag(registry_images: RegistryImages) -> None:
    resolver = resolver_for(registry_images.host)
    app = registry_images.images["app"]
    ref = parse_image(app.ref(registry_images.host))
    assert resolver.cached(ref) is None
    image = await resolver.resolve(ref)
    await resolver.close()
    assert image is not None
    assert image.digest == app.digest
    assert image.ref == app.ref(registry_images.host)
    assert list(image.platforms) == [AMD64]  # read from the config blob
    manifest = image.platforms[AMD64]
    assert manifest.layers == layers_of(app.platforms[0].layers)
    # The app shares its first two layers with the base image.
    assert manifest.layers[:2] == layers_of(registry_images.shared_base)
    assert resolver.cached(ref) == image
    assert resolver.cached(parse_image(app.pinned(registry_images.host))) == image


async def test_oci_single_manifest_platform_from_config(registry_images: RegistryImages) -> None:
    resolver = resolver_for(registry_images.host)
    tool = registry_images.images["tool"]
    image = await resolver.resolve(parse_image(tool.ref(registry_images.host)))
    await resolver.close()
    assert image is not None
    assert list(image.platforms) == [ARM64]
    assert image.platforms[ARM64].layers == layers_of(tool.platforms[0].layers)


@pytest.mark.parametrize("name", ["multi", "list"])
async def test_index_yields_every_platform(registry_images: RegistryImages, name: str) -> None:
    resolver = resolver_for(registry_images.host)
    pushed = registry_images.images[name]
    image = await resolver.resolve(parse_image(pushed.ref(registry_images.host)))
    await resolver.close()
    assert image is not None
    assert image.digest == pushed.digest
    expected = {Platform.parse(p.platform): (p.digest, layers_of(p.layers))
                for p in pushed.platforms}
    assert {p: (m.digest, m.layers) for p, m in image.platforms.items()} == expected
    # The attestation entry (unknown/unknown) is not a platform.
    assert all(p.os == "linux" for p in image.platforms)
    # A node reporting a platform manifest digest finds the same image, from memory.
    child = pushed.platforms[0]
    assert resolver.cached(parse_image(f"example.com/any/repo@{child.digest}")) == image


async def test_digest_reference_skips_the_tag(registry_images: RegistryImages,
                                              proxy_factory: Any) -> None:
    proxy = await proxy_factory(registry_images.server.url)
    resolver = resolver_for(proxy.host)
    multi = registry_images.images["multi"]
    image = await resolver.resolve(parse_image(multi.pinned(proxy.host)))
    await resolver.close()
    assert image is not None and image.digest == multi.digest
    assert not any(method == "HEAD" for method, _ in proxy.counts)


async def test_tag_resolves_with_head_then_get_by_digest(registry_images: RegistryImages,
                                                         proxy_factory: Any) -> None:
    proxy = await proxy_factory(registry_images.server.url)
    resolver = resolver_for(proxy.host)
    base = registry_images.images["base"]
    assert await resolver.resolve(parse_image(base.ref(proxy.host))) is not None
    await resolver.close()
    assert proxy.counts[("HEAD", "/v2/library/base/manifests/1")] == 1
    assert proxy.counts[("GET", "/v2/library/base/manifests/1")] == 0
    assert proxy.counts[("GET", f"/v2/library/base/manifests/{base.digest}")] == 1


async def test_tampered_manifest_is_rejected(registry_images: RegistryImages,
                                             proxy_factory: Any) -> None:
    proxy = await proxy_factory(registry_images.server.url, tamper=True)
    resolver = resolver_for(proxy.host)
    ref = parse_image(registry_images.images["app"].ref(proxy.host))
    assert await resolver.resolve(ref) is None
    await resolver.close()
    assert resolver.stats.failures["digest_mismatch"] == 1
    assert resolver.cached(ref) is None


async def test_concurrent_lookups_are_coalesced(registry_images: RegistryImages,
                                                proxy_factory: Any) -> None:
    hold = asyncio.Event()
    proxy = await proxy_factory(registry_images.server.url, hold=hold)
    resolver = resolver_for(proxy.host)
    multi = registry_images.images["multi"]
    ref = parse_image(multi.ref(proxy.host))
    lookups = [asyncio.ensure_future(resolver.resolve(ref)) for _ in range(20)]
    await proxy.reached.wait()
    hold.set()
    results = await asyncio.gather(*lookups)
    await resolver.close()
    assert all(r is not None and r.digest == multi.digest for r in results)
    assert proxy.counts[("HEAD", "/v2/multi/arch/manifests/2.0")] == 1
    assert proxy.counts[("GET", f"/v2/multi/arch/manifests/{multi.digest}")] == 1
    assert resolver.stats.cache["miss"] == 1
    assert resolver.stats.cache["coalesced"] == 19


async def test_tag_ttl_rechecks_with_head_only(registry_images: RegistryImages,
                                               proxy_factory: Any) -> None:
    now = [1000.0]
    proxy = await proxy_factory(registry_images.server.url)
    resolver = resolver_for(proxy.host, clock=lambda: now[0])
    base = registry_images.images["base"]
    ref = parse_image(base.ref(proxy.host))
    first = await resolver.resolve(ref)
    now[0] += 301  # past the 5 minute tag TTL
    assert resolver.cached(ref) is None
    assert resolver.cached(parse_image(base.pinned(proxy.host))) == first  # digests never expire
    again = await resolver.resolve(ref)
    await resolver.close()
    assert again == first
    assert proxy.counts[("HEAD", "/v2/library/base/manifests/1")] == 2
    assert proxy.counts[("GET", f"/v2/library/base/manifests/{base.digest}")] == 1


@pytest.mark.parametrize(
    ("status", "body", "kind"),
    [
        (404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}', "not_found"),
        (401, b"{}", "unauthorized"),
        (429, b"slow down", "rate_limited"),
        (500, b"oops", "http_error"),
        (200, b"\x00\xffnot json at all", "bad_manifest"),
    ],
)
async def test_failures_fail_open_with_negative_cache(
    registry_images: RegistryImages, proxy_factory: Any, status: int, body: bytes, kind: str
) -> None:
    now = [1000.0]
    headers = {"Retry-After": "5"} if status == 429 else {}
    if status == 200:
        # Garbage for a digest reference: it cannot hash to the digest it claims.
        headers = {"Docker-Content-Digest": registry_images.images["base"].digest}
    proxy = await proxy_factory(registry_images.server.url, answer=(status, body, headers))
    resolver = resolver_for(proxy.host, clock=lambda: now[0])
    ref = parse_image(registry_images.images["base"].ref(proxy.host))
    assert await resolver.resolve(ref) is None
    calls = sum(proxy.counts.values())
    assert await resolver.resolve(ref) is None  # negative cache: no second round trip
    assert sum(proxy.counts.values()) == calls
    assert resolver.stats.cache["negative"] == 1
    now[0] += 31  # the first retry delay has passed (then it doubles)
    proxy.answer = None
    image = await resolver.resolve(ref)
    await resolver.close()
    if status == 200:
        assert resolver.stats.failures["digest_mismatch"] == 1
    else:
        assert resolver.stats.failures[kind] == 1
    assert image is not None  # it recovers once the registry does


async def test_timeout_is_a_miss_not_a_crash(registry_images: RegistryImages,
                                             proxy_factory: Any) -> None:
    proxy = await proxy_factory(registry_images.server.url, hold=asyncio.Event())
    stats = ResolverStats()
    client = RegistryClient(HostPolicy.build(insecure=[proxy.host]), timeout=0.2,
                            on_request=stats.on_request)
    resolver = RegistryResolver(client, stats=stats)
    ref = parse_image(registry_images.images["base"].pinned(proxy.host))
    assert await resolver.resolve(ref) is None
    await resolver.close()
    assert stats.failures["timeout"] == 1
    assert stats.requests[(proxy.host, "timeout")] == 1


async def test_unlisted_hosts_are_never_contacted(registry_images: RegistryImages) -> None:
    """127.0.0.1 on an unlisted port and 127.0.0.2 (a loopback address nobody allowed): the
    listeners must see zero connections."""
    counters = [ConnectionCounter("127.0.0.1"), ConnectionCounter("127.0.0.2")]
    for counter in counters:
        await counter.start()
    resolver = resolver_for(registry_images.host)
    try:
        for counter in counters:
            host = f"{counter.host}:{counter.port}"
            for name in (f"{host}/library/base:1", f"{host}/x@{'sha256:' + 'a' * 64}"):
                assert await resolver.resolve(parse_image(name)) is None
        # Listed for TLS only? No: an allowed port with a different address is still refused.
        other = f"127.0.0.2:{registry_images.server.port}/library/base:1"
        assert await resolver.resolve(parse_image(other)) is None
    finally:
        await resolver.close()
        for counter in counters:
            await counter.stop()
    assert [c.connections for c in counters] == [0, 0]
    assert resolver.stats.failures["refused"] == 5


async def test_mirror_serves_another_registry(registry_images: RegistryImages) -> None:
    stats = ResolverStats()
    mirror = registry_images.host
    policy = HostPolicy.build(insecure=[mirror], mirrors=[mirror])
    resolver = RegistryResolver(RegistryClient(policy, on_request=stats.on_request),
                                mirrors={"docker.io": mirror}, stats=stats)
    image = await resolver.resolve(parse_image("base:1"))  # docker.io/library/base:1
    await resolver.close()
    assert image is not None
    assert image.ref == "docker.io/library/base:1"
    assert image.digest == registry_images.images["base"].digest
    assert {registry for registry, _ in stats.requests} == {mirror}


async def test_redirect_to_unlisted_host_is_not_followed(proxy_factory: Any) -> None:
    counter = ConnectionCounter("127.0.0.2")
    await counter.start()
    target = f"http://127.0.0.2:{counter.port}/v2/x/manifests/y"
    proxy = await proxy_factory("http://127.0.0.1:1", answer=(307, b"", {"Location": target}))
    resolver = resolver_for(proxy.host)
    try:
        assert await resolver.resolve(parse_image(f"{proxy.host}/x@sha256:{'b' * 64}")) is None
    finally:
        await resolver.close()
        await counter.stop()
    assert counter.connections == 0
    assert resolver.stats.failures["refused"] == 1


async def test_oversized_manifest_is_refused(proxy_factory: Any) -> None:
    big = b"{" + b" " * (4 << 20) + b"}"
    proxy = await proxy_factory("http://127.0.0.1:1", answer=(200, big, {}))
    resolver = resolver_for(proxy.host)
    assert await resolver.resolve(parse_image(f"{proxy.host}/x@sha256:{'c' * 64}")) is None
    await resolver.close()
    assert resolver.stats.failures["too_large"] == 1
