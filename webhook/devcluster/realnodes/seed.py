"""The seed scenario on a fresh cluster of real nodes (`cluster up --kubelets N --seed-demo`,
which `make cluster NODES=N` passes): what a new user's first dry run should show.

Two images built here share a base: IMG1 = L1, L2, L3 and IMG2 = L1, L2, L4 (L1 busybox, the
others generated). IMG1 runs once on node-1 and IMG2 on node-2 (pods in a plain namespace,
deleted once Running: containerd keeps the layers); node-3 and later stay empty. A dry run of
a pod running IMG1 in an opted-in namespace then puts node-1 first (all of it), node-2 next
(L1 + L2) and the empty nodes last: the layer-aware result ImageLocality cannot give, since
node-2 never held IMG1 by name. The images come from the cluster's own registry, which the
webhook may ask, so the example works air-gapped."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from webhook.devcluster.processes import ClusterError
from webhook.devcluster.realnodes import oci
from webhook.devcluster.realnodes.network import registry_host
from webhook.devcluster.realnodes.pinned import run_pinned

MiB = 1 << 20
SEED_NAMESPACE = "layer-locality-seed"
DEMO_NAMESPACE = "layer-locality-demo"  # examples/namespace.yaml's, opted in
POD_FILE = "seed-pod.yaml"
RUNNING_TIMEOUT = 180.0


@dataclass(frozen=True, slots=True)
class SeedImages:
    img1: oci.Image
    img2: oci.Image


def seed_images() -> SeedImages:
    """IMG1 and IMG2: 1 + 40 + 16 MiB and 1 + 40 + 8 MiB (node-2's share of IMG1, L1 + L2,
    is well above the webhook's 23 MiB floor, and it lacks 16 MiB of IMG1: within
    --lack-bytes, 23 MiB, of node-1, so it is weighed, below node-1 and above the empty
    nodes; a node lacking more than that beyond the best weighs no more than an empty one)."""
    l1 = oci.busybox_layer()
    l2 = oci.filler_layer("seed-l2", 40 * MiB)

    def sleeping(repository: str, *layers: oci.Layer) -> oci.Image:
        return oci.Image(repository, "1", layers, entrypoint=("/bin/sleep",), cmd=("3600",))

    return SeedImages(sleeping("demo/img1", l1, l2, oci.filler_layer("seed-l3", 16 * MiB)),
                      sleeping("demo/img2", l1, l2, oci.filler_layer("seed-l4", 8 * MiB)))


def pod_manifest(name: str, image: str, namespace: str, node: str | None = None,
                 ) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "app", "image": image,
                        "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}],
        "terminationGracePeriodSeconds": 0,
    }
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def seed(core: Any, nodes: list[str], root: Path,
         clock: Callable[[], float] = time.monotonic) -> Path:
    """Push the images, warm node-1 with IMG1 and node-2 with IMG2, write the example pod
    (IMG1, the demo namespace) to `root`/seed-pod.yaml and return its path. `core`: a
    CoreV1Api of the cluster; `nodes`: its real nodes, in order (two at least)."""
    if len(nodes) < 2:
        raise ClusterError("the seed scenario needs two real nodes at least (--kubelets 2)")
    images = seed_images()
    base = f"http://{registry_host()}"
    oci.push(base, images.img1)
    oci.push(base, images.img2, mount_from=images.img1.repository)
    # The layers stay in containerd: the nodes hold them from now on.
    run_pinned(core, SEED_NAMESPACE, {"warm-img1": (images.img1.ref(registry_host()), nodes[0]),
                                      "warm-img2": (images.img2.ref(registry_host()), nodes[1])},
               RUNNING_TIMEOUT, "the seed pods", clock)
    path = root / POD_FILE
    path.write_text(yaml.safe_dump(pod_manifest(
        "layer-locality-seed-example", images.img1.ref(registry_host()), DEMO_NAMESPACE),
        sort_keys=False))
    return path


def next_steps(path: Path, nodes: list[str], run: str) -> str:
    """What to run next, and what it will show. `run`: the prefix that reaches the cluster's
    namespace (`layer-locality cluster exec --dir D --`)."""
    empty = ", ".join(nodes[2:]) or "none here (use --kubelets 3 for one)"
    return f"""
Seeded: {registry_host()}/demo/img1 (L1 busybox, L2 40 MiB, L3 16 MiB) ran on {nodes[0]},
demo/img2 (L1, L2, L4 8 MiB) on {nodes[1]}; empty: {empty}. Try it (node status lists the
images within about 40 s: the kubelet refreshes its image list every 30 s):
  {run} kubectl apply -f examples/namespace.yaml
  {run} kubectl apply --dry-run=server -o yaml -f {path}
The dry run's preferred terms put {nodes[0]} first (all of img1), then {nodes[1]} (L1 + L2:
41 of its 57 MiB), then the empty nodes; its layer-locality.io/decision annotation says so."""
