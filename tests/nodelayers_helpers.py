"""Building NodeLayers objects as the contract says (docs/deploy.md "Node agent"), from the
ImageLayers the tests already describe images with."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from typing import Any

from tests.helpers import AMD64, image
from webhook.core.layers import ImageLayers, Platform
from webhook.core.packedlayers import pack_layers, unpack_layers
from webhook.core.scoring import MiB

# A base image and an app built FROM it (the app adds one layer), shared by the NodeLayers tests.
SIZES = {"os": 80 * MiB, "python": 120 * MiB, "app": 60 * MiB}
LIB = image("registry.example.com/team/lib:1",
            {AMD64: [("os", SIZES["os"]), ("python", SIZES["python"])]})
APP = image("registry.example.com/team/app:1",
            {AMD64: [("os", SIZES["os"]), ("python", SIZES["python"]), ("app", SIZES["app"])]})
T0 = 1_800_000_000.0


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def nodelayers_object(node: str, images: Iterable[ImageLayers], platform: Platform,
                      heartbeat: float, resync_seconds: int = 300,
                      names: dict[str, list[str]] | None = None,
                      packed: bool = False) -> dict[str, Any]:
    """One node's object: distinct layers sorted by digest (`spec.layers`, or with `packed`
    `spec.packedLayers` as the agent writes them), images pointing into them. `names`
    overrides an image's names (by ref); default: its ref and repo@digest."""
    chosen = [(i, i.for_platform(platform)) for i in images]
    sizes = {layer.digest: layer.size for _, m in chosen if m for layer in m.layers}
    order = sorted(sizes)
    position = {digest: n for n, digest in enumerate(order)}
    obj: dict[str, Any] = {
        "apiVersion": "layer-locality.io/v1alpha1",
        "kind": "NodeLayers",
        "metadata": {"name": node},
        "spec": {
            "nodeName": node,
            "runtime": "containerd",
            "platform": str(platform),
            "resyncSeconds": resync_seconds,
            "heartbeat": rfc3339(heartbeat),
            "layers": [{"digest": d, "size": sizes[d]} for d in order],
            "images": [
                {"names": (names or {}).get(i.ref)
                 or [i.ref, f"{i.ref.rsplit(':', 1)[0]}@{i.digest}"],
                 "digest": i.digest, "manifest": m.digest,
                 "layers": [position[layer.digest] for layer in m.layers]}
                for i, m in chosen if m is not None
            ],
            "truncated": {"images": 0, "layers": 0},
        },
    }
    if packed:
        table = pack_layers((d, sizes[d]) for d in order)
        assert table is not None
        del obj["spec"]["layers"]
        obj["spec"]["packedLayers"] = table
    return obj


def spec_layer_pairs(spec: dict[str, Any]) -> list[tuple[str, int]]:
    """A spec's layer table as (digest, size) pairs, whichever form it has."""
    if "packedLayers" in spec:
        return unpack_layers(spec["packedLayers"], 10**6)
    return [(x["digest"], x["size"]) for x in spec["layers"]]


DELETE = object()  # set_path's value that deletes the field


def set_path(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A change to an object: the field at dotted `path` (list indices as numbers) set to
    `value`, or deleted with DELETE."""
    def change(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        target: Any = obj
        for key in parents:
            target = target[int(key)] if key.isdigit() else target[key]
        if value is DELETE:
            del target[last]
        else:
            target[int(last) if last.isdigit() else last] = value
    return change
