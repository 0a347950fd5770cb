"""What an image is made of: per-platform layer lists, and the interface of layer sources.

A layer source (the static catalog, the registry resolver) turns an image reference into an
`ImageLayers`. Reviews use `cached` (no I/O, answers from memory); `resolve` may do I/O and is
awaited only within the review's time budget or in the background.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from operator import attrgetter
from typing import Protocol

from webhook.core.images import ImageRef

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True, order=True)
class Platform:
    os: str
    architecture: str
    variant: str = ""

    @classmethod
    def parse(cls, text: str) -> Platform:
        """`linux/amd64`, `linux/arm64/v8`; arm64 without a variant means v8 (as containerd)."""
        parts = text.split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise ValueError(f"invalid platform {text!r}: expected os/arch[/variant]")
        return cls.of(*parts)

    @classmethod
    def of(cls, os: str, architecture: str, variant: str = "") -> Platform:
        if architecture == "arm64" and variant in ("", "v8"):
            variant = ""
        return cls(os, architecture, variant)

    def __str__(self) -> str:
        return f"{self.os}/{self.architecture}" + (f"/{self.variant}" if self.variant else "")


@dataclass(frozen=True, slots=True)
class Layer:
    digest: str
    size: int  # compressed blob size from the manifest: what a pull downloads


_DIGEST = attrgetter("digest")


@dataclass(frozen=True, slots=True)
class PlatformLayers:
    digest: str  # the platform manifest's digest
    layers: tuple[Layer, ...]
    # The layers' digests as a set, made once: a node's layer set is the union of its images'
    # (5,000 nodes x 50 images at every relist), a set merge with no call per layer. Derived:
    # outside equality, hash and repr; a writer of manifests writes digest and layers only.
    layer_set: frozenset[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "layer_set", frozenset(map(_DIGEST, self.layers)))

    @property
    def size(self) -> int:
        return sum(layer.size for layer in self.layers)


@dataclass(frozen=True, slots=True)
class ImageLayers:
    """An image resolved to layers: `digest` is what the reference resolved to (an index or a
    single manifest); `platforms` holds one manifest per platform."""

    ref: str
    digest: str
    platforms: Mapping[Platform, PlatformLayers]

    def for_platform(self, platform: Platform) -> PlatformLayers | None:
        return self.platforms.get(platform)

    def digests(self) -> frozenset[str]:
        """Every digest that identifies this image: the index and each platform manifest."""
        return frozenset({self.digest, *(p.digest for p in self.platforms.values())})


class LayerSource(Protocol):
    def cached(self, ref: ImageRef) -> ImageLayers | None:
        """Answer from memory only; None when unknown (or not yet resolved)."""
        ...

    async def resolve(self, ref: ImageRef) -> ImageLayers | None:
        """Answer, doing I/O if needed; None when the image cannot be resolved."""
        ...


class SourceChain:
    """Layer sources asked in order (the catalog, then the registries): the first that knows
    an image answers. A source that fails counts as not knowing it."""

    def __init__(self, sources: Sequence[LayerSource]) -> None:
        self.sources = tuple(sources)

    def cached(self, ref: ImageRef) -> ImageLayers | None:
        for source in self.sources:
            image = source.cached(ref)
            if image is not None:
                return image
        return None

    async def resolve(self, ref: ImageRef) -> ImageLayers | None:
        for source in self.sources:
            try:
                image = await source.resolve(ref)
            except Exception as exc:  # a source's failure is a miss, never a denial
                log.debug("layer source %s failed for %s: %s", type(source).__name__, ref, exc)
                continue
            if image is not None:
                return image
        return None
