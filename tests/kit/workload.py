"""Deterministic synthetic clusters on top of the real base images of the embedded demo catalog
(Docker official images, linux/amd64, from ../shared/data/official-images-amd64.json).

Application images are a real base plus 1-3 synthetic layers; every node reports 50 images
(the kubelet's `nodeStatusMaxImages`): 10 real bases and 40 application images. One node in a
hundred is cordoned and one in fifty carries a NoSchedule taint, so the candidate filter does
real work. `build_world(accelerators=True)` adds a family of large synthetic images
(tests/kit/accelerators.py) to the catalog.
"""

from __future__ import annotations

import hashlib
import random
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any

import orjson

from tests.kit.accelerators import accelerator_images
from webhook.core.index import LayerIndex
from webhook.core.layerlabels import node_layer_labels
from webhook.core.layers import ImageLayers, Layer, Platform, PlatformLayers
from webhook.core.nodes import NodeInfo, Taint, layer_label_ids
from webhook.registry.catalog import StaticCatalog, catalog_document
from webhook.serving.wiring import demo_catalog

AMD64 = Platform.of("linux", "amd64")
IMAGES_PER_NODE = 50
BASES_PER_NODE = 10
APP_IMAGES = 1000
APP_REGISTRY = "apps.example.com"
TAINT = Taint(key="dedicated", value="batch", effect="NoSchedule")
MiB = 1 << 20


def sha(label: str) -> str:
    return "sha256:" + hashlib.sha256(label.encode()).hexdigest()


def short_ref(ref: str) -> str:
    """`docker.io/library/python:3.11` -> `python:3.11`, as users write it in a pod."""
    return ref.removeprefix("docker.io/library/")


@dataclass(frozen=True)
class World:
    bases: tuple[ImageLayers, ...]
    apps: tuple[ImageLayers, ...]
    catalog: StaticCatalog
    accelerators: tuple[ImageLayers, ...] = ()  # the large family, when asked for

    @property
    def images(self) -> tuple[ImageLayers, ...]:
        return self.bases + self.apps + self.accelerators


def build_world(app_images: int = APP_IMAGES, seed: int = 7,
                accelerators: bool = False) -> World:
    bases = tuple(
        image for image in demo_catalog().images() if image.for_platform(AMD64) is not None
    )
    rng = random.Random(seed)
    apps = []
    for i in range(app_images):
        base = rng.choice(bases).for_platform(AMD64)
        assert base is not None
        extra = tuple(
            Layer(sha(f"app {i} layer {k}"), int(rng.lognormvariate(2.5, 1.2) * MiB))
            for k in range(rng.randint(1, 3))
        )
        ref = f"{APP_REGISTRY}/team-{i % 40}/app-{i}:1.0"
        apps.append(ImageLayers(
            ref=ref, digest=sha(f"index {ref}"),
            platforms={AMD64: PlatformLayers(sha(f"manifest {ref}"), base.layers + extra)},
        ))
    family = accelerator_images() if accelerators else ()
    catalog = StaticCatalog([*bases, *apps, *family])
    return World(bases, tuple(apps), catalog, family)


def node_name(i: int) -> str:
    """An EKS-style node name (the hostname label too): real names are 25-45 characters, and
    they are what patches, the index and the pod watch hold, so their length counts."""
    return f"ip-10-{16 + (i >> 16)}-{(i >> 8) & 255}-{i & 255}.eu-west-1.compute.internal"


def node_images(world: World, rng: random.Random) -> list[ImageLayers]:
    return rng.sample(world.bases, BASES_PER_NODE) + rng.sample(
        world.apps, IMAGES_PER_NODE - BASES_PER_NODE
    )


def reported_names(image: ImageLayers) -> tuple[str, str]:
    """As containerd reports an image: `repo@<digest the tag resolved to>` and `repo:tag`."""
    # Interned, as node_from_object does: 5,000 nodes share one string per name.
    return (sys.intern(f"{image.ref.rsplit(':', 1)[0]}@{image.digest}"), sys.intern(image.ref))


def node_info(i: int, images: Sequence[ImageLayers]) -> NodeInfo:
    name = node_name(i)
    return NodeInfo(
        name=name, hostname=name, platform=AMD64,
        unschedulable=i % 100 == 99,
        taints=(TAINT,) if i % 50 == 7 else (),
        images=tuple(reported_names(image) for image in images),
    )


def layers_of(images: Sequence[ImageLayers]) -> set[str]:
    found: set[str] = set()
    for image in images:
        manifest = image.for_platform(AMD64)
        assert manifest is not None
        found.update(layer.digest for layer in manifest.layers)
    return found


def layer_labels(images: Sequence[ImageLayers]) -> dict[str, str]:
    """The layer labels a node agent puts on a node holding `images` (its rule's defaults)."""
    sizes = {layer.digest: layer.size for image in images
             for layer in image.platforms[AMD64].layers}
    return node_layer_labels(sizes)


