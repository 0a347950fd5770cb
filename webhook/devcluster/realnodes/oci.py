"""Small OCI images built in pure Python (tar, gzip, sha256, JSON) and pushed to a CNCF
distribution registry over plain HTTP, for the real kubelets and containerd of the air-gapped
local cluster: the sandbox's pause image, and test images whose layers have chosen sizes and exact
sharing (an image built FROM a base reuses the base's Layer values, so its digests, byte for byte).

Everything is deterministic: the same inputs give the same bytes, hence the same digests."""

from __future__ import annotations

import hashlib
import io
import ipaddress
import json
import re
import struct
import tarfile
import urllib.error
import urllib.parse
import urllib.request
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from email.message import Message
from pathlib import Path
from typing import Any

OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_CONFIG = "application/vnd.oci.image.config.v1+json"
OCI_LAYER = "application/vnd.oci.image.layer.v1.tar+gzip"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
REF_NAME = "org.opencontainers.image.ref.name"
BUSYBOX_APPLETS = ("sh", "sleep", "cat", "nc", "echo", "ls", "true")
# The project's network rule: traffic only to loopback or the test network range.
PUSH_RANGES = ("127.0.0.0/8", "::1/128", "198.18.0.0/15")
_PUSH_NETWORKS = tuple(ipaddress.ip_network(network) for network in PUSH_RANGES)
_CHUNK = 1 << 20
_File = tuple[int, int, Iterable[bytes]]  # size, mode, content in chunks


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _json(document: object) -> bytes:
    return json.dumps(document, sort_keys=True, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class Layer:
    data: bytes = field(repr=False)  # the gzip-compressed tar: the blob a pull downloads
    digest: str  # sha256 of data
    diff_id: str  # sha256 of the uncompressed tar (the config's rootfs.diff_ids)
    size: int  # len(data)


def _clean(path: str) -> str:
    parts = [part for part in path.split("/") if part not in ("", ".")]
    if not parts or ".." in parts:
        raise ValueError(f"not a path in an image: {path!r}")
    return "/".join(parts)


def _layer(files: Mapping[str, _File], symlinks: Mapping[str, str] = {},
           level: int = 6) -> Layer:
    """A gzip tar of `files`, `symlinks` and their parent directories (0o755), sorted by name
    (a parent sorts before what it holds). Streamed: a 100 MiB filler is never held whole."""
    entries: dict[str, tuple[tarfile.TarInfo, Iterable[bytes]]] = {}

    def add(path: str, kind: bytes, mode: int, size: int = 0, link: str = "",
            chunks: Iterable[bytes] = ()) -> None:
        info = tarfile.TarInfo(path)  # its defaults fix mtime 0, uid/gid 0, no owner names
        info.type, info.mode, info.size, info.linkname = kind, mode, size, link
        entries[path] = (info, chunks)

    for path, (size, mode, chunks) in files.items():
        add(_clean(path), tarfile.REGTYPE, mode, size, chunks=chunks)
    for path, target in symlinks.items():
        add(_clean(path), tarfile.SYMTYPE, 0o777, link=target)
    for name in list(entries):
        parts = name.split("/")
        for parent in ("/".join(parts[:end]) for end in range(1, len(parts))):
            if parent not in entries:
                add(parent, tarfile.DIRTYPE, 0o755)
            elif entries[parent][0].type != tarfile.DIRTYPE:
                raise ValueError(f"{parent!r} is both a file and the directory of {name!r}")
    tar_hash = hashlib.sha256()
    gz = zlib.compressobj(level, zlib.DEFLATED, 31)  # 31: a gzip wrapper, mtime 0, no name
    out = io.BytesIO()

    def emit(chunk: bytes) -> None:
        tar_hash.update(chunk)
        out.write(gz.compress(chunk))

    for name in sorted(entries):
        info, chunks = entries[name]
        emit(info.tobuf(tarfile.PAX_FORMAT))
        for chunk in chunks:
            emit(chunk)
        emit(bytes(-info.size % 512))  # pad the content to a whole block
    emit(bytes(1024))  # the end of the archive: two zero blocks
    out.write(gz.flush())
    data = out.getvalue()
    return Layer(data, _sha256(data), "sha256:" + tar_hash.hexdigest(), len(data))


def files_layer(files: Mapping[str, bytes | tuple[bytes, int]],
                symlinks: Mapping[str, str] = {}) -> Layer:
    """A layer holding `files` (path -> content, or (content, mode); mode 0o644 by default)
    and `symlinks` (path -> target)."""
    entries: dict[str, _File] = {}
    for path, item in files.items():
        content, mode = item if isinstance(item, tuple) else (item, 0o644)
        entries[path] = (len(content), mode, (content,))
    return _layer(entries, symlinks)


def binary_layer(path_in_image: str, binary: Path) -> Layer:
    """A layer with one executable (0o755) at `path_in_image`."""
    data = binary.read_bytes()
    return _layer({path_in_image: (len(data), 0o755, (data,))})


def _static(binary: Path, hint: str) -> Path:
    """`binary`, checked: it exists, and if it is an ELF64 executable it names no program
    interpreter (PT_INTERP), which would be a libc the image does not have."""
    try:
        data = binary.read_bytes()
    except FileNotFoundError:
        raise FileNotFoundError(f"{binary} is missing: {hint}") from None
    if data[:6] == b"\x7fELF\x02\x01":
        (table,) = struct.unpack_from("<Q", data, 32)
        entry_size, count = struct.unpack_from("<HH", data, 54)
        if any(struct.unpack_from("<I", data, table + i * entry_size)[0] == 3
               for i in range(count)):
            raise ValueError(f"{binary} is dynamically linked, the image has no libc: {hint}")
    return binary


def busybox_layer(busybox: Path = Path("/usr/bin/busybox")) -> Layer:
    """/bin/busybox (static) and the applets the tests run, as symlinks next to it."""
    data = _static(busybox, "apt-get install -y busybox-static").read_bytes()
    return _layer({"/bin/busybox": (len(data), 0o755, (data,))},
                  {f"/bin/{applet}": "busybox" for applet in BUSYBOX_APPLETS})


def filler_layer(label: str, size: int) -> Layer:
    """A layer of about `size` compressed bytes: one file /filler/<label> of incompressible bytes
    derived from `label` (the same label and size give the same digest)."""
    if size < 0:
        raise ValueError(f"a layer size cannot be negative: {size}")
    # Random bytes leave deflate (level 1: fast) as stored blocks of 16 KiB, 5 bytes of framing
    # each; the gzip wrapper and the tar headers, compressed, add about 100 bytes.
    content = max(0, (size - 100) * 16384 // 16389)
    name = "/filler/" + (re.sub(r"[^A-Za-z0-9._-]+", "_", label)[:64] or "_")
    chunks = (hashlib.shake_256(f"{label}\0{offset}".encode()).digest(min(_CHUNK, content - offset))
              for offset in range(0, content, _CHUNK))
    return _layer({name: (content, 0o644, chunks)}, level=1)


@dataclass(frozen=True, slots=True)
class Image:
    repository: str
    tag: str
    layers: tuple[Layer, ...]
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...] = ()
    env: tuple[str, ...] = ("PATH=/bin",)
    user: str = ""

    def config_bytes(self) -> bytes:
        """The OCI image config (no created time: the bytes depend on the inputs only)."""
        config: dict[str, Any] = {"Entrypoint": list(self.entrypoint), "Env": list(self.env)}
        if self.cmd:
            config["Cmd"] = list(self.cmd)
        if self.user:
            config["User"] = self.user
        return _json({"architecture": "amd64", "os": "linux", "config": config,
                      "rootfs": {"type": "layers",
                                 "diff_ids": [layer.diff_id for layer in self.layers]}})

    def manifest_bytes(self) -> bytes:
        config = self.config_bytes()
        return _json({
            "schemaVersion": 2, "mediaType": OCI_MANIFEST,
            "config": {"mediaType": OCI_CONFIG, "digest": _sha256(config), "size": len(config)},
            "layers": [{"mediaType": OCI_LAYER, "digest": layer.digest, "size": layer.size}
                       for layer in self.layers],
        })

    @property
    def config_digest(self) -> str:
        return _sha256(self.config_bytes())

    @property
    def digest(self) -> str:
        return _sha256(self.manifest_bytes())

    @property
    def pull_bytes(self) -> int:
        """status.images sizeBytes on a containerd 2 node: manifest + config + layers."""
        return (len(self.manifest_bytes()) + len(self.config_bytes())
                + sum(layer.size for layer in self.layers))

    def ref(self, host: str) -> str:
        return f"{host}/{self.repository}:{self.tag}"

    def pinned(self, host: str) -> str:
        return f"{host}/{self.repository}@{self.digest}"


def pause_image(pause_binary: Path, repository: str = "ll/pause", tag: str = "3.10") -> Image:
    """The sandbox image: the static pause binary at /pause, its entrypoint."""
    layer = binary_layer("/pause", _static(pause_binary, "hack/node/build.sh builds it"))
    return Image(repository, tag, (layer,), ("/pause",))


def write_layout(directory: Path, image: Image) -> None:
    """Add `image` to the OCI image layout in `directory` under its tag (`skopeo copy
    oci:DIRECTORY:TAG ...`); other images there stay, one of the same tag is replaced."""
    blobs = directory / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    manifest = image.manifest_bytes()
    for data in (*(layer.data for layer in image.layers), image.config_bytes(), manifest):
        (blobs / _sha256(data).removeprefix("sha256:")).write_bytes(data)
    (directory / "oci-layout").write_bytes(_json({"imageLayoutVersion": "1.0.0"}))
    index = directory / "index.json"
    entries = json.loads(index.read_text())["manifests"] if index.exists() else []
    entries = [e for e in entries if e.get("annotations", {}).get(REF_NAME) != image.tag]
    entries.append({"mediaType": OCI_MANIFEST, "digest": image.digest, "size": len(manifest),
                    "annotations": {REF_NAME: image.tag}})
    index.write_bytes(_json({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": entries}))


class PushError(RuntimeError):
    """A push step failed or was refused; the message names the URL (and the HTTP status)."""


def allowed_push_host(host: str) -> bool:
    """Whether a push may go to `host`, an IP address (IPv6 with or without brackets, no port)
    in PUSH_RANGES. Names are refused: what they resolve to is not checked."""
    try:
        address = ipaddress.ip_address(host.removeprefix("[").removesuffix("]"))
    except ValueError:
        return False
    return any(address in network for network in _PUSH_NETWORKS)


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    # A redirect could lead outside the allowed hosts: a 3xx fails the step instead.
    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


# ProxyHandler({}): never an environment proxy, the request goes straight to the registry.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


def _send(method: str, url: str, expect: tuple[int, ...], body: bytes | None = None,
          content_type: str = "", *, timeout: float) -> tuple[int, Message]:
    """One request to an allowed host; its status and headers. PushError for another status."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not allowed_push_host(parts.hostname or ""):
        raise PushError(f"refusing {method} {url}: plain HTTP to {', '.join(PUSH_RANGES)} only")
    headers = {"Content-Type": content_type} if content_type else {}
    request = urllib.request.Request(url, data=body, method=method, headers=headers)
    detail = ""
    try:
        with _OPENER.open(request, timeout=timeout) as response:
            status, answer = response.status, response.headers
    except urllib.error.HTTPError as exc:
        status, answer = exc.code, exc.headers
        detail = exc.read()[:300].decode(errors="replace").strip()
    except OSError as exc:  # URLError, timeouts, refused connections
        raise PushError(f"{method} {url}: {exc}") from exc
    if status not in expect:
        raise PushError(f"{method} {url}: HTTP {status} {detail}".rstrip())
    return status, answer


def push(base_url: str, image: Image, *, timeout: float = 60, mount_from: str = "") -> None:
    """Push `image` to the registry at `base_url` as `docker push` does: each blob the
    repository lacks (HEAD) is uploaded monolithically (POST, then PUT with the digest), then
    the manifest is PUT under the tag. Distribution links blobs per repository: `mount_from`
    (a repository of the same registry, say the base's) mounts what it has instead of an upload."""
    base = base_url.rstrip("/")
    repository = f"{base}/v2/{image.repository}"
    config = image.config_bytes()
    for digest, data in ({layer.digest: layer.data for layer in image.layers}
                         | {_sha256(config): config}).items():
        if _send("HEAD", f"{repository}/blobs/{digest}", (200, 404), timeout=timeout)[0] == 200:
            continue
        start = f"{repository}/blobs/uploads/"
        if mount_from:
            start += "?" + urllib.parse.urlencode({"mount": digest, "from": mount_from})
        status, headers = _send("POST", start, (201, 202), b"", timeout=timeout)
        if status == 201:
            continue  # mounted; 202: an upload session instead
        if not headers.get("Location"):
            raise PushError(f"POST {start}: HTTP {status} without a Location")
        # The Location may be relative or absolute and may already carry a query (_state).
        upload = urllib.parse.urljoin(base + "/", headers["Location"])
        separator = "&" if urllib.parse.urlsplit(upload).query else "?"
        _send("PUT", f"{upload}{separator}digest={urllib.parse.quote(digest)}", (201,), data,
              "application/octet-stream", timeout=timeout)
    manifest_url = f"{repository}/manifests/{image.tag}"
    _, headers = _send("PUT", manifest_url, (201,), image.manifest_bytes(), OCI_MANIFEST,
                       timeout=timeout)
    if headers.get("Docker-Content-Digest") != image.digest:
        raise PushError(f"PUT {manifest_url}: the registry stored "
                        f"{headers.get('Docker-Content-Digest')}, not {image.digest}")
