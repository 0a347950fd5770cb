"""Platforms, per-platform layer lists, the source chain, and a pod's bytes over platforms."""

from __future__ import annotations

import logging

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import AMD64, ARM64, FakeSource, digest, image, inventory, node_object, pod
from webhook.core.decide import decide
from webhook.core.images import parse_image
from webhook.core.layers import ImageLayers, Layer, Platform, PlatformLayers, SourceChain
from webhook.core.pods import DECISION_ANNOTATION
from webhook.core.prepare import pod_layers
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.registry.catalog import StaticCatalog


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("linux/amd64", Platform("linux", "amd64", "")),
        ("windows/amd64", Platform("windows", "amd64", "")),
        ("linux/arm/v7", Platform("linux", "arm", "v7")),
        # containerd: arm64 without a variant is v8, so both spellings are one platform
        ("linux/arm64", Platform("linux", "arm64", "")),
        ("linux/arm64/v8", Platform("linux", "arm64", "")),
        ("linux/arm64/v9", Platform("linux", "arm64", "v9")),
        # only arm64's default variant is dropped
        ("linux/arm/v8", Platform("linux", "arm", "v8")),
    ],
)
def test_platform_parse(text: str, expected: Platform) -> None:
    assert Platform.parse(text) == expected


@pytest.mark.parametrize(
    "text", ["", "linux", "linux/", "/amd64", "linux/amd64/", "linux//v8", "a/b/c/d", "/"]
)
def test_platform_parse_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="invalid platform"):
        Platform.parse(text)


@pytest.mark.parametrize(
    ("platform", "text"),
    [
        (Platform.of("linux", "amd64"), "linux/amd64"),
        (Platform.of("linux", "arm64", "v8"), "linux/arm64"),
        (Platform.of("linux", "arm", "v7"), "linux/arm/v7"),
    ],
)
def test_platform_str(platform: Platform, text: str) -> None:
    assert str(platform) == text


_part = st.from_regex(r"[a-z0-9]{1,8}", fullmatch=True)


@given(_part, _part, st.just("") | _part)
def test_platform_text_round_trip(os: str, arch: str, variant: str) -> None:
    platform = Platform.of(os, arch, variant)
    assert Platform.parse(str(platform)) == platform


MANIFEST_AMD = PlatformLayers(digest("m-amd"), (Layer(digest("a"), 10), Layer(digest("b"), 32)))
MANIFEST_ARM = PlatformLayers(digest("m-arm"), (Layer(digest("c"), 5),))
MULTI = ImageLayers("docker.io/library/x:1", digest("index"),
                    {AMD64: MANIFEST_AMD, Platform.parse("linux/arm64/v8"): MANIFEST_ARM})


def test_for_platform() -> None:
    assert MULTI.for_platform(Platform.parse("linux/amd64")) is MANIFEST_AMD
    assert MULTI.for_platform(Platform.parse("linux/arm64")) is MANIFEST_ARM
    assert MULTI.for_platform(Platform.parse("linux/arm/v7")) is None
    assert MULTI.for_platform(Platform.parse("windows/amd64")) is None


def test_digests_and_size() -> None:
    assert MULTI.digests() == {digest("index"), digest("m-amd"), digest("m-arm")}
    assert MANIFEST_AMD.size == 42
    assert PlatformLayers(digest("empty"), ()).size == 0


REF = parse_image("x:1")
FIRST = image("docker.io/library/x:1", {AMD64: [("first", 1)]})
SECOND = image("docker.io/library/x:1", {AMD64: [("second", 1)]})


async def test_chain_first_source_that_knows_answers() -> None:
    one, two, three = FakeSource({}), FakeSource({str(REF): FIRST}), FakeSource({str(REF): SECOND})
    chain = SourceChain([one, two, three])
    assert chain.cached(REF) is FIRST
    assert await chain.resolve(REF) is FIRST
    assert three.asked == [], "sources after the first answer are not asked"
    assert one.asked == [str(REF), str(REF)]


