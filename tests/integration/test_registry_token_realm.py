"""Private registries whose token service is on another host (GitLab, docker_auth, Harbor behind
a separate auth endpoint), against the real registry (Debian `docker-registry`, `auth: token`)
on 127.0.0.1 and a token server on other loopback ports: HTTPS with a test CA (the allowed,
listed realm) and plain HTTP. config.json lists credentials for the *registry* host only, as
`docker login registry:port` writes them. The private images are pushed through the registry's
HTTP API with a token the token server grants a "pusher" account (pull + push).

Refusal is shown with loopback listeners outside the allowlist that only count connections.
"""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.registry_fixture import (
    RegistryServer,
    require_registry_binary,
    start_registry,
)
from tests.integration.registry_images_fixture import (
    PushedImage,
    Pusher,
    layer,
)
from tests.integration.registry_proxy_fixture import ConnectionCounter
from tests.integration.registry_token_fixture import (
    TokenIssuer,
    TokenServer,
    fetch_token,
)
from webhook.cli import main
from webhook.core.images import parse_image
from webhook.core.layers import Layer
from webhook.registry.auth import load_docker_config
from webhook.registry.catalog import StaticCatalog
from webhook.registry.client import RegistryClient
from webhook.registry.guard import HostPolicy
from webhook.registry.resolver import RegistryResolver, ResolverStats
from webhook.serving.certs import CertificateFiles, generate

ROBOT = ("robot", "pa55")  # the puller config.json names for the registry host
PUSHER = ("pusher", "push3r")


@dataclass
class Private:
    binary: str
    root: Path
    storage: Path
    issuer: TokenIssuer
    tokens: TokenServer
    certs: CertificateFiles
    registry: RegistryServer  # realm: the token server's HTTPS listener
    images: dict[str, PushedImage]

    @property
    def tls_realm_host(self) -> str:
        return f"127.0.0.1:{self.tokens.tls_port}"

    def registry_with_realm(self, realm: str, name: str) -> RegistryServer:
        """Another registry process serving the same storage, naming `realm` in its
        challenges (the realm is part of the registry's configuration)."""
        return start_registry(self.binary, self.root / name, self.storage,
                              token_auth(self.issuer, self.root, realm))


def token_auth(issuer: TokenIssuer, root: Path, realm: str) -> dict[str, Any]:
    """The registry's `auth: token:` section: trust JWTs from `issuer` for its service."""
    return {"token": {"realm": realm, "service": issuer.service, "issuer": issuer.issuer,
                      "rootcertbundle": str(issuer.bundle(root / "issuer.pem"))}}


@pytest.fixture(scope="module")
def private(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Private]:
    binary = require_registry_binary()
    root = tmp_path_factory.mktemp("private")
    certs = generate("token", "test", root / "certs", days=2, extra_sans=["127.0.0.1"])
    issuer = TokenIssuer()
    tokens = TokenServer(issuer, users=dict([ROBOT, PUSHER]),
                         grants={PUSHER[0]: ("pull", "push")}, tls=(certs.cert, certs.key))
    with ExitStack() as cleanup:
        tokens.start()
        cleanup.callback(tokens.stop)
        registry = start_registry(binary, root / "main", root / "storage",
                                  token_auth(issuer, root, tokens.tls_realm))
        cleanup.callback(registry.stop)
        pusher = Pusher(registry.url, token=lambda repository: fetch_token(
            tokens.tls_realm, issuer.service, f"repository:{repository}:pull,push", *PUSHER,
            cafile=certs.ca_cert))
        app = pusher.image_manifest("private/app", [layer(21_000), layer(7_000)], "linux/amd64",
                                    oci=False, tag="v1")
        tool = pusher.image_manifest("private/tool", [layer(5_000)], "linux/arm64", oci=True,
                                     tag="2")
        images = {"app": PushedImage("private/app", "v1", app.digest, (app,)),
                  "tool": PushedImage("private/tool", "2", tool.digest, (tool,))}
        yield Private(binary, root, root / "storage", issuer, tokens, certs, registry, images)


def config_for(path: Path, host: str) -> Path:
    """config.json as `docker login HOST` writes it: credentials for the registry host."""
    auth = base64.b64encode(":".join(ROBOT).encode()).decode()
    path.write_text(json.dumps({"auths": {host: {"auth": auth}}}))
    return path


def resolver(private: Private, config: Path, *, allow: tuple[str, ...] = (),
             insecure: tuple[str, ...] = ()) -> RegistryResolver:
    context = ssl.create_default_context(cafile=str(private.certs.ca_cert))
    stats = ResolverStats()
    client = RegistryClient(HostPolicy.build(allow=allow, insecure=insecure),
                            load_docker_config(config), ssl_context=context,
                            on_request=stats.on_request)
    return RegistryResolver(client, stats=stats)


def layers(image: PushedImage) -> tuple[Layer, ...]:
    return tuple(Layer(d, s) for d, s in image.platforms[0].layers)


