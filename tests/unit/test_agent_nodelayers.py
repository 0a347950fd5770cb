"""NodeLayers building (compact, bounded), platform choice and the publishing rule."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from webhook.agent.nodelayers import Bounds, NodeRef, RuntimeImage, build_object, build_spec
from webhook.agent.publish import Publisher
from webhook.agent.source import host_platform, pick_manifest
from webhook.core.layers import Layer, Platform
from webhook.registry.manifest import OCI_MANIFEST, IndexEntry

AMD64 = Platform("linux", "amd64")


def layer(n: int, size: int) -> Layer:
    return Layer(f"sha256:{n:064x}", size)


def image(name: str, digest: int, *layers: Layer) -> RuntimeImage:
    return RuntimeImage(name, f"sha256:{digest:064x}", f"sha256:{digest:064x}", layers)


def spec_of(images: list[RuntimeImage], bounds: Bounds | None = None) -> dict[str, Any]:
    return dict(build_spec("n", "containerd", AMD64, 300, "2026-01-01T00:00:00Z", images,
                           bounds or Bounds()))


def test_layers_once_images_by_index_names_grouped() -> None:
    base = layer(1, 100)
    spec = spec_of([image("a:1", 10, base, layer(2, 5)), image("a@x", 10, base, layer(2, 5)),
                    image("b:1", 11, base)])
    assert spec["layers"] == [{"digest": base.digest, "size": 100},
                              {"digest": layer(2, 5).digest, "size": 5}]
    assert [(i["names"], i["layers"]) for i in spec["images"]] == [
        (["a:1", "a@x"], [0, 1]), (["b:1"], [0])]
    assert spec["truncated"] == {"images": 0, "layers": 0}


def test_bounds_keep_the_largest_images_and_count_the_rest() -> None:
    images = [image(f"i{n}", n, layer(n, n * 10), layer(1000 + n, 1)) for n in range(1, 6)]
    spec = spec_of(images, Bounds(images=3, layers=100))
    assert sorted(i["names"][0] for i in spec["images"]) == ["i3", "i4", "i5"]
    assert spec["truncated"] == {"images": 2, "layers": 4}
    spec = spec_of(images, Bounds(images=100, layers=5))  # two images fit in 5 layers
    assert sorted(i["names"][0] for i in spec["images"]) == ["i4", "i5"]
    assert spec["truncated"] == {"images": 3, "layers": 6}


def test_object_has_the_owner_only_with_a_uid() -> None:
    spec = build_spec("n", "containerd", AMD64, 300, "t", [])
    assert "ownerReferences" not in build_object(NodeRef("n"), spec)["metadata"]
    owner = build_object(NodeRef("n", "u-1"), spec)["metadata"]["ownerReferences"]
    assert owner == [{"apiVersion": "v1", "kind": "Node", "name": "n", "uid": "u-1"}]


def test_pick_manifest_exact_then_same_arch_never_another() -> None:
    entries = (IndexEntry("sha256:" + "a" * 64, OCI_MANIFEST, Platform("linux", "arm", "v7")),
               IndexEntry("sha256:" + "b" * 64, OCI_MANIFEST, Platform("linux", "amd64", "v3")),
               IndexEntry("sha256:" + "c" * 64, OCI_MANIFEST, Platform("linux", "arm64")))
    assert pick_manifest(entries, Platform("linux", "arm64")) == "sha256:" + "c" * 64
    assert pick_manifest(entries, AMD64) == "sha256:" + "b" * 64
    assert pick_manifest(entries, Platform("linux", "arm", "v6")) is None
    assert host_platform(machine="aarch64") == Platform("linux", "arm64")
    assert host_platform(machine="armv7l") == Platform("linux", "arm", "v7")


class FakeApi:
    """CustomObjectsApi's three calls over a dict; `conflicts` 409s the next replaces."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.writes = 0
        self.conflicts = 0

    def get_cluster_custom_object(self, *args: str) -> dict[str, Any]:
        if args[-1] not in self.objects:
            raise ApiError(404)
        return self.objects[args[-1]]

    def create_cluster_custom_object(self, g: str, v: str, p: str, body: Any) -> None:
        self._store(body)

    def replace_cluster_custom_object(self, g: str, v: str, p: str, n: str, body: Any) -> None:
        if self.conflicts:
            self.conflicts -= 1
            raise ApiError(409)
        assert body["metadata"]["resourceVersion"] == self.objects[n]["metadata"][
            "resourceVersion"]
        self._store(body)

    def _store(self, body: dict[str, Any]) -> None:
        self.writes += 1
        self.objects[body["metadata"]["name"]] = {
            **body, "metadata": {**body["metadata"], "resourceVersion": str(self.writes)}}


class ApiError(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


@pytest.mark.parametrize("heartbeat_age", [10, 400])
def test_publish_only_on_change_or_old_heartbeat(heartbeat_age: int) -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    stamp = (now - timedelta(seconds=heartbeat_age)).strftime("%Y-%m-%dT%H:%M:%SZ")
    api, publisher = FakeApi(), Publisher(FakeApi())
    publisher.api = api
    first = build_object(NodeRef("n"), build_spec("n", "containerd", AMD64, 300, stamp, []))
    assert publisher.publish(first, now)
    same = build_object(NodeRef("n"), build_spec("n", "containerd", AMD64, 300, "later", []))
    assert publisher.publish(same, now) is (heartbeat_age > 300)
    changed = build_object(NodeRef("n"), build_spec(
        "n", "containerd", AMD64, 300, "t", [image("a", 1, layer(1, 1))]))
    api.conflicts = 2
    assert publisher.publish(changed, now)
    assert publisher.conflicts == 2
    assert api.objects["n"]["spec"]["images"][0]["names"] == ["a"]
