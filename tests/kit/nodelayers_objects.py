"""Synthetic NodeLayers objects, as node agents publish them at scale: layers from a pool of
20,000 (sizes drawn from the real layers of the embedded official-images catalog), images of 8
layers from that pool and nodes from a pool of images, both with Zipf popularity, so that nodes
share base layers as real ones do; 300 layers a node. Written with the agent's own code
(webhook.agent.nodelayers.build_spec, build_object). The NodeLayers benchmark
(bench/inprocess/nodelayers.py), the control-plane benchmark and the stand-in API server's
`--nodelayers` (apiserver_process.py) hold these; with `--accelerators` the accelerator nodes'
objects hold the large synthetic family (tests/kit/accelerators.py) first."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from itertools import accumulate
from typing import Any

from tests.kit import workload
from webhook.agent.nodelayers import NodeRef, RuntimeImage, build_object, build_spec
from webhook.core.layers import ImageLayers, Layer, Platform

LAYERS_PER_NODE = 300
LAYER_POOL = 20_000
IMAGE_POOL = 5_000
LAYERS_PER_IMAGE = 8
ZIPF_S = 1.1

def _zipf_cum(n: int) -> list[float]:
    return list(accumulate(1 / (rank + 1) ** ZIPF_S for rank in range(n)))


def _image_pool(rng: random.Random) -> list[tuple[str, tuple[Layer, ...]]]:
    """(repository, layers) per image; layer digests and sizes are interned by sharing."""
    sizes = [layer.size for image in workload.build_world(app_images=0).bases
             for manifest in image.platforms.values() for layer in manifest.layers]
    pool = [Layer(workload.sha(f"layer {k}"), rng.choice(sizes)) for k in range(LAYER_POOL)]
    cum = _zipf_cum(LAYER_POOL)
    images = []
    for k in range(IMAGE_POOL):
        chosen: dict[str, Layer] = {}
        while len(chosen) < LAYERS_PER_IMAGE:
            layer = rng.choices(pool, cum_weights=cum)[0]
            chosen.setdefault(layer.digest, layer)
        images.append((f"registry.example/team{k % 40}/app{k}", tuple(chosen.values())))
    return images


def nodelayers_objects(nodes: int, seed: int = 13,
                       held: Callable[[int], Sequence[ImageLayers]] | None = None,
                       ) -> list[dict[str, Any]]:
    """One valid, fresh NodeLayers object per node (named workload.node_name(i)): images
    drawn until 300 distinct layers; `held(i)`: images node i holds before those (counted in
    its 300 layers)."""
    rng = random.Random(seed)
    images = _image_pool(rng)
    cum = _zipf_cum(IMAGE_POOL)
    heartbeat = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    platform = Platform("linux", "amd64")
    objects = []
    for i in range(nodes):
        layers: set[str] = set()
        picked: dict[int, RuntimeImage] = {}
        for n, image in enumerate(held(i) if held is not None else ()):
            manifest = image.platforms[platform]
            layers.update(layer.digest for layer in manifest.layers)
            picked[-1 - n] = RuntimeImage(image.ref, image.digest, manifest.digest,
                                          manifest.layers)
        for _ in range(5_000):  # an image that would overshoot is skipped
            k = rng.choices(range(IMAGE_POOL), cum_weights=cum)[0]
            repo, image_layers = images[k]
            new = {layer.digest for layer in image_layers} - layers
            if k in picked or len(layers) + len(new) > LAYERS_PER_NODE:
                continue
            layers |= new
            picked[k] = RuntimeImage(f"{repo}:v1", workload.sha(f"image {k}"),
                                     workload.sha(f"image {k}"), image_layers)
            if len(layers) == LAYERS_PER_NODE:
                break
        name = workload.node_name(i)
        spec = build_spec(name, "containerd", platform, 300, heartbeat, picked.values())
        objects.append(build_object(NodeRef(name, workload.sha(f"uid {name}")[7:43]), spec))
    return objects
