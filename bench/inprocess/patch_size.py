"""4. Patch size: the bytes a patch adds to a pod as stored (every byte lives in etcd for the
pod's life), at the default settings, 5,000 nodes x 50 images, the workload's 2-container pods
(owned by ReplicaSets; live mode, so the spread guard is on: 30 bound pods per node tracked).

Measured the way the API server would store it: the patch applied to the pod with jsonpatch,
`len(orjson.dumps(patched)) - len(orjson.dumps(pod))`. Node names: EKS-style (41 characters,
as tests/kit/workload.py) and the worst case a hostname label allows (63 characters).

`python -m bench.inprocess.patch_size [--quick]`"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import random
from typing import Any

import jsonpatch
import orjson

from bench import report
from tests.kit import workload
from webhook.core.admission import parse_review
from webhook.core.index import LayerIndex
from webhook.core.scoring import ScoringPolicy
from webhook.inventory.memory import StaticInventory
from webhook.inventory.siblings import SiblingTracker
from webhook.serving.mutate import Mutator

NODES = 5_000
PODS = 1_000
PODS_PER_NODE = 30
TARGET_BYTES = 4096  # the 4 KB target, the default --max-patch-bytes


def long_name(i: int) -> str:
    """A 63-character node name and hostname label (the label value limit), unique per i."""
    return f"{workload.node_name(i).removesuffix('.compute.internal')}.k8s.example.com".ljust(
        63, "x")[:63]


def build_index(world: workload.World, nodes: int, long: bool, seed: int = 11) -> LayerIndex:
    rng = random.Random(seed)
    index = LayerIndex()
    for i in range(nodes):
        images = workload.node_images(world, rng)
        node = workload.node_info(i, images)
        if long:
            node = dataclasses.replace(node, name=long_name(i), hostname=long_name(i))
        index.upsert(node, workload.layers_of(images))
    return index


async def _measure(mutator: Mutator, docs: list[dict[str, Any]]) -> dict[str, Any]:
    added: list[int] = []
    original: list[int] = []
    hostnames: list[int] = []
    cut: list[int] = []
    unpatched = 0
    for doc in docs:
        outcome = await mutator.review(parse_review(orjson.dumps(doc)))
        pod = doc["request"]["object"]
        size = len(orjson.dumps(pod))
        original.append(size)
        if not outcome.patch:
            unpatched += 1
            continue
        patched = jsonpatch.apply_patch(pod, list(outcome.patch))
        added.append(len(orjson.dumps(patched)) - size)
        hostnames.append(sum(len(t.hostnames) for t in outcome.terms))
        assert outcome.decision is not None
        cut.append(outcome.decision.cut)
    ordered = sorted(added)
    return {
        "pods": len(docs), "patched": len(added), "unpatched": unpatched,
        "pod_bytes_p50": report.percentile(sorted(original), 50),
        "added_p50": report.percentile(ordered, 50), "added_p90": report.percentile(ordered, 90),
        "added_p99": report.percentile(ordered, 99), "added_max": ordered[-1] if ordered else 0,
        "mean_hostnames": sum(hostnames) / max(1, len(hostnames)),
        "mean_cut": sum(cut) / max(1, len(cut)),
    }


def run(quick: bool = False, nodes: int = NODES) -> dict[str, Any]:
    world = workload.build_world()
    pods = 200 if quick else PODS
    owners = max(1, nodes * PODS_PER_NODE // 3)
    rows: list[dict[str, Any]] = []
    for names, long in (("EKS-style, 41 chars", False), ("63 chars (label limit)", True)):
        index = build_index(world, nodes, long)
        for mode, policy, spread in (("live (share 1, spread guard)", ScoringPolicy(), True),
                                     ("static (share 0)", ScoringPolicy(share=0.0), False)):
            tracker = None
            if spread:
                tracker = SiblingTracker()
                for n, node in enumerate(index.nodes()):
                    for j in range(PODS_PER_NODE):
                        tracker.bound(f"pod-{n}-{j}",
                                      f"owner-{(n * PODS_PER_NODE + j) % owners}", node.name)
            docs = [workload.owned_review(orjson.loads(body), f"owner-{i % owners}")
                    for i, body in enumerate(workload.review_bodies(world, pods))]
            mutator = Mutator((world.catalog,), StaticInventory(index), policy, siblings=tracker)
            row = asyncio.run(_measure(mutator, docs))
            rows.append({"names": names, "mode": mode, "nodes": nodes,
                         "max_patch_bytes": policy.max_patch_bytes, **row})
    worst = max(rows, key=lambda r: r["added_max"])
    met = worst["added_max"] <= TARGET_BYTES
    targets = [{
        "target": f"patch adds <= 4 KB ({TARGET_BYTES:,} B) to a pod at defaults, {nodes:,} nodes",
        "measured": f"max {worst['added_max']:,} B ({worst['names']}, {worst['mode']}); "
                    f"p99 {max(r['added_p99'] for r in rows):,} B",
        "met": met,
        "why": "" if met else "the byte budget did not hold: a bug (it is exact by construction)",
    }]
    print(f"\n[patch_size] bytes a patch adds to the stored pod, defaults, {nodes:,} nodes x "
          f"{workload.IMAGES_PER_NODE} images, {pods} pods (2 containers, ReplicaSet-owned)")
    print(report.table(
        ["names", "mode", "pod B", "p50 B", "p90 B", "p99 B", "max B", "hosts", "cut", "ok"],
        [[r["names"], r["mode"], r["pod_bytes_p50"], r["added_p50"], r["added_p90"],
          r["added_p99"], r["added_max"], round(r["mean_hostnames"], 1), round(r["mean_cut"], 1),
          "yes" if r["added_max"] <= TARGET_BYTES else "NO"] for r in rows]))
    return {"rows": rows, "quick": quick, "targets": targets, "met": met}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.inprocess.patch_size",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer pods")
    args = parser.parse_args(argv)
    result = run(quick=args.quick)
    print(f"-> {report.write('patch_size', result)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
