"""The image the Dockerfile describes, built without Docker (hack/image/build.sh: a Debian
bookworm root filesystem from mmdebstrap, the venv by pip in a chroot, an OCI layout from umoci;
cached), pushed by skopeo to the real docker-registry on 127.0.0.1, pulled by a real containerd
(started as root by the fixture, socket under a temp dir) and run by that containerd with runc.

runc works here (root, cgroups mounted), so the image runs as Kubernetes would run it: as the
image's user 65532 in /app, with a process argv given on the `ctr run` command line instead of the
image's `layer-locality serve` entrypoint (which does not take --version).

A cold build reaches deb.debian.org and the package index (as hack/kube/build.sh reaches the Go
proxy); everything the tests themselves talk to listens on 127.0.0.1. Without root, mmdebstrap,
umoci, skopeo, containerd or the registry the tests skip with the reason, or fail when env CI is
set. LAYER_LOCALITY_IMAGE_LAYOUT names an OCI layout built before (tag: the project version)."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import ssl
import subprocess
import sys
import time
import tomllib
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import fail_or_skip
from tests.integration.containerd_fixture import require_containerd
from tests.integration.registry_fixture import (
    RegistryServer,
    require_registry_binary,
    start_registry,
)
from tests.kit.containerd import Containerd
from webhook.core.images import parse_image
from webhook.core.layers import Layer, Platform
from webhook.devcluster.processes import free_port
from webhook.registry.client import RegistryClient
from webhook.registry.guard import HostPolicy
from webhook.registry.resolver import RegistryResolver
from webhook.serving.certs import CertificateFiles

pytestmark = pytest.mark.image

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "hack" / "image" / "build.sh"
VERSION: str = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
AMD64 = Platform("linux", "amd64")
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
# urllib must never use an environment proxy: every request goes straight to loopback.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))


@dataclass(frozen=True)
class Layout:
    path: Path
    manifest_digest: str
    manifest: dict[str, Any]
    config: dict[str, Any]

    def blob(self, digest: str) -> bytes:
        return (self.path / "blobs" / "sha256" / digest.removeprefix("sha256:")).read_bytes()

    @property
    def layers(self) -> tuple[Layer, ...]:
        return tuple(Layer(d["digest"], d["size"]) for d in self.manifest["layers"])


def read_layout(path: Path) -> Layout:
    index = json.loads((path / "index.json").read_text())
    [entry] = [m for m in index["manifests"]
               if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == VERSION]
    raw = (path / "blobs" / "sha256" / entry["digest"].removeprefix("sha256:")).read_bytes()
    assert "sha256:" + hashlib.sha256(raw).hexdigest() == entry["digest"]
    manifest = json.loads(raw)
    config_path = path / "blobs" / "sha256" / manifest["config"]["digest"].removeprefix("sha256:")
    return Layout(path, entry["digest"], manifest, json.loads(config_path.read_bytes()))


def require_image_tools() -> None:
    missing = [tool for tool in ("mmdebstrap", "umoci", "skopeo") if shutil.which(tool) is None]
    if missing:
        fail_or_skip(f"{', '.join(missing)} not installed: apt-get install -y {' '.join(missing)}"
                     " (make system-deps does it)")
    if os.geteuid() != 0:
        fail_or_skip("hack/image/build.sh needs root (mmdebstrap --mode=root, chroot, mknod)")


@pytest.fixture(scope="module")
def layout() -> Layout:
    """The OCI layout hack/image/build.sh prints: cached by the hash of its inputs (a warm run
    takes under a second); cold, about 2 to 3 minutes on 2 cores."""
    given = os.environ.get("LAYER_LOCALITY_IMAGE_LAYOUT")
    if given:
        return read_layout(Path(given))
    require_image_tools()
    done = subprocess.run([str(BUILD)], capture_output=True, text=True, timeout=1800,
                          env={**os.environ, "PIP_PYTHON": sys.executable})
    if done.returncode != 0:
        pytest.fail(f"hack/image/build.sh exited {done.returncode}:\n{done.stderr[-4000:]}")
    return read_layout(Path(done.stdout.strip()))


@dataclass(frozen=True)
class Pushed:
    registry: RegistryServer
    ref: str  # 127.0.0.1:PORT/layer-locality:VERSION


@pytest.fixture(scope="module")
def pushed(layout: Layout, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pushed]:
    """The layout copied by skopeo into a real docker-registry on 127.0.0.1 (stopped after)."""
    binary = require_registry_binary()
    if shutil.which("skopeo") is None:
        fail_or_skip("skopeo is not installed: apt-get install -y skopeo "
                     "(make system-deps does it)")
    root = tmp_path_factory.mktemp("image-registry")
    registry = start_registry(binary, root / "registry", root / "storage")
    try:
        ref = f"{registry.host}/layer-locality:{VERSION}"
        subprocess.run(
            ["skopeo", "--insecure-policy", "copy", "--quiet", "--dest-tls-verify=false",
             f"oci:{layout.path}:{VERSION}", f"docker://{ref}"],
            check=True, capture_output=True, timeout=300,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(root)})
        yield Pushed(registry, ref)
    finally:
        registry.stop()


def _stop_tasks(containerd: Containerd) -> None:
    """Kill and delete every task and container left in the namespace (a test that failed
    midway), so their runc shims exit; then stop any shim of this containerd by its pid."""
    listed = containerd.ctr("tasks", "ls", "-q", check=False).stdout.split()
    for task in listed:
        containerd.ctr("tasks", "kill", "-s", "SIGKILL", task, check=False)
    deadline = time.monotonic() + 10
    for task in listed:
        while (containerd.ctr("tasks", "delete", task, check=False).returncode != 0
               and time.monotonic() < deadline):
            time.sleep(0.2)
    for container in containerd.ctr("containers", "ls", "-q", check=False).stdout.split():
        containerd.ctr("containers", "delete", container, check=False)
    for pid in _shims(containerd.socket):
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, 9)


def _shims(socket: Path) -> list[int]:
    """Pids of the runc shims serving this containerd (their argv names its socket)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv and argv[0].endswith(b"containerd-shim-runc-v2") and str(socket).encode() in argv:
            found.append(int(entry.name))
    return found


