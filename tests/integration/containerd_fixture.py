"""A real containerd for the node agent's tests: Debian's `containerd` started as root with its
own root, state and socket under a temp dir (native snapshotter, CRI and the other plugins it does
not need disabled, so it boots in a fraction of a second), images pushed to the real
docker-registry on 127.0.0.1 and pulled with `ctr images pull --plain-http`.

Not root, or no containerd/ctr: the tests skip with the reason, or fail when env CI is set.
"""

from __future__ import annotations

import gzip
import io
import json
import os
import shutil
import subprocess
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.integration.registry_fixture import (
    DOCKER_CONFIG,
    DOCKER_LAYER,
    OCI_CONFIG,
    OCI_LAYER,
    PushedImage,
    PushedPlatform,
    Pusher,
    sha256,
)
from webhook.registry.manifest import DOCKER_MANIFEST, OCI_MANIFEST

DISABLED_PLUGINS = [
    "io.containerd.grpc.v1.cri",
    *(f"io.containerd.snapshotter.v1.{name}"
      for name in ("aufs", "btrfs", "devmapper", "zfs", "overlayfs")),
    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
]


def require_containerd() -> tuple[str, str]:
    """The containerd and ctr binaries, when this process may run them (root)."""
    daemon, ctr = shutil.which("containerd"), shutil.which("ctr")
    reason = None
    if daemon is None or ctr is None:
        reason = ("containerd/ctr are not installed: apt-get install -y containerd "
                  "(make system-deps does it)")
    elif os.geteuid() != 0:
        reason = "containerd needs root to run (mounts, content store ownership)"
    if reason is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{reason} (CI is set, so this is an error)")
        pytest.skip(reason)
    assert daemon is not None and ctr is not None
    return daemon, ctr


@dataclass
class Containerd:
    binary: str
    ctr_binary: str
    workdir: Path
    process: subprocess.Popen[bytes] | None = None

    @property
    def socket(self) -> Path:
        return self.workdir / "containerd.sock"

    @property
    def log_path(self) -> Path:
        return self.workdir / "containerd.log"

    def start(self) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "config.toml"
        config.write_text("\n".join([
            "version = 2",
            f'root = "{self.workdir / "root"}"',
            f'state = "{self.workdir / "state"}"',
            f"disabled_plugins = {json.dumps(DISABLED_PLUGINS)}",
            "[grpc]", f'  address = "{self.socket}"',
            "[ttrpc]", f'  address = "{self.socket}.ttrpc"',
            "[debug]", '  address = ""',
            "[metrics]", '  address = ""', "",
        ]))
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen([self.binary, "--config", str(config)],
                                            stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"containerd exited: {self.log_path.read_text()[-2000:]}")
            if self.socket.exists() and self.ctr("version", check=False).returncode == 0:
                return
            time.sleep(0.05)
        raise RuntimeError(f"containerd did not start: {self.log_path.read_text()[-2000:]}")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.process = None

    def ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return subprocess.run([self.ctr_binary, "-a", str(self.socket), "-n", "k8s.io", *args],
                              capture_output=True, text=True, check=check, timeout=60)

    def pull(self, *refs: str) -> None:
        def one(ref: str) -> None:
            self.ctr("images", "pull", "--plain-http", "--snapshotter", "native", ref)

        with ThreadPoolExecutor(4) as pool:
            list(pool.map(one, refs))


# -- images that containerd can unpack: real gzip tars, configs with matching diff_ids --------


@dataclass(frozen=True)
class LayerBlob:
    compressed: bytes
    diff_id: str


def tar_layer(name: str, size: int) -> LayerBlob:
    """A gzip tar holding one file of `size` random bytes (unique, so the digest is)."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        info = tarfile.TarInfo(name)
        info.size = size
        tar.addfile(info, io.BytesIO(os.urandom(size)))
    plain = raw.getvalue()
    return LayerBlob(gzip.compress(plain, mtime=0), sha256(plain))


def push_image(pusher: Pusher, repository: str, layers: list[LayerBlob], platform: str,
               oci: bool, tag: str | None) -> PushedPlatform:
    os_name, arch, *variant = platform.split("/")
    config: dict[str, Any] = {"architecture": arch, "os": os_name, "config": {},
                              "rootfs": {"type": "layers",
                                         "diff_ids": [blob.diff_id for blob in layers]}}
    if variant:
        config["variant"] = variant[0]
    config_digest, config_size = pusher.blob(repository, json.dumps(config).encode())
    descriptors = [pusher.blob(repository, blob.compressed) for blob in layers]
    document = {
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST if oci else DOCKER_MANIFEST,
        "config": {"mediaType": OCI_CONFIG if oci else DOCKER_CONFIG,
                   "digest": config_digest, "size": config_size},
        "layers": [{"mediaType": OCI_LAYER if oci else DOCKER_LAYER, "digest": d, "size": s}
                   for d, s in descriptors],
    }
    body_digest = sha256(json.dumps(document, indent=3).encode())
    digest = pusher.manifest(repository, tag or body_digest, document)
    return PushedPlatform(platform, digest, tuple(descriptors))


def push_node_images(pusher: Pusher, extra: int = 52) -> dict[str, PushedImage]:
    """A base image, apps built FROM it (shared layers), a multi-arch OCI index and a Docker
    manifest list, and `extra` small images sharing one layer: more than kubelet's 50."""
    images: dict[str, PushedImage] = {}
    base = [tar_layer("base-a", 30_000), tar_layer("base-b", 12_000)]
    pushed = push_image(pusher, "library/base", base, "linux/amd64", oci=False, tag="1")
    images["base"] = PushedImage("library/base", "1", pushed.digest, (pushed,))
    for i in range(2):
        pushed = push_image(pusher, f"team/app{i}", [*base, tar_layer("app", 5_000 + i)],
                            "linux/amd64", oci=i == 1, tag="v1")
        images[f"app{i}"] = PushedImage(f"team/app{i}", "v1", pushed.digest, (pushed,))
    for name, oci in (("multi/arch", True), ("list/img", False)):
        amd64 = push_image(pusher, name, [tar_layer("amd", 9_000), tar_layer("x", 2_000)],
                           "linux/amd64", oci=oci, tag=None)
        arm64 = push_image(pusher, name, [tar_layer("arm", 8_000)], "linux/arm64", oci=oci,
                           tag=None)
        digest = pusher.index(name, "2", [amd64, arm64], oci=oci)
        images[name] = PushedImage(name, "2", digest, (amd64, arm64))
    common = tar_layer("common", 3_000)
    for i in range(extra):
        pushed = push_image(pusher, f"many/img{i:02d}", [common, tar_layer("own", 500 + i)],
                            "linux/amd64", oci=True, tag="1")
        images[f"img{i}"] = PushedImage(f"many/img{i:02d}", "1", pushed.digest, (pushed,))
    return images
