"""The evaluation's images for real nodes: every image a scenario uses, built here as an OCI
image whose layers have the data set's sizes (times a stated `scale`) and its exact sharing
(a layer digest of the data set is one generated layer, whatever images hold it: an app FROM
an official image shares the base's blobs byte for byte), pushed to the cluster's registry.

Layer contents are generated (`oci.filler_layer`, incompressible, derived from the data set's
digest), so they cannot run anything: every image gets the pause image's own layer (the
static pause binary at /pause, its entrypoint) at the bottom. Every node holds that layer once
its first sandbox runs, so it adds no pull beyond the first.

The webhook is told the data set's sizes (`webhook_catalog`): with `scale` < 1 the blobs are
smaller but the decisions are the ones the real sizes call for, and registry bytes divided by
`scale` are the real-size figure. Built layers are cached on disk by (label, size)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webhook.core.layers import ImageLayers, Layer, Platform, PlatformLayers
from webhook.devcluster.realnodes import oci

AMD64 = Platform.parse("linux/amd64")
ENTRYPOINT = ("/pause",)
MIN_LAYER = 1024  # bytes: a scaled layer never vanishes (its sharing must stay visible)


@dataclass(frozen=True, slots=True)
class BuiltLayer:
    digest: str  # the generated blob's digest
    diff_id: str
    size: int  # the blob's size (scaled)
    source_size: int  # the data set's size: what the webhook is told


@dataclass(frozen=True, slots=True)
class BuiltImage:
    source: str  # the data set's (or the scenario's) reference
    repository: str  # in the cluster's registry
    tag: str
    layers: tuple[BuiltLayer, ...]  # the pause layer first

    def oci_image(self, blobs: Path | None = None) -> oci.Image:
        """The image; with `blobs`, its layers' bytes read from there (a few hundred MB at
        most), without, empty (the config and manifest name layers by digest only)."""
        return oci.Image(self.repository, self.tag, tuple(
            oci.Layer((blobs / layer.digest.removeprefix("sha256:")).read_bytes()
                      if blobs is not None else b"",
                      layer.digest, layer.diff_id, layer.size) for layer in self.layers),
            ENTRYPOINT)

    def config_digest(self) -> str:
        return self.oci_image().config_digest

    def manifest_digest(self) -> str:
        return self.oci_image().digest

    def ref(self, host: str) -> str:
        return f"{host}/{self.repository}:{self.tag}"


def repository_and_tag(ref: str) -> tuple[str, str]:
    """`docker.io/library/python:3.11` -> (`library/python`, `3.11`); a first component that
    names a registry (a dot, a port or localhost) is dropped, the path kept."""
    name, _, digest = ref.partition("@")
    if digest:
        raise ValueError(f"{ref!r}: a reference by digest cannot be rebuilt under a tag")
    slash = name.rfind("/")
    colon = name.rfind(":")
    tag = name[colon + 1:] if colon > slash else "latest"
    path = name[:colon] if colon > slash else name
    parts = path.split("/")
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        parts = parts[1:]
    if len(parts) == 1:
        parts = ["library", *parts]
    return "/".join(parts).lower(), tag


class LayerCache:
    """Generated layers on disk: blobs/sha256/<hex>, and an index by (label, size)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.blobs = root / "blobs"
        self.blobs.mkdir(parents=True, exist_ok=True)
        (root / "index").mkdir(exist_ok=True)

    def _write(self, layer: oci.Layer) -> None:
        path = self.blobs / layer.digest.removeprefix("sha256:")
        if not path.exists():
            partial = path.with_suffix(".partial")
            partial.write_bytes(layer.data)
            partial.rename(path)

    def filler(self, label: str, size: int) -> tuple[str, str, int]:
        key = hashlib.sha256(f"{label}\0{size}".encode()).hexdigest()
        entry = self.root / "index" / key
        if entry.exists() and (self.blobs / json.loads(entry.read_text())[0]
                               .removeprefix("sha256:")).exists():
            digest, diff_id, built = json.loads(entry.read_text())
            return str(digest), str(diff_id), int(built)
        layer = oci.filler_layer(label, size)
        self._write(layer)
        entry.write_text(json.dumps([layer.digest, layer.diff_id, layer.size]))
        return layer.digest, layer.diff_id, layer.size

    def add(self, layer: oci.Layer) -> None:
        self._write(layer)


def build(images: Iterable[ImageLayers], scale: float, pause: oci.Layer,
          cache: LayerCache) -> dict[str, BuiltImage]:
    """Source reference -> the built image, for every image with a linux/amd64 manifest."""
    if not 0 < scale <= 1:
        raise ValueError(f"scale must be within (0, 1]: {scale}")
    cache.add(pause)
    base = BuiltLayer(pause.digest, pause.diff_id, pause.size, pause.size)
    built: dict[str, BuiltImage] = {}
    taken: dict[tuple[str, str], str] = {}
    for image in images:
        manifest = image.for_platform(AMD64)
        if manifest is None:
            continue
        repository, tag = repository_and_tag(image.ref)
        if taken.setdefault((repository, tag), image.ref) != image.ref:
            raise ValueError(f"{image.ref} and {taken[(repository, tag)]} would both be "
                             f"{repository}:{tag}")
        layers = [base]
        for layer in manifest.layers:
            digest, diff_id, size = cache.filler(
                layer.digest, max(MIN_LAYER, round(layer.size * scale)))
            layers.append(BuiltLayer(digest, diff_id, size, layer.size))
        built[image.ref] = BuiltImage(image.ref, repository, tag, tuple(layers))
    return built


def webhook_catalog(built: Mapping[str, BuiltImage], host: str) -> list[ImageLayers]:
    """What the webhook serves from (`--catalog`): each image under its registry reference and
    digest, its layers by their built digests with the data set's sizes."""
    out = []
    for image in built.values():
        digest = image.manifest_digest()
        out.append(ImageLayers(ref=image.ref(host), digest=digest, platforms={
            AMD64: PlatformLayers(digest=digest, layers=tuple(
                Layer(layer.digest, layer.source_size) for layer in image.layers))}))
    return out


def document(built: Mapping[str, BuiltImage]) -> dict[str, Any]:
    return {"images": [{"source": i.source, "repository": i.repository, "tag": i.tag,
                        "layers": [[x.digest, x.diff_id, x.size, x.source_size]
                                   for x in i.layers]} for i in built.values()]}


def from_document(doc: Mapping[str, Any]) -> dict[str, BuiltImage]:
    out = {}
    for item in doc["images"]:
        layers = tuple(BuiltLayer(str(d), str(i), int(s), int(o)) for d, i, s, o in item["layers"])
        out[str(item["source"])] = BuiltImage(str(item["source"]), str(item["repository"]),
                                              str(item["tag"]), layers)
    return out


def push_all(built: Sequence[BuiltImage], blobs: Path, base_url: str) -> None:
    """Push every image (blobs already in a repository are skipped by the registry's HEAD)."""
    for image in built:
        oci.push(base_url, image.oci_image(blobs), timeout=300)
