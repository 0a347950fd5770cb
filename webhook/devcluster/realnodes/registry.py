"""The cluster's registry: Debian's docker-registry (CNCF distribution) inside the namespace,
listening on every address there (port 5000), the only source of images (no internet).

Every node's containerd reaches it at that node's own IP (containerd.hosts_toml), so the
access log (Apache combined format, one line per request) tells which node fetched which
blob, and how many bytes the registry wrote: `blob_fetches` reads it."""

from __future__ import annotations

import re
import secrets
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webhook.devcluster.realnodes.network import REGISTRY_PORT

BINARY_NAMES = ("docker-registry", "registry")
_ACCESS = re.compile(
    r'^(?P<remote>\S+) \S+ \S+ \[[^\]]*\] "(?P<method>[A-Z]+) (?P<path>\S+) [^"]*" '
    r"(?P<status>\d{3}) (?P<bytes>\d+|-)")
_BLOB = re.compile(r"^/v2/(?P<repository>.+)/blobs/(?P<digest>sha256:[0-9a-f]{64})$")


def configuration(storage: Path) -> dict[str, Any]:
    return {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": False}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {"addr": f":{REGISTRY_PORT}", "secret": secrets.token_hex(16)},
    }


@dataclass(frozen=True, slots=True)
class BlobFetch:
    """One blob GET the registry answered: who asked (an IP), what, and the bytes it wrote."""

    remote: str
    repository: str
    digest: str
    status: int
    bytes: int


def blob_fetches(log: str) -> list[BlobFetch]:
    """Blob GETs in the access log (HEADs, manifests and uploads are left out)."""
    found = []
    for line in log.splitlines():
        match = _ACCESS.match(line.strip())
        if match is None or match["method"] != "GET":
            continue
        blob = _BLOB.match(match["path"].split("?", 1)[0])
        if blob is None:
            continue
        size = 0 if match["bytes"] == "-" else int(match["bytes"])
        found.append(BlobFetch(match["remote"].rsplit(":", 1)[0], blob["repository"],
                               blob["digest"], int(match["status"]), size))
    return found


def digests_by_node(fetches: Iterable[BlobFetch],
                    node_ips: Mapping[str, str]) -> dict[str, set[str]]:
    """Node name -> digests of the blobs it fetched successfully (`node_ips`: name -> IP)."""
    by_ip = {ip: name for name, ip in node_ips.items()}
    found: dict[str, set[str]] = defaultdict(set)
    for fetch in fetches:
        if fetch.remote in by_ip and fetch.status in (200, 206):
            found[by_ip[fetch.remote]].add(fetch.digest)
    return dict(found)


def bytes_by_node(fetches: Iterable[BlobFetch], node_ips: Mapping[str, str]) -> dict[str, int]:
    by_ip = {ip: name for name, ip in node_ips.items()}
    total: dict[str, int] = defaultdict(int)
    for fetch in fetches:
        if fetch.remote in by_ip and fetch.status in (200, 206):
            total[by_ip[fetch.remote]] += fetch.bytes
    return dict(total)
