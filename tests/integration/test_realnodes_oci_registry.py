"""Images built in pure Python (webhook/devcluster/realnodes/oci.py) pushed to the real CNCF
distribution registry (Debian `docker-registry`) on 127.0.0.1 and read back through its HTTP
API and through the webhook's own registry client: the manifest bytes and digest, every blob,
blobs shared with a base never uploaded twice (the registry's access log counts the requests).

Refusal end to end uses loopback only: a name (localhost) and https, which the guard refuses,
and a redirect from a loopback listener, in front of a connection-counting listener. Without
the registry or busybox-static the tests skip with the reason, or fail when env CI is set."""

from __future__ import annotations

import asyncio
import hashlib
import os
import re
import shutil
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aiohttp import web

from tests.helpers import fail_or_skip
from tests.integration.registry_fixture import (
    RegistryServer,
    require_registry_binary,
    start_registry,
)
from tests.integration.registry_proxy_fixture import ConnectionCounter
from webhook.core.images import parse_image
from webhook.core.layers import Layer as ManifestLayer
from webhook.core.layers import Platform
from webhook.devcluster.processes import free_port
from webhook.devcluster.realnodes.oci import (
    OCI_MANIFEST,
    Image,
    PushError,
    busybox_layer,
    files_layer,
    filler_layer,
    push,
    write_layout,
)
from webhook.registry.client import RegistryClient
from webhook.registry.guard import HostPolicy
from webhook.registry.resolver import RegistryResolver

pytestmark = pytest.mark.registry

KIB, MIB = 1024, 1024 * 1024
AMD64 = Platform("linux", "amd64")
# urllib must never use an environment proxy: every request goes straight to loopback.
_OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
# The registry's access log: `"METHOD URI HTTP/1.1" STATUS BYTES`.
_ACCESS = re.compile(r'^127\.0\.0\.1 - - \[[^]]*\] "(\w+) (\S+) HTTP/[\d.]+" (\d+) ')


def get(url: str, accept: str = "") -> tuple[int, dict[str, str], bytes]:
    assert url.startswith("http://127.0.0.1:"), url
    request = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    try:
        with _OPENER.open(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def requests(server: RegistryServer, mark: int) -> list[tuple[str, str, int]]:
    """(method, uri, status) of each request the registry logged after line `mark`."""
    found = []
    for line in server.log().splitlines()[mark:]:
        match = _ACCESS.match(line)
        if match:
            found.append((match[1], match[2], int(match[3])))
    return found


def log_mark(server: RegistryServer) -> int:
    return len(server.log().splitlines())


@dataclass(frozen=True)
class Pushed:
    server: RegistryServer
    base: Image
    app: Image  # FROM base, in another repository, mounted from it
    base_requests: list[tuple[str, str, int]]
    app_requests: list[tuple[str, str, int]]
    again_requests: list[tuple[str, str, int]]  # the base pushed a second time


@pytest.fixture(scope="module")
def pushed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pushed]:
    binary = require_registry_binary()
    busybox = shutil.which("busybox")
    if busybox is None:
        fail_or_skip("busybox-static is not installed: apt-get install -y busybox-static")
    base = Image("ll/base", "1", (busybox_layer(Path(busybox)), filler_layer("base-1", MIB)),
                 ("/bin/sh",))
    app = Image("ll/app", "1", (*base.layers, filler_layer("app", 512 * KIB)),
                ("/bin/sleep",), ("3600",))
    root = tmp_path_factory.mktemp("oci-registry")
    server = start_registry(binary, root / "run", root / "storage")
    try:
        mark = log_mark(server)
        push(server.url, base)
        base_requests = requests(server, mark)
        mark = log_mark(server)
        push(server.url, app, mount_from=base.repository)
        app_requests = requests(server, mark)
        mark = log_mark(server)
        push(server.url + "/", base)
        again_requests = requests(server, mark)
        yield Pushed(server, base, app, base_requests, app_requests, again_requests)
    finally:
        server.stop()


def uploads(logged: list[tuple[str, str, int]]) -> list[str]:
    """The digests whose bytes were sent: the PUTs that complete an upload session."""
    return [re.sub(r".*[?&]digest=sha256%3A([0-9a-f]{64}).*", r"sha256:\1", uri)
            for method, uri, status in logged
            if method == "PUT" and "/blobs/uploads/" in uri and status == 201]


def test_manifest_by_tag_is_the_built_bytes(pushed: Pushed) -> None:
    for image in (pushed.base, pushed.app):
        status, headers, body = get(f"{pushed.server.url}/v2/{image.repository}/manifests/"
                                    f"{image.tag}", accept=OCI_MANIFEST)
        assert status == 200
        assert body == image.manifest_bytes()
        assert headers["Docker-Content-Digest"] == image.digest
        assert headers["Content-Type"] == OCI_MANIFEST
        status, _, body = get(f"{pushed.server.url}/v2/{image.repository}/manifests/"
                              f"{image.digest}", accept=OCI_MANIFEST)
        assert (status, body) == (200, image.manifest_bytes())


def test_every_blob_reads_back_byte_for_byte(pushed: Pushed) -> None:
    for image in (pushed.base, pushed.app):
        config = image.config_bytes()
        blobs = [(layer.digest, layer.data) for layer in image.layers]
        blobs.append(("sha256:" + hashlib.sha256(config).hexdigest(), config))
        for digest, data in blobs:
            status, _, body = get(f"{pushed.server.url}/v2/{image.repository}/blobs/{digest}")
            assert (status, len(body)) == (200, len(data)), digest
            assert body == data, digest


