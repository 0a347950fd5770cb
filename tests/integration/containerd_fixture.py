"""A real containerd for the node agent's tests: Debian's `containerd` started as root with its
own root, state and socket under a temp dir (native snapshotter, CRI and the other plugins it does
not need disabled, so it boots in a fraction of a second), images pushed to the real
docker-registry on 127.0.0.1 and pulled with `ctr images pull --plain-http`.

Not root, or no containerd/ctr: the tests skip with the reason, or fail when env CI is set.
"""

from __future__ import annotations

import gzip
import io
import os
import shutil
import tarfile
from dataclasses import dataclass

from tests.helpers import fail_or_skip
from tests.integration.registry_images_fixture import (
    PushedImage,
    PushedPlatform,
    Pusher,
    sha256,
)


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
        fail_or_skip(reason)
    assert daemon is not None and ctr is not None
    return daemon, ctr


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
    return pusher.image_manifest(repository, [blob.compressed for blob in layers], platform,
                                 oci, tag, diff_ids=[blob.diff_id for blob in layers])


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
