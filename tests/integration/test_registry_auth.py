"""Registry authentication against the real registry (Debian `docker-registry`), serving the
storage the open test registry was pushed into:

- Basic: the registry's `auth.htpasswd` (bcrypt) with credentials from a Docker config.json.
- Bearer: the registry's `auth.token`, verifying ES256 JWTs from a small aiohttp token issuer on
  127.0.0.1 whose key (made with `cryptography`) the registry trusts via `rootcertbundle`.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import require
from tests.integration.registry_fixture import (
    RegistryServer,
    start_registry,
)
from tests.integration.registry_images_fixture import RegistryImages
from tests.integration.registry_token_fixture import (
    TokenIssuer,
    TokenServer,
)
from webhook.core.images import parse_image
from webhook.registry.auth import load_docker_config
from webhook.registry.client import RegistryClient
from webhook.registry.guard import HostPolicy
from webhook.registry.resolver import RegistryResolver, ResolverStats


def docker_config(path: Path, entries: dict[str, tuple[str, str]]) -> Path:
    auths = {key: {"auth": base64.b64encode(f"{u}:{p}".encode()).decode()}
             for key, (u, p) in entries.items()}
    path.write_text(json.dumps({"auths": auths}))
    return path


def resolver(hosts: list[str], config: Path | None) -> RegistryResolver:
    stats = ResolverStats()
    credentials = load_docker_config(config) if config is not None else {}
    client = RegistryClient(HostPolicy.build(insecure=hosts), credentials,
                            on_request=stats.on_request)
    return RegistryResolver(client, stats=stats)


@pytest.fixture(scope="module")
def htpasswd_registry(registry_images: RegistryImages,
                      tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryServer]:
    bcrypt = require("bcrypt", "bcrypt makes the registry's htpasswd file")
    root = tmp_path_factory.mktemp("htpasswd")
    hashed = bcrypt.hashpw(b"s3cret", bcrypt.gensalt(rounds=4)).decode()
    (root / "htpasswd").write_text(f"puller:{hashed}\n")
    server = start_registry(
        registry_images.binary, root / "run", registry_images.storage,
        auth={"htpasswd": {"realm": "test-realm", "path": str(root / "htpasswd")}},
    )
    yield server
    server.stop()


async def test_basic_auth_from_docker_config(registry_images: RegistryImages,
                                             htpasswd_registry: RegistryServer,
                                             tmp_path: Path) -> None:
    host = htpasswd_registry.host
    config = docker_config(tmp_path / "config.json", {f"http://{host}/v2/": ("puller", "s3cret")})
    subject = resolver([host], config)
    multi = registry_images.images["multi"]
    image = await subject.resolve(parse_image(multi.ref(host)))
    await subject.close()
    assert image is not None and image.digest == multi.digest
    assert len(image.platforms) == 2


async def test_basic_auth_wrong_password_fails_open(htpasswd_registry: RegistryServer,
                                                    registry_images: RegistryImages,
                                                    tmp_path: Path) -> None:
    host = htpasswd_registry.host
    config = docker_config(tmp_path / "config.json", {host: ("puller", "wrong")})
    subject = resolver([host], config)
    assert await subject.resolve(parse_image(registry_images.images["base"].ref(host))) is None
    await subject.close()
    assert subject.stats.failures["unauthorized"] == 1


async def test_basic_credentials_stay_with_their_host(htpasswd_registry: RegistryServer,
                                                      registry_images: RegistryImages,
                                                      tmp_path: Path) -> None:
    """Credentials for another registry are not offered to this one."""
    host = htpasswd_registry.host
    config = docker_config(tmp_path / "config.json", {"ghcr.io": ("puller", "s3cret")})
    subject = resolver([host], config)
    assert await subject.resolve(parse_image(registry_images.images["base"].ref(host))) is None
    await subject.close()


@pytest.fixture
def token_registry(registry_images: RegistryImages,
                   tmp_path: Path) -> Iterator[tuple[RegistryServer, TokenServer]]:
    issuer = TokenIssuer()
    tokens = TokenServer(issuer, users={"robot": "pa55"})
    tokens.start()
    server = start_registry(
        registry_images.binary, tmp_path / "run", registry_images.storage,
        auth={"token": {"realm": tokens.realm, "service": issuer.service,
                        "issuer": issuer.issuer,
                        "rootcertbundle": str(issuer.bundle(tmp_path / "issuer.pem"))}},
    )
    yield server, tokens
    server.stop()
    tokens.stop()


async def test_bearer_token_flow_with_credentials_of_the_realm_host(
    token_registry: tuple[RegistryServer, TokenServer], registry_images: RegistryImages,
    tmp_path: Path,
) -> None:
    """config.json may also list the realm host itself: those credentials go to it."""
    server, tokens = token_registry
    config = docker_config(tmp_path / "config.json",
                           {f"127.0.0.1:{tokens.port}": ("robot", "pa55")})
    subject = resolver([server.host, f"127.0.0.1:{tokens.port}"], config)
    images = registry_images.images
    for key in ("multi", "app"):
        image = await subject.resolve(parse_image(images[key].ref(server.host)))
        assert image is not None and image.digest == images[key].digest
    await subject.close()
    scopes = [request.query.get("scope") for request in tokens.requests]
    # One token per repository scope, cached and reused for every request of that repository.
    assert scopes == ["repository:multi/arch:pull", "repository:team/app:pull"]
    assert all(request.basic() == ("robot", "pa55") for request in tokens.requests)
    assert {request.query.get("service") for request in tokens.requests} == {"test-registry"}


async def test_credentials_for_another_registry_are_not_sent_to_the_realm(
    token_registry: tuple[RegistryServer, TokenServer], registry_images: RegistryImages,
    tmp_path: Path,
) -> None:
    server, tokens = token_registry
    config = docker_config(tmp_path / "config.json", {"ghcr.io": ("robot", "pa55")})
    subject = resolver([server.host, f"127.0.0.1:{tokens.port}"], config)
    assert await subject.resolve(parse_image(registry_images.images["base"].ref(server.host))) \
        is None
    await subject.close()
    assert tokens.requests and all(request.authorization is None for request in tokens.requests)


async def test_realm_outside_the_allowlist_is_not_contacted(
    token_registry: tuple[RegistryServer, TokenServer], registry_images: RegistryImages,
) -> None:
    server, tokens = token_registry
    subject = resolver([server.host], None)  # the token server's port is not listed
    assert await subject.resolve(parse_image(registry_images.images["base"].ref(server.host))) \
        is None
    await subject.close()
    assert tokens.requests == []
    assert subject.stats.failures["refused"] == 1