async def test_registry_credentials_reach_its_listed_token_service(private: Private,
                                                                   tmp_path: Path) -> None:
    host = private.registry.host
    subject = resolver(private, config_for(tmp_path / "config.json", host),
                       allow=(private.tls_realm_host,), insecure=(host,))
    mark = len(private.tokens.requests)
    for key in ("app", "tool", "app"):
        pushed = private.images[key]
        image = await subject.resolve(parse_image(pushed.ref(host)))
        assert image is not None and image.digest == pushed.digest
        assert [p.layers for p in image.platforms.values()] == [layers(pushed)]
    await subject.close()
    seen = private.tokens.since(mark)
    # The robot's Basic credentials reached the HTTPS realm once per repository scope (one
    # token served the HEAD, the manifest and the config blob of that repository).
    assert [(r.port, r.basic(), r.query["scope"]) for r in seen] == [
        (private.tokens.tls_port, ROBOT, "repository:private/app:pull"),
        (private.tokens.tls_port, ROBOT, "repository:private/tool:pull"),
    ]
    assert {r.query["service"] for r in seen} == {private.issuer.service}


@pytest.mark.parametrize("where", ["unlisted address", "listed host, another port"])
async def test_realm_not_allowed_is_never_contacted(private: Private, tmp_path: Path,
                                                    where: str) -> None:
    counter = ConnectionCounter("127.0.0.2" if where == "unlisted address" else "127.0.0.1")
    await counter.start()
    realm_host = f"{counter.host}:{counter.port}"
    registry = private.registry_with_realm(f"https://{realm_host}/token", "refused")
    try:
        subject = resolver(private, config_for(tmp_path / "config.json", registry.host),
                           allow=(private.tls_realm_host,), insecure=(registry.host,))
        ref = parse_image(private.images["app"].ref(registry.host))
        mark = len(private.tokens.requests)
        assert await subject.resolve(ref) is None
        await subject.close()
    finally:
        registry.stop()
        await counter.stop()
    assert counter.connections == 0
    assert private.tokens.since(mark) == []
    assert subject.stats.failures == {"refused": 1}
    reason = subject.failure(ref)
    assert reason is not None and f"token realm {realm_host} refused" in reason


@pytest.mark.parametrize("insecure", [False, True])
async def test_plain_http_realm_needs_an_insecure_listing(private: Private, tmp_path: Path,
                                                          insecure: bool) -> None:
    realm_host = f"127.0.0.1:{private.tokens.port}"  # the token server's plain listener
    registry = private.registry_with_realm(private.tokens.realm, f"plain-{insecure}")
    try:
        listed = {"allow": (), "insecure": (registry.host, realm_host)} if insecure else \
            {"allow": (realm_host,), "insecure": (registry.host,)}
        subject = resolver(private, config_for(tmp_path / "config.json", registry.host),
                           **listed)
        ref = parse_image(private.images["app"].ref(registry.host))
        mark = len(private.tokens.requests)
        image = await subject.resolve(ref)
        await subject.close()
    finally:
        registry.stop()
    seen = [(r.port, r.basic()) for r in private.tokens.since(mark)]
    if insecure:
        assert image is not None and image.digest == private.images["app"].digest
        assert seen == [(private.tokens.port, ROBOT)]
    else:
        assert image is None and seen == []
        reason = subject.failure(ref)
        assert reason is not None and "plain HTTP is not allowed" in reason


async def test_a_challenge_from_a_redirect_target_gets_no_credentials(
    private: Private, proxy_factory: Any, tmp_path: Path,
) -> None:
    """The image's registry redirects to the real registry, which answers 401 naming the listed
    HTTPS realm: the credentials of the image's registry go neither there nor to the realm."""
    app = private.images["app"]
    target = f"{private.registry.url}/v2/{app.repository}/manifests/{app.tag}"
    front = await proxy_factory(private.registry.url,
                                answer=(307, b"", {"Location": target}))
    subject = resolver(private, config_for(tmp_path / "config.json", front.host),
                       allow=(private.tls_realm_host,),
                       insecure=(front.host, private.registry.host))
    mark = len(private.tokens.requests)
    assert await subject.resolve(parse_image(app.ref(front.host))) is None
    await subject.close()
    seen = private.tokens.since(mark)
    assert [r.basic() for r in seen if r.basic() is not None] == []
    assert seen == []  # the redirect target's challenge is not answered at all
    assert subject.stats.failures == {"unauthorized": 1}


def test_catalog_build_writes_a_private_image(private: Private, tmp_path: Path) -> None:
    host = private.registry.host
    app = private.images["app"]
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": [{
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}, "spec": {},
        "status": {"nodeInfo": {"operatingSystem": "linux", "architecture": "amd64"},
                   "images": [{"names": [app.pinned(host), app.ref(host)], "sizeBytes": 1}]},
    }]}))
    out = tmp_path / "catalog.json"
    code = main(["catalog", "build", "--nodes", str(nodes), "--out", str(out),
                 "--registry-insecure", host, "--registry-allow", private.tls_realm_host,
                 "--registry-ca", str(private.certs.ca_cert),
                 "--registry-auth", str(config_for(tmp_path / "config.json", host))], env={})
    assert code == 0
    catalog = StaticCatalog.load(out)
    assert [image.ref for image in catalog.images()] == [app.ref(host)]
    image = catalog.cached(parse_image(app.pinned(host)))
    assert image is not None and image.digest == app.digest
    assert [p.layers for p in image.platforms.values()] == [layers(app)]