def test_the_base_push_uploads_each_blob_once(pushed: Pushed) -> None:
    base = pushed.base
    expected = [layer.digest for layer in base.layers]
    assert uploads(pushed.base_requests)[:2] == expected
    assert len(uploads(pushed.base_requests)) == 3  # and the config
    assert ("PUT", f"/v2/{base.repository}/manifests/{base.tag}", 201) in pushed.base_requests


def test_the_app_mounts_the_base_layers_and_uploads_only_its_own(pushed: Pushed) -> None:
    app, base = pushed.app, pushed.base
    mounted = [uri for method, uri, status in pushed.app_requests
               if method == "POST" and "mount=" in uri and status == 201]
    assert len(mounted) == 2
    assert all(f"from={base.repository.replace('/', '%2F')}" in uri for uri in mounted)
    sent = uploads(pushed.app_requests)
    assert sent[0] == app.layers[2].digest and len(sent) == 2  # the new layer and the config
    assert not set(sent) & {layer.digest for layer in base.layers}


def test_pushing_again_uploads_nothing(pushed: Pushed) -> None:
    again = pushed.again_requests
    assert [m for m, _, _ in again] == ["HEAD", "HEAD", "HEAD", "PUT"]
    assert all(status == 200 for method, _, status in again if method == "HEAD")
    assert uploads(again) == []


async def test_the_webhooks_registry_client_resolves_the_pushed_layers(pushed: Pushed) -> None:
    resolver = RegistryResolver(RegistryClient(HostPolicy.build(insecure=[pushed.server.host]),
                                               timeout=10))
    try:
        for image in (pushed.base, pushed.app):
            ref = parse_image(image.ref(pushed.server.host))
            resolved = await resolver.resolve(ref)
            assert resolved is not None, resolver.failure(ref)
            assert resolved.digest == image.digest
            assert list(resolved.platforms) == [AMD64]  # read from the config blob
            platform = resolved.platforms[AMD64]
            assert platform.digest == image.digest
            assert platform.layers == tuple(ManifestLayer(layer.digest, layer.size)
                                            for layer in image.layers)
    finally:
        await resolver.close()


def test_skopeo_copies_the_oci_layout_unchanged(pushed: Pushed, tmp_path: Path) -> None:
    """write_layout's directory is a layout skopeo reads: the copy stores the same manifest."""
    if shutil.which("skopeo") is None:
        fail_or_skip("skopeo is not installed: apt-get install -y skopeo "
                     "(make system-deps does it)")
    image = Image("ll/layout", "2", pushed.app.layers, ("/bin/sh",))
    write_layout(tmp_path / "layout", pushed.base)
    write_layout(tmp_path / "layout", image)
    # env: PATH and HOME only (no proxy variables, no user configuration).
    subprocess.run(["skopeo", "--insecure-policy", "copy", "--quiet", "--dest-tls-verify=false",
                    f"oci:{tmp_path / 'layout'}:{image.tag}",
                    f"docker://{image.ref(pushed.server.host)}"],
                   check=True, capture_output=True, timeout=120,
                   env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path)})
    status, headers, body = get(f"{pushed.server.url}/v2/{image.repository}/manifests/"
                                f"{image.tag}", accept=OCI_MANIFEST)
    assert (status, body) == (200, image.manifest_bytes())
    assert headers["Docker-Content-Digest"] == image.digest


def test_a_refused_step_names_the_url_and_status(pushed: Pushed) -> None:
    bad_tag = Image("ll/bad", "-not-a-tag", (files_layer({"/a": b"a"}),), ("/a",))
    with pytest.raises(PushError, match=r"PUT http://127\.0\.0\.1:\d+/v2/ll/bad/manifests/"
                                        r"-not-a-tag: HTTP 404"):
        push(pushed.server.url, bad_tag)


def test_nothing_listening_is_a_push_error() -> None:
    url = f"http://127.0.0.1:{free_port()}"
    with pytest.raises(PushError, match=re.escape(f"HEAD {url}/v2/ll/x/blobs/")):
        push(url, Image("ll/x", "1", (), ("/x",)), timeout=5)


async def test_refused_hosts_are_never_contacted() -> None:
    counter = ConnectionCounter()
    await counter.start()
    image = Image("ll/x", "1", (files_layer({"/a": b"a"}),), ("/a",))
    try:
        for url in (f"http://localhost:{counter.port}", f"https://127.0.0.1:{counter.port}"):
            with pytest.raises(PushError, match="refusing HEAD"):
                await asyncio.to_thread(push, url, image, timeout=5)
    finally:
        await counter.stop()
    assert counter.connections == 0


async def test_a_redirect_is_not_followed() -> None:
    """A registry answering 307 towards another listener: the push stops there."""
    counter = ConnectionCounter()
    await counter.start()

    async def redirect(request: web.Request) -> web.Response:
        return web.Response(status=307, headers={
            "Location": f"http://127.0.0.1:{counter.port}{request.path_qs}"})

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", redirect)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        with pytest.raises(PushError, match="HTTP 307"):
            await asyncio.to_thread(push, f"http://127.0.0.1:{port}",
                                    Image("ll/x", "1", (), ("/x",)), timeout=5)
    finally:
        await runner.cleanup()
        await counter.stop()
    assert counter.connections == 0
