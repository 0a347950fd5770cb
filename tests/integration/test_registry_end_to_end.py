"""The registry resolver wired into the webhook, against the real registry (Debian
`docker-registry`) on 127.0.0.1: nodes from a NodeList file and no static catalog, so node
images and pod images both resolve through the registry. Covers the review budget (a slow
registry: the first review answers without that image, the next one benefits), `explain`
and `catalog build`."""

from __future__ import annotations

import asyncio
import io
import json
from contextlib import redirect_stdout
from pathlib import Path
from typing import Any

import orjson

from tests.integration.registry_images_fixture import RegistryImages
from webhook.cli import main
from webhook.config import Settings
from webhook.core.admission import parse_review
from webhook.core.images import parse_image
from webhook.registry.catalog import StaticCatalog
from webhook.serving.metrics import Metrics
from webhook.serving.mutate import Mutator
from webhook.serving.wiring import build_parts, resolve_node_images

SMALL = ["--min-bytes", "1000", "--full-bytes", "77000"]  # test layers are KiB, not MiB


def node(name: str, arch: str, images: list[list[str]]) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {},
        "status": {"nodeInfo": {"operatingSystem": "linux", "architecture": arch},
                   "images": [{"names": names, "sizeBytes": 1} for names in images]},
    }


def write_nodes(path: Path, images: RegistryImages, host: str) -> Path:
    base, multi = images.images["base"], images.images["multi"]
    nodes = [
        node("node-a", "amd64", [[base.pinned(host), base.ref(host)]]),
        node("node-b", "amd64", [[multi.pinned(host), multi.ref(host)]]),
        node("node-c", "arm64", [[multi.pinned(host)]]),
    ]
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": nodes}))
    return path


def review_body(image: str, uid: str = "u1") -> bytes:
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "web", "namespace": "default"},
           "spec": {"containers": [{"name": "c", "image": image}]}}
    return orjson.dumps({
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {"uid": uid, "kind": {"group": "", "version": "v1", "kind": "Pod"},
                    "resource": {"group": "", "version": "v1", "resource": "pods"},
                    "operation": "CREATE", "namespace": "default", "name": "web",
                    "object": pod, "dryRun": False},
    })


async def test_budget_miss_then_next_review_benefits(registry_images: RegistryImages,
                                                     proxy_factory: Any, tmp_path: Path) -> None:
    proxy = await proxy_factory(registry_images.server.url)
    nodes = write_nodes(tmp_path / "nodes.json", registry_images, proxy.host)
    settings = Settings(nodes=str(nodes), registry_insecure=(proxy.host,), min_bytes=1000,
                        full_bytes=77000, budget_ms=50)
    parts = build_parts(settings)
    assert parts.registry is not None
    assert parts.unresolved_node_images  # no catalog: nothing known before the registry
    assert await resolve_node_images(parts) == 3
    index = parts.inventory.index
    shared = {d for d, _ in registry_images.shared_base}
    assert shared <= index.layers_of("node-a")
    multi = registry_images.images["multi"]
    assert index.layers_of("node-c") == {d for d, _ in multi.platform("linux/arm64/v8").layers}

    metrics = Metrics()
    metrics.watch_registry(parts.registry.stats)
    mutator = Mutator(parts.sources, parts.inventory, settings.policy, settings.budget_ms / 1000)
    app = registry_images.images["app"]
    proxy.hold = asyncio.Event()  # the registry now stalls on manifests
    first = await mutator.review(parse_review(review_body(app.ref(proxy.host))))
    assert (first.result, first.reason, first.budget_misses) == ("skipped", "unresolved", 1)
    await proxy.reached.wait()
    proxy.hold.set()
    # The lookup the budget gave up on finishes in the background; waiting joins it.
    assert await parts.registry.resolve(parse_image(app.ref(proxy.host))) is not None
    assert proxy.counts[("GET", f"/v2/team/app/manifests/{app.digest}")] == 1

    second = await mutator.review(parse_review(review_body(app.ref(proxy.host), uid="u2")))
    await mutator.close()
    await parts.registry.close()
    assert second.result == "patched"
    assert second.budget_misses == 0
    assert [n.node.name for n in second.nodes] == ["node-a"]
    assert second.nodes[0].bytes_present == sum(s for _, s in registry_images.shared_base)
    text = metrics.render().decode()
    assert 'layer_locality_registry_cache_lookups_total{result="coalesced"} 1.0' in text
    assert f'layer_locality_registry_requests_total{{outcome="200",registry="{proxy.host}"}}' \
        in text


def test_explain_resolves_through_the_registry(registry_images: RegistryImages,
                                               tmp_path: Path) -> None:
    host = registry_images.host
    nodes = write_nodes(tmp_path / "nodes.json", registry_images, host)
    pod = tmp_path / "pod.yaml"
    pod.write_text(json.dumps({"apiVersion": "v1", "kind": "Pod",
                               "metadata": {"name": "p", "namespace": "default"},
                               "spec": {"containers": [{"name": "c", "image":
                                        registry_images.images["multi"].ref(host)}]}}))
    out = io.StringIO()
    with redirect_stdout(out):
        code = main(["explain", "--pod", str(pod), "--nodes", str(nodes), "--output", "json",
                     "--registry-insecure", host, *SMALL], env={})
    assert code == 0
    result = json.loads(out.getvalue())
    assert result["result"] == "patched"
    rows = {row["node"]: row for row in result["nodes"]}
    multi = registry_images.images["multi"]
    # Each node is credited with the layers of its own platform.
    assert rows["node-b"]["bytesPresent"] == sum(s for _, s in multi.platform("linux/amd64").layers)
    assert rows["node-c"]["bytesPresent"] == sum(
        s for _, s in multi.platform("linux/arm64/v8").layers)
    assert rows["node-a"]["bytesPresent"] == 0


def test_offline_never_builds_a_resolver(registry_images: RegistryImages, tmp_path: Path) -> None:
    nodes = write_nodes(tmp_path / "nodes.json", registry_images, registry_images.host)
    parts = build_parts(Settings(nodes=str(nodes), offline=True))
    assert parts.registry is None
    assert len(parts.sources) == 1


def test_catalog_build_writes_a_loadable_catalog(registry_images: RegistryImages,
                                                 tmp_path: Path) -> None:
    host = registry_images.host
    nodes = write_nodes(tmp_path / "nodes.json", registry_images, host)
    pods = tmp_path / "pods.yaml"
    app = registry_images.images["app"].ref(host)
    pods.write_text(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\nspec:\n  template:\n"
        f"    spec:\n      containers: [{{name: c, image: '{app}'}}]\n"
        "---\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n"
        f"  containers: [{{name: c, image: '{host}/no/such:image'}}]\n"
    )
    out = tmp_path / "catalog.json"
    code = main(["catalog", "build", "--nodes", str(nodes), "--pods", str(pods), "--out", str(out),
                 "--registry-insecure", host], env={})
    assert code == 0
    catalog = StaticCatalog.load(out)
    images = registry_images.images
    refs = sorted(image.ref for image in catalog.images())
    assert refs == sorted([images["base"].ref(host), images["multi"].ref(host),
                           images["app"].ref(host)])
    multi = catalog.cached(parse_image(images["multi"].ref(host)))
    assert multi is not None and len(multi.platforms) == 2
    # Node images named by digest match the same entries.
    assert catalog.cached(parse_image(images["base"].pinned(host))) is not None