@pytest.fixture(scope="module")
def node(pushed: Pushed, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Containerd]:
    """A real containerd that pulled the image from the registry (native snapshotter)."""
    daemon, ctr = require_containerd()
    containerd = Containerd(daemon, ctr, tmp_path_factory.mktemp("image-node"))
    try:
        containerd.start()
        containerd.pull(pushed.ref)
        yield containerd
    finally:
        if containerd.process is not None:
            _stop_tasks(containerd)
        containerd.stop()
        # The content store and the unpacked snapshots: half a gigabyte per run.
        shutil.rmtree(containerd.workdir / "root", ignore_errors=True)


def ctr_run(containerd: Containerd, *args: str, timeout: float = 120
            ) -> subprocess.CompletedProcess[str]:
    # The FIFOs of the task's stdio in the test's directory, not the host's /run/containerd.
    return subprocess.run([containerd.ctr_binary, "-a", str(containerd.socket), "-n", "k8s.io",
                           "run", "--snapshotter", "native",
                           "--fifo-dir", str(containerd.workdir / "fifo"), *args],
                          capture_output=True, text=True, timeout=timeout)


def test_layout_carries_the_dockerfiles_final_stage(layout: Layout) -> None:
    config = layout.config
    assert (config["os"], config["architecture"]) == ("linux", "amd64")
    image = config["config"]
    assert image["Entrypoint"] == ["layer-locality", "serve"]
    assert "Cmd" not in image or not image["Cmd"]  # ENTRYPOINT resets the base's CMD
    assert image["User"] == "65532:65532"
    assert image["WorkingDir"] == "/app"
    assert image["ExposedPorts"] == {"8443/tcp": {}}
    env = dict(item.split("=", 1) for item in image["Env"])
    assert env["PATH"].split(":")[0] == "/opt/layer-locality/bin"
    assert "/usr/bin" in env["PATH"].split(":")
    assert (env["PYTHONUNBUFFERED"], env["PYTHONDONTWRITEBYTECODE"]) == ("1", "1")
    labels = image["Labels"]
    assert labels["org.opencontainers.image.title"] == "layer-locality"
    assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
    assert "layers" in labels["org.opencontainers.image.description"]
    # The Debian base and the venv: two layers, each a gzip tar whose digest is the manifest's.
    assert len(layout.manifest["layers"]) == len(config["rootfs"]["diff_ids"]) == 2
    for layer in layout.layers:
        data = layout.blob(layer.digest)
        assert (len(data), "sha256:" + hashlib.sha256(data).hexdigest()) == (layer.size,
                                                                             layer.digest)
        assert data[:2] == b"\x1f\x8b"