async def test_chain_failing_source_counts_as_a_miss() -> None:
    failing, good = FakeSource({str(REF): FIRST}, fail=True), FakeSource({str(REF): SECOND})
    chain = SourceChain([failing, good])
    assert await chain.resolve(REF) is SECOND
    assert failing.asked == [str(REF)]
    assert await SourceChain([failing]).resolve(REF) is None


async def test_chain_logs_which_source_failed_for_which_image(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="webhook.core.layers")
    await SourceChain([FakeSource({}, fail=True)]).resolve(REF)
    assert [r.getMessage() for r in caplog.records] == [
        "layer source FakeSource failed for docker.io/library/x:1: registry unreachable"]


async def test_chain_nobody_knows() -> None:
    chain = SourceChain([FakeSource({}), FakeSource({})])
    assert chain.cached(REF) is None
    assert await chain.resolve(REF) is None
    assert await SourceChain([]).resolve(REF) is None


def test_pod_layers_per_platform() -> None:
    app = image("r.example.com/app:1", {AMD64: [("base-amd", 7), ("app", 3)],
                                        ARM64: [("base-arm", 11), ("app", 3)]})
    side = image("r.example.com/side:1", {AMD64: [("base-amd", 7), ("side", 2)]})
    arm_v7 = Platform.parse("linux/arm/v7")
    got = pod_layers([app, side], [AMD64, ARM64, arm_v7])
    # a layer two images share counts once; a platform no image has is left out
    assert got == {
        AMD64: {digest("base-amd"): 7, digest("app"): 3, digest("side"): 2},
        ARM64: {digest("base-arm"): 11, digest("app"): 3},
    }
    assert pod_layers([app], [arm_v7]) == {}


# A pod's image differs in size per platform. Its size ("podBytes", and the denominator of
# the share-of-pull blend) is its pull on the LARGEST platform: the cost the scheduler might
# make it pay. Taking the minimum would call a 300 MiB pull 100 MiB.
MIXED = image("ghcr.io/org/mixed:1", {
    AMD64: [("base-amd64", 60 * MiB), ("app", 40 * MiB)],   # 100 MiB
    ARM64: [("base-arm64", 260 * MiB), ("app", 40 * MiB)],  # 300 MiB
})


@pytest.mark.parametrize(("share", "weights"), [
    # absolute bytes (default): 100 of 1000 MiB -> 10 points, 300 -> 30
    (0.0, {"amd64": 10, "arm64": 30}),
    # share of the pod's pull, pod = 300 MiB: amd64 saves 100/300 -> ceil(33.3) = 34; arm64 100
    (1.0, {"amd64": 34, "arm64": 100}),
])
def test_pod_bytes_is_the_largest_platform(share: float, weights: dict[str, int]) -> None:
    """Weighed by the share of the pod's pull or by absolute bytes (lack_bytes 0: weights
    from what a node lacks beyond the best do not read the pod's size)."""
    catalog = StaticCatalog([MIXED])
    # per platform, a node holding the image and an empty one
    _, index = inventory([node_object(f"{p.architecture}{suffix}", held, platform=p)
                          for p in (AMD64, ARM64)
                          for suffix, held in (("", [MIXED]), ("-empty", []))], catalog)
    obj = pod([MIXED.ref])
    decision = decide(obj, [MIXED], index, ScoringPolicy(share=share, lack_bytes=0), salt="s")
    assert decision.pod_bytes == 300 * MiB
    assert {score.node.name: score.weight for score in decision.preferred} == weights
    annotation = next(op["value"] for op in decision.patch
                      if op["path"].startswith("/metadata/annotations"))
    if isinstance(annotation, dict):
        annotation = annotation[DECISION_ANNOTATION]
    assert orjson.loads(annotation)["podBytes"] == 300 * MiB