def build_index(world: World, nodes: int, seed: int = 11, labelled: bool = False) -> LayerIndex:
    """The index built directly (LayerIndex.upsert), as the handler benchmark needs it;
    `labelled`: every node carries its agent's layer labels, vouched for (the agent runs)."""
    rng = random.Random(seed)
    index = LayerIndex()
    for i in range(nodes):
        images = node_images(world, rng)
        info = node_info(i, images)
        if labelled:
            info = replace(info, layer_labels=layer_label_ids(layer_labels(images)))
        index.upsert(info, layers_of(images))
    return index


def node_object(i: int, images: Sequence[ImageLayers], version: int = 1) -> dict[str, Any]:
    """A Node as the API server returns it (the fields a real one has that we read, plus the
    bulk of a real status: conditions, addresses, capacity)."""
    name = node_name(i)
    spec: dict[str, Any] = {"podCIDR": f"10.{i // 256 % 256}.{i % 256}.0/24"}
    if i % 100 == 99:
        spec["unschedulable"] = True
    if i % 50 == 7:
        spec["taints"] = [{"key": TAINT.key, "value": TAINT.value, "effect": TAINT.effect}]
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name, "uid": sha(f"uid {name}")[7:43], "resourceVersion": str(version),
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64",
                       "topology.kubernetes.io/zone": f"zone-{i % 3}"},
        },
        "spec": spec,
        "status": {
            "nodeInfo": {"operatingSystem": "linux", "architecture": "amd64",
                         "kubeletVersion": "v1.31.0", "containerRuntimeVersion": "containerd://1.7"},
            "capacity": {"cpu": "16", "memory": "65843200Ki", "pods": "110"},
            "allocatable": {"cpu": "15890m", "memory": "64716800Ki", "pods": "110"},
            "addresses": [{"type": "InternalIP", "address": f"10.0.{i // 256 % 256}.{i % 256}"},
                          {"type": "Hostname", "address": name}],
            "conditions": [{"type": t, "status": "False" if t != "Ready" else "True",
                            "lastHeartbeatTime": "2025-01-01T00:00:00Z",
                            "reason": f"Kubelet{t}"}
                           for t in ("MemoryPressure", "DiskPressure", "PIDPressure", "Ready")],
            "images": [{"names": list(reported_names(image)), "sizeBytes": sum(
                layer.size for layer in image.platforms[AMD64].layers)} for image in images],
        },
    }


def node_objects(world: World, nodes: int, seed: int = 11) -> Iterator[dict[str, Any]]:
    rng = random.Random(seed)
    for i in range(nodes):
        yield node_object(i, node_images(world, rng))


def pod(name: str, images: Sequence[str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "bench",
                     "labels": {"app": name.rsplit("-", 1)[0]}},
        "spec": {
            "containers": [
                {"name": f"c{k}", "image": image,
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}},
                 "ports": [{"containerPort": 8080 + k}]}
                for k, image in enumerate(images)
            ],
            "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                             "effect": "NoExecute", "tolerationSeconds": 300}],
        },
    }


def review_doc(obj: dict[str, Any], uid: str) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "resource": {"group": "", "version": "v1", "resource": "pods"},
            "requestKind": {"group": "", "version": "v1", "kind": "Pod"},
            "requestResource": {"group": "", "version": "v1", "resource": "pods"},
            "namespace": "bench", "operation": "CREATE",
            "userInfo": {"username": "system:serviceaccount:kube-system:replicaset-controller"},
            "object": obj, "oldObject": None, "dryRun": False,
            "options": {"apiVersion": "meta.k8s.io/v1", "kind": "CreateOptions"},
        },
    }


def two_container_pods(world: World, count: int, seed: int = 3) -> list[dict[str, Any]]:
    """Pods of an application image plus a real-base sidecar, as users write them."""
    rng = random.Random(seed)
    pods = []
    for i in range(count):
        app = rng.choice(world.apps).ref
        sidecar = short_ref(rng.choice(world.bases).ref)
        pods.append(pod(f"app{i % 50}-{i}", [app, sidecar]))
    return pods


def owned_review(doc: dict[str, Any], owner: str) -> dict[str, Any]:
    """The review (changed in place) as a ReplicaSet's pod arrives: generateName, a
    controller owner whose uid is `owner`."""
    metadata = doc["request"]["object"]["metadata"]
    metadata["generateName"] = f"{metadata.pop('name', 'pod')}-"
    metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                    "name": owner, "uid": owner, "controller": True}]
    return doc


def review_bodies(world: World, count: int, seed: int = 3) -> list[bytes]:
    return [
        orjson.dumps(review_doc(p, f"00000000-0000-4000-8000-{i:012d}"))
        for i, p in enumerate(two_container_pods(world, count, seed))
    ]


def catalog_bytes(world: World) -> bytes:
    return orjson.dumps(catalog_document(world.images))


def node_list_bytes(world: World, nodes: int) -> bytes:
    return orjson.dumps({"apiVersion": "v1", "kind": "NodeList", "metadata": {},
                         "items": list(node_objects(world, nodes))})
