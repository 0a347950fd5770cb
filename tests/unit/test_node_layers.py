"""node_layers: a node's reported images -> the layers it holds, for its own platform.

The names of an image are parsed once per distinct tuple (a cache in static.py); the answers
come from the sources at each call, so an image the sources learn later counts at the next
call. A manifest's layer set is made once (PlatformLayers.layer_set)."""

from __future__ import annotations

from tests.helpers import FakeSource
from webhook.core.layers import ImageLayers, Layer, Platform, PlatformLayers
from webhook.core.nodes import NodeInfo
from webhook.inventory.static import node_layers

AMD64 = Platform("linux", "amd64")
ARM64 = Platform("linux", "arm64")


def _digest(n: int) -> str:
    return "sha256:" + f"{n:x}".rjust(64, "0")


def _image(ref: str, index: int, layers_by_platform: dict[Platform, tuple[int, ...]]
           ) -> ImageLayers:
    return ImageLayers(ref, _digest(index), {
        platform: PlatformLayers(_digest(index + 100 + k),
                                 tuple(Layer(_digest(n), n) for n in layers))
        for k, (platform, layers) in enumerate(layers_by_platform.items())})


def _node(*images: tuple[str, ...], platform: Platform = AMD64) -> NodeInfo:
    return NodeInfo(name="n1", hostname="n1", platform=platform, unschedulable=False,
                    taints=(), images=images)


APP = "registry.example/team/app"
APP_AT = f"{APP}@{_digest(7)}"


def test_the_digest_name_is_asked_first_and_names_the_content() -> None:
    moved_tag = _image(f"{APP}:1", 1, {AMD64: (11, 12)})
    pinned = _image(APP_AT, 2, {AMD64: (21, 22, 23)})
    source = FakeSource({f"{APP}:1": moved_tag, APP_AT: pinned})
    found = node_layers(_node((f"{APP}:1", APP_AT)), source)
    assert found.layers == {_digest(n) for n in (21, 22, 23)}
    assert found.images == {_digest(2)}
    assert source.asked == [APP_AT]


def test_unresolved_images_are_named_by_their_first_name_and_recalled_by_it() -> None:
    recalled: list[tuple[str, ImageLayers | None]] = []
    remembered = _image("old", 3, {AMD64: (31,)})

    def recall(name: str, image: ImageLayers | None) -> ImageLayers | None:
        recalled.append((name, image))
        return remembered if name == APP_AT else image

    found = node_layers(_node((f"{APP}:1", APP_AT), ("not a reference!",)), FakeSource({}), recall)
    assert found.unresolved == (APP_AT, "not a reference!")
    assert recalled == [(APP_AT, None), ("not a reference!", None)]
    assert found.layers == {_digest(31)}


def test_layers_are_the_union_for_the_nodes_platform_only() -> None:
    multi = _image(f"{APP}:2", 4, {AMD64: (1, 2, 3), ARM64: (4, 5)})
    other = _image("registry.example/base:1", 5, {AMD64: (3, 6)})
    arm_only = _image("registry.example/arm:1", 6, {ARM64: (9,)})
    source = FakeSource({f"{APP}:2": multi, "registry.example/base:1": other,
                     "registry.example/arm:1": arm_only})
    images = ((f"{APP}:2",), ("registry.example/base:1",), ("registry.example/arm:1",), ())
    amd = node_layers(_node(*images), source)
    assert amd.layers == {_digest(n) for n in (1, 2, 3, 6)}
    assert amd.images == {_digest(4), _digest(5), _digest(6)}  # an image without the platform
    assert amd.unresolved == ()
    arm = node_layers(_node(*images, platform=ARM64), source)
    assert arm.layers == {_digest(n) for n in (4, 5, 9)}


def test_an_image_the_source_learns_later_counts_at_the_next_call() -> None:
    source = FakeSource({})
    node = _node((APP_AT,))
    assert node_layers(node, source).unresolved == (APP_AT,)
    source.known[APP_AT] = _image(APP_AT, 8, {AMD64: (81, 82)})
    again = node_layers(node, source)
    assert again.unresolved == ()
    assert again.layers == {_digest(81), _digest(82)}


def test_a_manifests_layer_set_is_its_digests_and_not_part_of_its_identity() -> None:
    layers = (Layer(_digest(1), 10), Layer(_digest(2), 20), Layer(_digest(1), 10))
    manifest = PlatformLayers(_digest(9), layers)
    assert manifest.layer_set == {_digest(1), _digest(2)}
    same = PlatformLayers(_digest(9), layers)
    assert manifest == same and hash(manifest) == hash(same)
    assert "layer_set" not in repr(manifest)
