"""OCI / Docker manifest documents -> layers, index entries, platforms. Pure: no I/O.

Accepted: OCI image index, Docker manifest list (v2 schema 2), OCI image manifest, Docker v2
schema 2 manifest. Schema 1 (signed or not) is refused: it has no compressed layer sizes.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

import orjson

from webhook.core.images import is_digest
from webhook.core.layers import Layer, Platform

OCI_INDEX = "application/vnd.oci.image.index.v1+json"
DOCKER_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
DOCKER_MANIFEST = "application/vnd.docker.distribution.manifest.v2+json"
SCHEMA1 = (
    "application/vnd.docker.distribution.manifest.v1+json",
    "application/vnd.docker.distribution.manifest.v1+prettyjws",
)
INDEX_TYPES = frozenset({OCI_INDEX, DOCKER_LIST})
IMAGE_TYPES = frozenset({OCI_MANIFEST, DOCKER_MANIFEST})
ACCEPT = ", ".join((OCI_INDEX, DOCKER_LIST, OCI_MANIFEST, DOCKER_MANIFEST))
DEFAULT_PLATFORM = Platform("linux", "amd64")


class ManifestError(ValueError):
    """The document is not a manifest this resolver understands."""


@dataclass(frozen=True, slots=True)
class IndexEntry:
    digest: str
    media_type: str
    platform: Platform | None  # None: no platform, or an attestation ("unknown/unknown")


@dataclass(frozen=True, slots=True)
class Manifest:
    media_type: str
    entries: tuple[IndexEntry, ...] = ()  # an index
    layers: tuple[Layer, ...] = ()  # an image manifest
    config_digest: str | None = None

    @property
    def is_index(self) -> bool:
        return self.media_type in INDEX_TYPES


def digest_of(body: bytes, algorithm: str = "sha256") -> str:
    if algorithm == "sha512":
        return "sha512:" + hashlib.sha512(body).hexdigest()
    return "sha256:" + hashlib.sha256(body).hexdigest()


def verify(body: bytes, digest: str) -> bool:
    algorithm = digest.partition(":")[0]
    return algorithm in ("sha256", "sha512") and digest_of(body, algorithm) == digest


def parse_manifest(body: bytes, content_type: str = "") -> Manifest:
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ManifestError(f"manifest is not JSON: {exc}") from exc
    if not isinstance(raw, Mapping):
        raise ManifestError("manifest is not a JSON object")
    media_type = raw.get("mediaType")
    header_type = content_type.split(";")[0].strip().lower()
    if raw.get("schemaVersion") == 1 or media_type in SCHEMA1 or header_type in SCHEMA1:
        raise ManifestError("schema 1 manifests are not supported")
    if raw.get("schemaVersion") != 2:
        raise ManifestError("manifest schemaVersion must be 2")
    if not isinstance(media_type, str):
        # OCI allows omitting mediaType; fall back to the header, then to the shape.
        if header_type in INDEX_TYPES | IMAGE_TYPES:
            media_type = header_type
        elif "manifests" in raw:
            media_type = OCI_INDEX
        elif "layers" in raw:
            media_type = OCI_MANIFEST
        else:
            raise ManifestError("cannot tell the manifest type")
    if media_type in INDEX_TYPES:
        return Manifest(media_type, entries=_entries(raw.get("manifests")))
    if media_type in IMAGE_TYPES:
        layers = _layers(raw.get("layers"))
        config = raw.get("config")
        config_digest = config.get("digest") if isinstance(config, Mapping) else None
        if not isinstance(config_digest, str) or not is_digest(config_digest):
            config_digest = None
        return Manifest(media_type, layers=layers, config_digest=config_digest)
    raise ManifestError(f"unsupported manifest media type {media_type!r}")


def _entries(raw: object) -> tuple[IndexEntry, ...]:
    if not isinstance(raw, list):
        raise ManifestError("index has no 'manifests' list")
    entries = []
    for item in raw:
        if not isinstance(item, Mapping):
            raise ManifestError("index entry is not an object")
        digest, media_type = item.get("digest"), item.get("mediaType", "")
        if not isinstance(digest, str) or not is_digest(digest) or not isinstance(media_type, str):
            raise ManifestError("index entry needs a digest")
        entries.append(IndexEntry(digest, media_type, _platform(item.get("platform"))))
    return tuple(entries)


def _platform(raw: object) -> Platform | None:
    if not isinstance(raw, Mapping):
        return None
    os_name, arch, variant = raw.get("os"), raw.get("architecture"), raw.get("variant", "")
    if not isinstance(os_name, str) or not isinstance(arch, str) or not isinstance(variant, str):
        return None
    if not os_name or not arch or "unknown" in (os_name, arch) or "/" in os_name + arch + variant:
        return None
    return Platform.of(os_name, arch, variant)


def _layers(raw: object) -> tuple[Layer, ...]:
    if not isinstance(raw, list):
        raise ManifestError("manifest has no 'layers' list")
    layers = []
    for item in raw:
        if not isinstance(item, Mapping):
            raise ManifestError("layer is not an object")
        digest, size = item.get("digest"), item.get("size")
        if (
            not isinstance(digest, str)
            or not is_digest(digest)
            or not isinstance(size, int)
            or isinstance(size, bool)
            or size < 0
        ):
            raise ManifestError("layer needs a digest and a size >= 0")
        layers.append(Layer(digest, size))
    return tuple(layers)


def config_platform(body: bytes) -> Platform | None:
    """The platform an image config blob declares (`os`, `architecture`, `variant`)."""
    try:
        raw = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    return _platform(raw)
