"""The static layer catalog: a JSON file mapping image references and digests to layers.

Format (documented in docs/configuration.md and ../shared/DESIGN.md):
    {"images": [{"ref": "docker.io/library/python:3.11-slim", "digest": "sha256:...",
                 "platforms": {"linux/amd64": {"digest": "sha256:...",
                                               "layers": [{"digest": "sha256:...", "size": 1}]}}}]}
A reference with a digest matches by digest only (content-addressed: any repository); a tagged
reference matches an entry's normalised `ref`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TypedDict

import orjson

from webhook.core.images import ImageRef, ImageRefError, is_digest, parse_image
from webhook.core.layers import ImageLayers, Layer, Platform, PlatformLayers


class LayerDoc(TypedDict):
    digest: str
    size: int


class PlatformDoc(TypedDict):
    digest: str
    layers: list[LayerDoc]


class ImageDoc(TypedDict):
    ref: str
    digest: str
    platforms: dict[str, PlatformDoc]


class CatalogDoc(TypedDict):
    images: list[ImageDoc]


class CatalogError(ValueError):
    """The catalog file is not in the documented format."""


class StaticCatalog:
    """An in-memory catalog; a `LayerSource` whose `resolve` never does I/O."""

    def __init__(self, images: Iterable[ImageLayers] = ()) -> None:
        self._by_ref: dict[str, ImageLayers] = {}
        self._by_digest: dict[str, ImageLayers] = {}
        for image in images:
            self.add(image)

    def add(self, image: ImageLayers) -> None:
        try:
            tagged = parse_image(image.ref).tagged
        except ImageRefError:
            tagged = None
        if tagged is not None:
            self._by_ref[tagged] = image
        for digest in image.digests():
            self._by_digest[digest] = image

    def __len__(self) -> int:
        return len({id(image) for image in self._by_digest.values()})

    def images(self) -> list[ImageLayers]:
        unique = {id(image): image for image in self._by_digest.values()}
        return sorted(unique.values(), key=lambda image: image.ref)

    def cached(self, ref: ImageRef) -> ImageLayers | None:
        if ref.digest is not None:
            return self._by_digest.get(ref.digest)
        tagged = ref.tagged
        return self._by_ref.get(tagged) if tagged is not None else None

    async def resolve(self, ref: ImageRef) -> ImageLayers | None:
        return self.cached(ref)

    @classmethod
    def load(cls, path: Path) -> StaticCatalog:
        try:
            raw = orjson.loads(path.read_bytes())
        except (OSError, orjson.JSONDecodeError) as exc:
            raise CatalogError(f"cannot read catalog {path}: {exc}") from exc
        return cls(parse_catalog(raw, source=str(path)))


def parse_catalog(raw: object, source: str = "catalog") -> list[ImageLayers]:
    """Validate a decoded catalog document; errors name the offending entry."""
    if not isinstance(raw, Mapping) or not isinstance(raw.get("images"), list):
        raise CatalogError(f"{source}: expected an object with an 'images' list")
    images = []
    for i, entry in enumerate(raw["images"]):
        where = f"{source}: images[{i}]"
        if not isinstance(entry, Mapping):
            raise CatalogError(f"{where}: expected an object")
        ref, digest, platforms = entry.get("ref"), entry.get("digest"), entry.get("platforms")
        if not isinstance(ref, str) or not isinstance(digest, str) or not is_digest(digest):
            raise CatalogError(f"{where}: needs a string 'ref' and a sha256 'digest'")
        if not isinstance(platforms, Mapping) or not platforms:
            raise CatalogError(f"{where}: needs a non-empty 'platforms' object")
        parsed: dict[Platform, PlatformLayers] = {}
        for name, doc in platforms.items():
            try:
                platform = Platform.parse(name)
            except ValueError as exc:
                raise CatalogError(f"{where}: {exc}") from exc
            parsed[platform] = _parse_platform(doc, f"{where}.platforms[{name}]")
        images.append(ImageLayers(ref=ref, digest=digest, platforms=parsed))
    return images


def _parse_platform(doc: object, where: str) -> PlatformLayers:
    if not isinstance(doc, Mapping):
        raise CatalogError(f"{where}: expected an object")
    digest, layers = doc.get("digest"), doc.get("layers")
    if not isinstance(digest, str) or not is_digest(digest) or not isinstance(layers, list):
        raise CatalogError(f"{where}: needs a sha256 'digest' and a 'layers' list")
    parsed = []
    for layer in layers:
        if (
            not isinstance(layer, Mapping)
            or not isinstance(layer.get("digest"), str)
            or not is_digest(layer["digest"])
            or not isinstance(layer.get("size"), int)
            or isinstance(layer.get("size"), bool)
            or layer["size"] < 0
        ):
            raise CatalogError(f"{where}: each layer needs a sha256 'digest' and a size >= 0")
        parsed.append(Layer(digest=layer["digest"], size=layer["size"]))
    return PlatformLayers(digest=digest, layers=tuple(parsed))


def catalog_document(images: Iterable[ImageLayers]) -> CatalogDoc:
    """The wire form of `images`, for `catalog build` and the demo data."""
    return {
        "images": [
            {
                "ref": image.ref,
                "digest": image.digest,
                "platforms": {
                    str(platform): {
                        "digest": manifest.digest,
                        "layers": [{"digest": x.digest, "size": x.size} for x in manifest.layers],
                    }
                    for platform, manifest in sorted(image.platforms.items())
                },
            }
            for image in images
        ]
    }
