"""The cluster's registry: Debian's docker-registry (CNCF distribution) inside the namespace,
listening on every address there (port 5000), the only source of images (no internet). With a
registry bandwidth it listens on 198.18.0.1 only, and a throttle (throttle.py) takes the node
IPs' port 5000, forwarding the bytes unchanged.

Every node's containerd reaches it at that node's own IP (containerd.hosts_toml), so the
request's Host in the registry's own log tells which node fetched which blob, and the log says
how many bytes the registry wrote: `blob_fetches` reads the "response completed" lines. (The
source address cannot tell: every node IP sits on one interface of one namespace, and the
kernel picks its primary address, 198.18.0.1, as the source of every local connection.)"""

from __future__ import annotations

import re
import secrets
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from webhook.devcluster.realnodes.network import REGISTRY_PORT

BINARY_NAMES = ("docker-registry", "registry")  # Debian's name, then upstream's
_FIELD = re.compile(r'([\w.]+)=("(?:[^"\\]|\\.)*"|\S*)')
_BLOB = re.compile(r"^/v2/(?P<repository>.+)/blobs/(?P<digest>sha256:[0-9a-f]{64})$")


def registry_binary() -> Path | None:
    """The CNCF distribution binary on PATH, or in /usr/bin (a PATH without it), or None."""
    for name in BINARY_NAMES:
        found = shutil.which(name) or shutil.which(name, path="/usr/bin")
        if found:
            return Path(found)
    return None


def configuration(storage: Path, host: str = "") -> dict[str, Any]:
    """`host`: the one address to listen on; "" for every address of the namespace."""
    return {
        "version": 0.1,
        "log": {"level": "info", "accesslog": {"disabled": False}},
        "storage": {"filesystem": {"rootdirectory": str(storage)}, "delete": {"enabled": True}},
        "http": {"addr": f"{host}:{REGISTRY_PORT}", "secret": secrets.token_hex(16)},
    }


@dataclass(frozen=True, slots=True)
class BlobFetch:
    """One blob GET the registry answered: the address it was asked at (a node's IP), what,
    and the bytes it wrote."""

    host: str
    repository: str
    digest: str
    status: int
    bytes: int


def _fields(line: str) -> dict[str, str]:
    return {key: value[1:-1] if value.startswith('"') else value
            for key, value in _FIELD.findall(line)}


def blob_fetches(log: str) -> list[BlobFetch]:
    """Blob GETs in the registry's log (HEADs, manifests and uploads are left out)."""
    found = []
    for line in log.splitlines():
        if 'msg="response completed"' not in line:
            continue
        fields = _fields(line)
        if fields.get("http.request.method") != "GET":
            continue
        blob = _BLOB.match(fields.get("http.request.uri", "").split("?", 1)[0])
        if blob is None:
            continue
        try:
            status = int(fields.get("http.response.status", "0"))
            size = int(fields.get("http.response.written", "0"))
        except ValueError:
            continue
        found.append(BlobFetch(fields.get("http.request.host", "").rsplit(":", 1)[0],
                               blob["repository"], blob["digest"], status, size))
    return found


def fetches_by_node(fetches: Iterable[BlobFetch],
                    node_ips: Mapping[str, str]) -> dict[str, list[tuple[str, int]]]:
    """Node name -> (digest, bytes) of each successful blob GET it made, in log order, every
    node of `node_ips` (name -> IP) present."""
    by_ip = {ip: name for name, ip in node_ips.items()}
    found: dict[str, list[tuple[str, int]]] = {name: [] for name in node_ips}
    for fetch in fetches:
        if fetch.host in by_ip and fetch.status in (200, 206):
            found[by_ip[fetch.host]].append((fetch.digest, fetch.bytes))
    return found


def digests_by_node(fetches: Iterable[BlobFetch],
                    node_ips: Mapping[str, str]) -> dict[str, set[str]]:
    """Node name -> digests of the blobs it fetched successfully (`node_ips`: name -> IP)."""
    return {name: {digest for digest, _ in got}
            for name, got in fetches_by_node(fetches, node_ips).items() if got}


def bytes_by_node(fetches: Iterable[BlobFetch], node_ips: Mapping[str, str]) -> dict[str, int]:
    return {name: sum(size for _, size in got)
            for name, got in fetches_by_node(fetches, node_ips).items() if got}
