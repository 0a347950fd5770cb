"""NodeLayers building (compact, bounded), platform choice and the publishing rule (only a
changed object is written, with no read in the steady state)."""

from __future__ import annotations

import copy
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from tests.nodelayers_helpers import spec_layer_pairs
from webhook.agent.nodelayers import (
    Bounds,
    NodeRef,
    RuntimeImage,
    build_object,
    build_spec,
    layer_count,
)
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
    assert "layers" not in spec  # every digest sha256: the packed table only
    assert spec_layer_pairs(spec) == [(base.digest, 100), (layer(2, 5).digest, 5)]
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
    """CustomObjectsApi's three calls over a dict, with the API server's resourceVersion rule
    (a replace naming another version is a 409); `conflicts` 409s the next replaces; `calls`
    lists what was asked."""

    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Any]] = {}
        self.writes = 0
        self.conflicts = 0
        self.calls: list[str] = []

    def get_cluster_custom_object(self, *args: str) -> dict[str, Any]:
        self.calls.append("get")
        if args[-1] not in self.objects:
            raise ApiError(404)
        return self.objects[args[-1]]

    def create_cluster_custom_object(self, g: str, v: str, p: str, body: Any) -> dict[str, Any]:
        self.calls.append("create")
        if body["metadata"]["name"] in self.objects:
            raise ApiError(409)
        return self._store(body)

    def replace_cluster_custom_object(self, g: str, v: str, p: str, n: str,
                                      body: Any) -> dict[str, Any]:
        self.calls.append("replace")
        if self.conflicts:
            self.conflicts -= 1
            raise ApiError(409)
        if n not in self.objects:
            raise ApiError(404)
        if body["metadata"]["resourceVersion"] != self.objects[n]["metadata"][
                "resourceVersion"]:
            raise ApiError(409)
        return self._store(body)

    def _store(self, body: dict[str, Any]) -> dict[str, Any]:
        self.writes += 1
        self.objects[body["metadata"]["name"]] = stored = {
            **body, "metadata": {**body["metadata"], "resourceVersion": str(self.writes)}}
        return stored


class ApiError(Exception):
    def __init__(self, status: int) -> None:
        self.status = status


NOW = datetime(2026, 1, 1, tzinfo=UTC)


def body_at(age: float, *images: RuntimeImage) -> dict[str, Any]:
    """The object as a pass `age` seconds before NOW builds it."""
    stamp = (NOW - timedelta(seconds=age)).strftime("%Y-%m-%dT%H:%M:%SZ")
    return build_object(NodeRef("n"), build_spec("n", "containerd", AMD64, 300, stamp,
                                                 list(images)))


def test_an_unchanged_object_is_never_written_again_and_costs_no_call() -> None:
    api = FakeApi()
    publisher = Publisher(api)
    assert publisher.publish(body_at(3600), NOW)
    assert api.calls == ["get", "create"]
    # Passes an hour apart with the same content: no write, no read (the Lease is the
    # heartbeat now); spec.heartbeat stays when the content was written.
    for _ in range(5):
        assert not publisher.publish(body_at(0), NOW)
    assert api.calls == ["get", "create"]
    assert api.objects["n"]["spec"]["heartbeat"] == body_at(3600)["spec"]["heartbeat"]

    changed = body_at(0, image("a", 1, layer(1, 1)))
    assert publisher.publish(changed, NOW)
    # One update carrying the version the create returned: no read before it.
    assert api.calls == ["get", "create", "replace"]
    assert api.objects["n"]["spec"]["images"][0]["names"] == ["a"]
    assert api.objects["n"]["spec"]["heartbeat"] == changed["spec"]["heartbeat"]
    assert (publisher.written, publisher.skipped, publisher.reads) == (2, 5, 1)


def test_after_a_restart_the_object_found_is_compared_before_writing() -> None:
    api = FakeApi()
    Publisher(api).publish(body_at(3600, image("a", 1, layer(1, 1))), NOW)
    restarted = Publisher(api)
    assert not restarted.publish(body_at(0, image("a", 1, layer(1, 1))), NOW)
    assert restarted.publish(body_at(0), NOW)  # the image went while the agent was down
    assert api.calls == ["get", "create", "get", "replace"]
    assert api.objects["n"]["spec"]["images"] == []


