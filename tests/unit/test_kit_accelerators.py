"""The large synthetic image family (tests/kit/accelerators.py, issue 49): its layers shared
across tags as its docstring states, where the growth benchmark puts it (accelerator nodes'
NodeLayers objects), and the growth benchmark's slope and memory arithmetic."""

from __future__ import annotations

import math
from typing import Any

import pytest

from bench.served import growth_fit
from tests.kit import workload
from tests.kit.accelerators import (
    AMD64,
    BASES,
    FRAMEWORKS,
    GB,
    MB,
    OS_LAYER,
    REGISTRY,
    Framework,
    accelerator_images,
    node_accelerators,
)
from tests.kit.nodelayers_objects import nodelayers_objects


def _layers(ref: str) -> tuple[str, ...]:
    image = next(i for i in accelerator_images() if i.ref == ref)
    return tuple(layer.digest for layer in image.platforms[AMD64].layers)


def test_bases_have_four_layers_of_one_to_four_gb() -> None:
    for layers in BASES.values():
        assert len(layers) == 4
        assert all(1 * GB <= layer.size <= 4 * GB for layer in layers)


@pytest.mark.parametrize("framework", FRAMEWORKS, ids=lambda f: f.name)
def test_tags_share_base_and_framework_layers(framework: Framework) -> None:
    shared = {OS_LAYER.digest, *(layer.digest for layer in BASES[framework.base]),
              *(layer.digest for layer in framework.layers)}
    tags = [_layers(f"{REGISTRY}/{framework.name}:{tag}") for tag in framework.tags]
    assert len(tags) == 3
    for layers in tags:
        assert shared <= set(layers)
        assert len(set(layers) - shared) == 1  # the tag's own top layer, and no other
    tops = [set(layers) - shared for layers in tags]
    assert len(set().union(*tops)) == len(tags)  # each tag's top is its own
    assert all(1 * GB <= layer.size <= 3_500 * MB for layer in framework.layers)


def test_every_base_layer_is_shared_by_several_tags_and_the_base_image() -> None:
    family = accelerator_images()
    for name, layers in BASES.items():
        holders = [i.ref for i in family
                   if set(layers) <= set(i.platforms[AMD64].layers)]
        assert f"{REGISTRY}/cuda:{name}" in holders
        assert len(holders) >= 1 + 2 * 3  # its own image and two frameworks' three tags
    sizes = [sum(layer.size for layer in i.platforms[AMD64].layers) for i in family]
    assert min(sizes) > 7 * GB  # multi-GB images, every one


def test_world_catalog_holds_the_family_only_when_asked() -> None:
    plain, large = workload.build_world(), workload.build_world(accelerators=True)
    assert plain.accelerators == ()
    assert plain.apps == large.apps  # the rest of the data set unchanged
    refs = {image.ref for image in large.catalog.images()}
    assert {image.ref for image in large.accelerators} <= refs
    assert not any(ref.startswith(REGISTRY) for ref in (i.ref for i in plain.catalog.images()))


def test_accelerator_nodes_hold_a_base_and_two_tags_in_their_nodelayers() -> None:
    family = accelerator_images()
    assert node_accelerators(family, 1, 4) == []
    held = node_accelerators(family, 4, 4)
    assert len(held) == 3 and "/cuda:" in held[0].ref
    objects = nodelayers_objects(5, held=lambda i: node_accelerators(family, i, 4))
    names = {n for image in objects[4]["spec"]["images"] for n in image["names"]}
    assert {image.ref for image in held} <= names
    plain = {n for image in objects[1]["spec"]["images"] for n in image["names"]}
    assert not any(name.startswith(REGISTRY) for name in plain)
    assert objects[4]["spec"]["truncated"] == {"images": 0, "layers": 0}


def test_slopes_and_memory_split() -> None:
    runs: list[dict[str, Any]] = [
        {"nodes": n, "pods": n * p, "ready_seconds": n / 100, "rss_ready_mb": rss}
        for n, p, rss in ((1000, 30, 100.0), (4000, 30, 160.0), (16000, 10, 340.0))]
    fitted = growth_fit.slopes(runs)
    assert math.isclose(fitted["ready_seconds"]["overall"], 1.0)
    assert fitted["ready_seconds"]["linear_or_better"] is True
    assert [s["slope"] for s in fitted["ready_seconds"]["steps"]] == pytest.approx([1.0, 1.0])
    split = growth_fit.memory_split(runs)
    assert split is not None and split["split"]
    # three sizes, two ratios: the fit passes through all three points exactly
    for r in runs:
        assert growth_fit.projected_mb(split, r["nodes"], r["pods"]) == pytest.approx(
            r["rss_ready_mb"])
    two = growth_fit.memory_split(runs[:2])
    assert two is not None and not two["split"]
    assert two["kib_per_node_with_pods"] == pytest.approx(1024 * 60 / 3000)


def test_slope_targets_judge_from_5000_nodes() -> None:
    """Below 5,000 nodes the fixed start flattens the curve: the targets' slope starts there."""
    runs: list[dict[str, Any]] = [
        {"nodes": n, "pods": 30 * n, "ready_seconds": t, "rss_ready_mb": 100.0 + n / 100}
        for n, t in ((1000, 4.0), (5000, 5.0), (20000, 40.0))]
    found = growth_fit.targets(runs, growth_fit.slopes(runs), growth_fit.memory_split(runs),
                               (65_000, 1_950_000))
    ready = next(t for t in found if t["target"].startswith("ready s grows"))
    assert "from 5,000 nodes" in ready["target"] and not ready["met"]  # 8x for 4x: 1.5
    assert next(t for t in found if t["target"].startswith("ready at 20,000"))["met"] is True
