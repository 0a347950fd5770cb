"""Images pushed into the real registry (registry_fixture.py) through its HTTP API, as `docker
push` does: Docker and OCI manifests, an index and a manifest list, random layers; and the
`registry_images` fixture (registered in conftest.py): the open registry with the test images
pushed, once per module that asks for it."""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.integration.registry_fixture import (
    RegistryServer,
    exchange,
    require_registry_binary,
    start_registry,
)
from webhook.registry.manifest import DOCKER_LIST, DOCKER_MANIFEST, OCI_INDEX, OCI_MANIFEST

OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
DOCKER_CONFIG = "application/vnd.docker.container.image.v1+json"
DOCKER_LAYER = "application/vnd.docker.image.rootfs.diff.tar.gzip"


def sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class PushedPlatform:
    platform: str
    digest: str
    layers: tuple[tuple[str, int], ...]


@dataclass(frozen=True)
class PushedImage:
    repository: str
    tag: str
    digest: str  # what the tag points to (index or manifest)
    platforms: tuple[PushedPlatform, ...]

    def ref(self, host: str) -> str:
        return f"{host}/{self.repository}:{self.tag}"

    def pinned(self, host: str) -> str:
        return f"{host}/{self.repository}@{self.digest}"

    def platform(self, name: str) -> PushedPlatform:
        return next(p for p in self.platforms if p.platform == name)


class Pusher:
    """Blob uploads (POST, then PUT with the digest) and manifest PUTs, as `docker push`.
    `token(repository)` gives a Bearer token with push access for a registry with token auth."""

    def __init__(self, base_url: str, token: Callable[[str], str] | None = None) -> None:
        self.base = base_url
        self.token = token

    def _auth(self, repository: str) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token(repository)}"} if self.token else {}

    def blob(self, repository: str, data: bytes) -> tuple[str, int]:
        status, headers, body = exchange("POST", f"{self.base}/v2/{repository}/blobs/uploads/",
                                         headers=self._auth(repository))
        assert status == 202, (status, body)
        location = headers["Location"]
        if location.startswith("/"):
            location = self.base + location
        digest = sha256(data)
        sep = "&" if "?" in location else "?"
        status, _, body = exchange("PUT", f"{location}{sep}digest={digest}", data,
                                   {"Content-Type": "application/octet-stream",
                                    **self._auth(repository)})
        assert status == 201, (status, body)
        return digest, len(data)

    def manifest(self, repository: str, reference: str, document: dict[str, Any]) -> str:
        body = json.dumps(document, indent=3).encode()  # not canonical: hashes must use bytes
        status, headers, answer = exchange(
            "PUT", f"{self.base}/v2/{repository}/manifests/{reference}", body,
            {"Content-Type": document["mediaType"], **self._auth(repository)},
        )
        assert status == 201, (status, answer)
        assert headers["Docker-Content-Digest"] == sha256(body)
        return sha256(body)

    def image_manifest(self, repository: str, layers: list[bytes], platform: str,
                       oci: bool, tag: str | None = None,
                       diff_ids: list[str] | None = None) -> PushedPlatform:
        """`diff_ids`: the uncompressed layers' digests, for a runtime that unpacks."""
        os_name, arch, *variant = platform.split("/")
        config: dict[str, Any] = {"architecture": arch, "os": os_name,
                                  "rootfs": {"type": "layers", "diff_ids": diff_ids or []}}
        if variant:
            config["variant"] = variant[0]
        config_digest, config_size = self.blob(repository, json.dumps(config).encode())
        descriptors = [self.blob(repository, data) for data in layers]
        document = {
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST if oci else DOCKER_MANIFEST,
            "config": {"mediaType": OCI_CONFIG if oci else DOCKER_CONFIG,
                       "digest": config_digest, "size": config_size},
            "layers": [{"mediaType": OCI_LAYER if oci else DOCKER_LAYER, "digest": d, "size": s}
                       for d, s in descriptors],
        }
        reference = tag
        body_digest = sha256(json.dumps(document, indent=3).encode())
        digest = self.manifest(repository, reference or body_digest, document)
        return PushedPlatform(platform, digest, tuple(descriptors))

    def index(self, repository: str, tag: str, children: list[PushedPlatform],
              oci: bool, attestation: bool = False) -> str:
        entries: list[dict[str, Any]] = []
        for child in children:
            os_name, arch, *variant = child.platform.split("/")
            platform: dict[str, str] = {"os": os_name, "architecture": arch}
            if variant:
                platform["variant"] = variant[0]
            entries.append({"mediaType": OCI_MANIFEST if oci else DOCKER_MANIFEST,
                            "digest": child.digest, "size": 1, "platform": platform})
        if attestation:
            entries.append({"mediaType": OCI_MANIFEST, "digest": children[0].digest, "size": 1,
                            "platform": {"os": "unknown", "architecture": "unknown"},
                            "annotations": {"vnd.docker.reference.type": "attestation-manifest"}})
        for entry, child in zip(entries, children, strict=False):
            entry["size"] = len(_manifest_bytes(self.base, repository, child.digest,
                                                 self._auth(repository)))
        document = {"schemaVersion": 2, "mediaType": OCI_INDEX if oci else DOCKER_LIST,
                    "manifests": entries}
        return self.manifest(repository, tag, document)


