"""Build the embedded demo inventory (webhook/data/) from the real layer data in
../shared/data/official-images-amd64.json: `python scripts/build_demo_inventory.py [DATA]`.

The nodes are invented; every digest and size is real. Node image names are what containerd
reports: the repo@index-digest and the tag."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATA = ROOT.parent / "shared" / "data" / "official-images-amd64.json"

# name, hostname label, images, extras
NODES: list[tuple[str, str, list[str], dict[str, object]]] = [
    ("demo-python.cluster.internal", "demo-python",
     ["python:3.11", "python:3.11-slim", "redis:7.0"], {}),
    ("demo-node.cluster.internal", "demo-node", ["node:18", "node:18-slim", "nginx:1.23"], {}),
    ("demo-jvm.cluster.internal", "demo-jvm",
     ["eclipse-temurin:17-jdk", "eclipse-temurin:17-jre", "ubuntu:22.04"], {}),
    ("demo-alpine.cluster.internal", "demo-alpine",
     ["python:3.11-alpine", "node:18-alpine", "nginx:1.23-alpine", "redis:7.0-alpine",
      "postgres:15-alpine"], {}),
    ("demo-build.cluster.internal", "demo-build",
     ["gcc:12", "golang:1.19", "buildpack-deps:bullseye", "rust:1.67"], {}),
    ("demo-fresh.cluster.internal", "demo-fresh", [], {}),
    ("demo-cordoned.cluster.internal", "demo-cordoned", ["python:3.11", "node:18"],
     {"unschedulable": True}),
    ("demo-gpu.cluster.internal", "demo-gpu", ["python:3.11", "node:18"],
     {"taints": [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]}),
]


ZONES = ("demo-zone-a", "demo-zone-b", "demo-zone-c")
# What the scheduler reads from a node (the local cluster creates these nodes for real):
# capacity and allocatable, the Ready condition, the zone the default spreading uses.
CAPACITY = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
ALLOCATABLE = {"cpu": "7800m", "memory": "31Gi", "pods": "110", "ephemeral-storage": "95Gi"}


def main() -> None:
    data = json.loads(Path(sys.argv[1] if len(sys.argv) > 1 else DEFAULT_DATA).read_text())
    images = {entry["ref"]: entry for entry in data["images"]}
    catalog = {
        "images": [
            {
                "ref": entry["ref"],
                "digest": entry["index_digest"],
                "platforms": {
                    data["platform"]: {
                        "digest": entry["manifest_digest"],
                        "layers": entry["layers"],
                    }
                },
            }
            for entry in data["images"]
        ]
    }
    items = []
    for position, (name, hostname, refs, extras) in enumerate(NODES):
        status_images = []
        for short in refs:
            entry = images[f"docker.io/library/{short}"]
            repo = entry["ref"].rsplit(":", 1)[0]
            compressed = sum(layer["size"] for layer in entry["layers"])
            status_images.append({
                "names": [f"{repo}@{entry['index_digest']}", entry["ref"]],
                "sizeBytes": compressed,  # kubelet reports unpacked size; compressed stands in
            })
        status_images.sort(key=lambda image: -image["sizeBytes"])
        spec: dict[str, object] = {}
        if extras.get("unschedulable"):
            spec["unschedulable"] = True
        if "taints" in extras:
            spec["taints"] = extras["taints"]
        items.append({
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {
                "name": name,
                "labels": {
                    "kubernetes.io/hostname": hostname,
                    "kubernetes.io/os": "linux",
                    "kubernetes.io/arch": "amd64",
                    "topology.kubernetes.io/zone": ZONES[position % len(ZONES)],
                },
            },
            "spec": spec,
            "status": {
                "nodeInfo": {"operatingSystem": "linux", "architecture": "amd64"},
                "capacity": CAPACITY,
                "allocatable": ALLOCATABLE,
                "conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady"}],
                "images": status_images,
            },
        })
    out = ROOT / "webhook" / "data"
    out.mkdir(exist_ok=True)
    (out / "demo-catalog.json").write_text(json.dumps(catalog, indent=1) + "\n")
    node_list = {"apiVersion": "v1", "kind": "NodeList", "metadata": {}, "items": items}
    (out / "demo-nodes.json").write_text(json.dumps(node_list, indent=1) + "\n")
    print(f"wrote {len(catalog['images'])} images and {len(items)} nodes to {out}")


if __name__ == "__main__":
    main()
