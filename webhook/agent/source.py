"""What the agent needs from a container runtime (`RuntimeSource`), and the runtime-neutral parts:
the node's platform and the choice of its manifest in an index. Only containerd implements the
protocol today (webhook/agent/containerd.py); docs/agent.md says what a CRI-O source would need.
"""

from __future__ import annotations

import platform as host
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Protocol

from webhook.core.layers import Platform
from webhook.registry.manifest import IMAGE_TYPES, IndexEntry

from .nodelayers import RuntimeImage

# platform.machine() -> GOARCH (and variant), as the runtime names platforms.
_MACHINES: Mapping[str, tuple[str, str]] = {
    "x86_64": ("amd64", ""), "amd64": ("amd64", ""),
    "aarch64": ("arm64", ""), "arm64": ("arm64", ""),
    "armv7l": ("arm", "v7"), "armv6l": ("arm", "v6"),
    "ppc64le": ("ppc64le", ""), "s390x": ("s390x", ""), "riscv64": ("riscv64", ""),
    "i686": ("386", ""), "i386": ("386", ""),
}


class SourceUnavailable(Exception):
    """The runtime cannot be reached (socket absent, daemon restarting): retry later."""


@dataclass(frozen=True, slots=True)
class Snapshot:
    images: tuple[RuntimeImage, ...]
    skipped: int  # images whose manifest (or platform manifest) is not in the content store
    unmatched: int = 0  # indexes without a manifest for the node's platform


class RuntimeSource(Protocol):
    """A node's container runtime, read-only: list images resolved to layers; tell changes."""

    runtime: str  # the NodeLayers spec.runtime value

    async def snapshot(self, platform: Platform) -> Snapshot:
        """Every image, resolved for `platform`. Raises SourceUnavailable."""
        ...

    def changes(self) -> AsyncIterator[str]:
        """Yields the topic of each image change until the runtime goes away
        (then raises SourceUnavailable)."""
        ...

    async def close(self) -> None: ...


def host_platform(os_name: str = "linux", machine: str | None = None) -> Platform:
    arch, variant = _MACHINES.get((machine or host.machine()).lower(), (machine or "", ""))
    return Platform.of(os_name, arch or "amd64", variant)


def node_platform(node: Mapping[str, object] | None) -> Platform | None:
    """The platform a Node object reports (status.nodeInfo), None when it does not."""
    status = node.get("status") if node else None
    info = status.get("nodeInfo") if isinstance(status, Mapping) else None
    if not isinstance(info, Mapping):
        return None
    os_name, arch = info.get("operatingSystem"), info.get("architecture")
    if not isinstance(os_name, str) or not isinstance(arch, str) or not os_name or not arch:
        return None
    # nodeInfo carries no variant; on arm the host's own variant is the best guess.
    variant = host_platform().variant if arch == host_platform().architecture else ""
    return Platform.of(os_name, arch, variant)


def pick_manifest(entries: tuple[IndexEntry, ...], wanted: Platform) -> str | None:
    """The index entry for `wanted`: exact os/arch/variant first, else the same os/arch when
    the node names no variant (amd64 v2/v3 levels), never another architecture."""
    images = [e for e in entries if e.platform is not None
              and (not e.media_type or e.media_type in IMAGE_TYPES)]
    for entry in images:
        if entry.platform == wanted:
            return entry.digest
    if not wanted.variant:
        for entry in images:
            assert entry.platform is not None
            if (entry.platform.os, entry.platform.architecture) == (wanted.os,
                                                                    wanted.architecture):
                return entry.digest
    return None