def _manifest_bytes(base: str, repository: str, digest: str,
                    auth: dict[str, str]) -> bytes:
    status, _, body = exchange("GET", f"{base}/v2/{repository}/manifests/{digest}",
                               headers={"Accept": f"{OCI_MANIFEST}, {DOCKER_MANIFEST}", **auth})
    assert status == 200
    return body


def layer(size: int) -> bytes:
    """Random bytes behind a gzip magic: real-looking, incompressible layer content."""
    return b"\x1f\x8b\x08\x00" + os.urandom(size - 4)


@dataclass
class RegistryImages:
    """The open registry with its pushed images; `storage` can back other instances."""

    server: RegistryServer
    storage: Path
    binary: str
    images: dict[str, PushedImage] = field(default_factory=dict)
    shared_base: tuple[tuple[str, int], ...] = ()

    @property
    def host(self) -> str:
        return self.server.host


def push_test_images(pusher: Pusher) -> tuple[dict[str, PushedImage], tuple[tuple[str, int], ...]]:
    images: dict[str, PushedImage] = {}
    base_layers = [layer(40_000), layer(25_000)]
    # Docker v2 single-arch base image, and an app built FROM it (shares both base layers).
    base = pusher.image_manifest("library/base", base_layers, "linux/amd64", oci=False, tag="1")
    images["base"] = PushedImage("library/base", "1", base.digest, (base,))
    app = pusher.image_manifest("team/app", [*base_layers, layer(12_000)], "linux/amd64",
                                oci=False, tag="v1")
    images["app"] = PushedImage("team/app", "v1", app.digest, (app,))
    # An OCI single manifest for arm64 (its platform comes from the config blob).
    tool = pusher.image_manifest("oci/tool", [layer(9_000)], "linux/arm64", oci=True,
                                 tag="latest")
    images["tool"] = PushedImage("oci/tool", "latest", tool.digest, (tool,))
    # A multi-arch OCI index: amd64 and arm64 with different layers, plus an attestation entry.
    amd64 = pusher.image_manifest("multi/arch", [layer(30_000), layer(8_000)], "linux/amd64",
                                  oci=True)
    arm64 = pusher.image_manifest("multi/arch", [layer(28_000)], "linux/arm64/v8", oci=True)
    digest = pusher.index("multi/arch", "2.0", [amd64, arm64], oci=True, attestation=True)
    images["multi"] = PushedImage("multi/arch", "2.0", digest, (amd64, arm64))
    # A Docker manifest list (amd64 + arm/v7).
    l_amd = pusher.image_manifest("list/img", [layer(6_000)], "linux/amd64", oci=False)
    l_arm = pusher.image_manifest("list/img", [layer(5_000)], "linux/arm/v7", oci=False)
    digest = pusher.index("list/img", "3", [l_amd, l_arm], oci=False)
    images["list"] = PushedImage("list/img", "3", digest, (l_amd, l_arm))
    shared = tuple((sha256(data), len(data)) for data in base_layers)
    return images, shared


@pytest.fixture(scope="module")
def registry_images(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RegistryImages]:
    """The real registry (no auth) on 127.0.0.1 with the test images pushed (per module)."""
    binary = require_registry_binary()
    root = tmp_path_factory.mktemp("registry")
    storage = root / "storage"
    server = start_registry(binary, root / "open", storage)
    try:
        images, shared = push_test_images(Pusher(server.url))
        yield RegistryImages(server, storage, binary, images, shared)
    finally:
        server.stop()
