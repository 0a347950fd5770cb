"""Container image references: the Docker/OCI reference grammar and its normalisation.

Follows distribution/reference (`reference.go`, `normalize.go`): a first path component is a
registry only if it contains '.' or ':' or is 'localhost'; Docker Hub is `docker.io` (also
spelled `index.docker.io`) and single-component Hub names live under `library/`; a reference
with neither tag nor digest means `:latest`. Pure: no I/O.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

DOCKER_HUB = "docker.io"
_HUB_ALIASES = frozenset({"docker.io", "index.docker.io", "registry-1.docker.io"})
_MAX_NAME_LENGTH = 255

_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN_RE = re.compile(
    rf"^(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:.]+\])(?::[0-9]+)?$"
)
_PATH_COMPONENT_RE = re.compile(r"^[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*$")
_TAG_RE = re.compile(r"^[\w][\w.-]{0,127}$")
# Only the algorithms registries actually use; anything else cannot be matched against content.
_DIGEST_RE = re.compile(r"^(?:sha256:[a-f0-9]{64}|sha512:[a-f0-9]{128})$")


class ImageRefError(ValueError):
    """The string is not a valid image reference."""


@dataclass(frozen=True, slots=True)
class ImageRef:
    """A normalised image reference. `tag` is None only when a digest pins the image."""

    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def name(self) -> str:
        """`registry/repository`, the part shared by every tag of the image."""
        return f"{self.registry}/{self.repository}"

    @property
    def tagged(self) -> str | None:
        """`registry/repository:tag`, the key a catalog entry's `ref` uses."""
        return f"{self.name}:{self.tag}" if self.tag is not None else None

    def __str__(self) -> str:
        text = self.name
        if self.tag is not None:
            text += f":{self.tag}"
        if self.digest is not None:
            text += f"@{self.digest}"
        return text


@functools.lru_cache(maxsize=8192)
def parse_image(reference: str) -> ImageRef:
    """Parse and normalise `reference`; raise ImageRefError with the reason when invalid.

    Memoised (bounded): the same few hundred image strings arrive with every review and node
    update, and ImageRef is immutable. Invalid references raise each time (not cached)."""
    if not reference or reference != reference.strip():
        raise ImageRefError(f"invalid image reference {reference!r}: empty or padded")
    remainder, digest = _split_digest(reference)
    remainder, tag = _split_tag(remainder)
    registry, repository = _split_registry(remainder)
    if len(registry) + 1 + len(repository) > _MAX_NAME_LENGTH:
        raise ImageRefError(f"invalid image reference {reference!r}: name longer than 255")
    if repository.lower() != repository:
        raise ImageRefError(f"invalid image reference {reference!r}: repository must be lowercase")
    for component in repository.split("/"):
        if not _PATH_COMPONENT_RE.match(component):
            raise ImageRefError(
                f"invalid image reference {reference!r}: bad path component {component!r}"
            )
    if tag is None and digest is None:
        tag = "latest"
    return ImageRef(registry=registry, repository=repository, tag=tag, digest=digest)


def try_parse(reference: str) -> ImageRef | None:
    """parse_image, or None for an invalid reference (image names from nodes and pods that
    the API server would reject anyway)."""
    try:
        return parse_image(reference)
    except ImageRefError:
        return None


def is_digest(value: str) -> bool:
    return _DIGEST_RE.match(value) is not None


def _split_digest(reference: str) -> tuple[str, str | None]:
    if "@" not in reference:
        return reference, None
    remainder, digest = reference.split("@", 1)
    if not _DIGEST_RE.match(digest):
        raise ImageRefError(f"invalid image reference {reference!r}: bad digest {digest!r}")
    return remainder, digest


def _split_tag(remainder: str) -> tuple[str, str | None]:
    # A ':' after the last '/' separates the tag; one before it belongs to a registry port.
    slash = remainder.rfind("/")
    colon = remainder.rfind(":")
    if colon <= slash:
        return remainder, None
    tag = remainder[colon + 1 :]
    if not _TAG_RE.match(tag):
        raise ImageRefError(f"invalid image reference: bad tag {tag!r}")
    return remainder[:colon], tag


def _split_registry(name: str) -> tuple[str, str]:
    first, sep, rest = name.partition("/")
    is_registry = bool(sep) and (
        "." in first or ":" in first or first == "localhost" or first.lower() != first
    )
    if not is_registry:
        registry, repository = DOCKER_HUB, name
    else:
        if not _DOMAIN_RE.match(first):
            raise ImageRefError(f"invalid image reference: bad registry {first!r}")
        registry, repository = first, rest
    if registry.lower() in _HUB_ALIASES:
        registry = DOCKER_HUB
        if "/" not in repository:
            repository = f"library/{repository}"
    if not repository:
        raise ImageRefError("invalid image reference: empty repository")
    return registry, repository