async def test_registry_client_resolves_the_pushed_images_layers(layout: Layout,
                                                                 pushed: Pushed) -> None:
    """The webhook's own registry client reads the image it ships in: the digest and layers
    (digest, size) it resolves are the layout's manifest, unchanged by the push."""
    client = RegistryClient(HostPolicy.build(insecure=[pushed.registry.host]), timeout=10)
    resolver = RegistryResolver(client)
    try:
        image = await resolver.resolve(parse_image(pushed.ref))
    finally:
        await resolver.close()
    assert image is not None, resolver.failure(parse_image(pushed.ref))
    assert image.digest == layout.manifest_digest
    assert list(image.platforms) == [AMD64]  # from the config blob
    assert image.platforms[AMD64].digest == layout.manifest_digest
    assert image.platforms[AMD64].layers == layout.layers
    assert image.platforms[AMD64].size == sum(layer.size for layer in layout.layers)


def test_containerd_pulls_and_runs_the_version(layout: Layout, pushed: Pushed,
                                               node: Containerd) -> None:
    """`ctr run IMAGE ID ARGS...` replaces the image's argv (entrypoint and cmd) with ARGS and
    keeps the rest of its config: the user, the working directory, the environment."""
    listed = node.ctr("images", "ls").stdout
    assert pushed.ref in listed and layout.manifest_digest in listed
    done = ctr_run(node, "--rm", pushed.ref, "image-version",
                   "sh", "-c", "id -u; id -g; pwd; exec layer-locality --version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["65532", "65532", "/app", VERSION]


def test_containerd_runs_the_entrypoint_serving_the_demo(
        pushed: Pushed, node: Containerd, tls_files: CertificateFiles,
        tmp_path: Path) -> None:
    """The image's program as its entrypoint runs it, serving the embedded demo inventory on
    the host's loopback (host network) with certificates mounted at /app/certs, the relative
    defaults the Dockerfile names: it answers /healthz and mutates the example review."""
    certs = tmp_path / "certs"
    certs.mkdir(mode=0o755)
    for source, name in ((tls_files.cert, "tls.crt"), (tls_files.key, "tls.key")):
        shutil.copyfile(source, certs / name)
        (certs / name).chmod(0o644)  # a test key: readable by the image's user 65532
    certs.chmod(0o755)
    port = free_port()
    started = ctr_run(node, "--detach", "--net-host",
                      "--mount", f"type=bind,src={certs},dst=/app/certs,options=rbind:ro",
                      pushed.ref, "image-serve",
                      "layer-locality", "serve", "--demo", "--listen", f"127.0.0.1:{port}")
    assert started.returncode == 0, started.stderr
    try:
        context = ssl.create_default_context(cafile=str(tls_files.ca_cert))
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}),
                                             urllib.request.HTTPSHandler(context=context))
        base = f"https://127.0.0.1:{port}"
        deadline = time.monotonic() + 60
        while True:
            try:
                with opener.open(f"{base}/healthz", timeout=5) as response:
                    assert response.status == 200
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)
        review = (REPO / "examples" / "admission-review.json").read_bytes()
        request = urllib.request.Request(f"{base}/mutate", data=review, method="POST",
                                         headers={"Content-Type": "application/json"})
        with opener.open(request, timeout=10) as response:
            answer = json.loads(response.read())
        assert answer["response"]["allowed"] is True
        assert answer["response"]["patchType"] == "JSONPatch"
        tasks = node.ctr("tasks", "ls").stdout
        assert "image-serve" in tasks and "RUNNING" in tasks
    finally:
        node.ctr("tasks", "kill", "-s", "SIGTERM", "image-serve", check=False)
        deadline = time.monotonic() + 15
        while (node.ctr("tasks", "delete", "image-serve", check=False).returncode != 0
               and time.monotonic() < deadline):
            time.sleep(0.2)
        node.ctr("containers", "delete", "image-serve", check=False)