def test_a_conflict_rereads_and_retries_with_the_new_version() -> None:
    api = FakeApi()
    publisher = Publisher(api)
    publisher.publish(body_at(0), NOW)
    # Someone else rewrote the object meanwhile: the version moved on.
    api.objects["n"] = {**api.objects["n"], "metadata": {
        **api.objects["n"]["metadata"], "resourceVersion": "77"}}
    assert publisher.publish(body_at(0, image("a", 1, layer(1, 1))), NOW)
    assert api.calls[-3:] == ["replace", "get", "replace"]
    assert publisher.conflicts == 1
    api.conflicts = 2
    assert publisher.publish(body_at(0, image("b", 2, layer(2, 1))), NOW)
    assert publisher.conflicts == 3
    assert api.objects["n"]["spec"]["images"][0]["names"] == ["b"]


def test_a_deleted_object_is_created_again_at_the_next_change() -> None:
    api = FakeApi()
    publisher = Publisher(api)
    publisher.publish(body_at(0), NOW)
    del api.objects["n"]
    assert not publisher.publish(body_at(0), NOW)  # unchanged: nothing asked
    assert publisher.publish(body_at(0, image("a", 1, layer(1, 1))), NOW)
    assert api.calls[-3:] == ["replace", "get", "create"]
    assert api.objects["n"]["spec"]["images"][0]["names"] == ["a"]


def test_a_failed_write_is_raised_and_the_next_attempt_reads_first() -> None:
    from webhook.agent.publish import PublishError

    api = FakeApi()
    publisher = Publisher(api)
    publisher.publish(body_at(0), NOW)

    def broken(*args: Any) -> Any:
        raise ApiError(500)
    api.replace_cluster_custom_object = broken  # type: ignore[method-assign,assignment]
    with pytest.raises(PublishError, match="HTTP 500"):
        publisher.publish(body_at(0, image("a", 1, layer(1, 1))), NOW)
    del api.replace_cluster_custom_object
    assert publisher.publish(body_at(0, image("a", 1, layer(1, 1))), NOW)
    assert api.calls[-2:] == ["get", "replace"]


@pytest.mark.parametrize(("age", "written"), [(10, False), (299, False), (300, True),
                                              (4000, True)])
def test_without_the_lease_the_heartbeat_rule_holds(age: int, written: bool) -> None:
    """While the Lease is not held (refused, not written yet), an unchanged object is
    rewritten once its heartbeat is a resync period old: the webhook's fallback for nodes
    without a Lease (3 x resyncSeconds) keeps the node fresh, as with older agents."""
    api = FakeApi()
    held = [False]
    publisher = Publisher(api, refresh=lambda: not held[0])
    publisher.publish(body_at(age), NOW)
    assert publisher.publish(body_at(0), NOW) is written
    held[0] = True
    assert not publisher.publish(body_at(0), NOW + timedelta(hours=1))


def test_a_digest_that_is_not_sha256_keeps_the_layer_list() -> None:
    other = Layer("sha512:" + "ab" * 64, 7)
    spec = spec_of([image("a:1", 10, layer(1, 100)), image("b:1", 11, other)])
    assert "packedLayers" not in spec
    assert spec["layers"] == [{"digest": d, "size": s}
                              for d, s in sorted([(layer(1, 100).digest, 100), (other.digest, 7)])]


def test_both_forms_parse_to_the_same_node_layers() -> None:
    """What the agent writes, packed, reads back as the same layers and images as the listed
    form of the same spec."""
    from webhook.inventory.nodelayers import parse_node_layers

    images = [image(f"i{n}:1", n, layer(n, n * 10), layer(1000 + n, 1)) for n in range(1, 6)]
    spec = build_spec("n", "containerd", AMD64, 300, "2026-01-01T00:00:00Z", images)
    packed = build_object(NodeRef("n"), spec)
    listed = copy.deepcopy(packed)
    del listed["spec"]["packedLayers"]
    listed["spec"]["layers"] = [{"digest": d, "size": s}
                                for d, s in spec_layer_pairs(dict(spec))]
    assert parse_node_layers(packed) == parse_node_layers(listed)
    assert layer_count(spec) == 10
