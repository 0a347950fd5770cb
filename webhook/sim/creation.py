"""How pods reach the API server: creation steps (bursts) and the objects admission sees.

Bursts: the ReplicaSet controller creates missing replicas with `slowStartBatch`
(pkg/controller/replicaset/replica_set.go, SlowStartInitialBatchSize = 1): batches of 1, 2, 4,
... (the last one cut to what remains), each batch's CREATEs issued together and the next
batch started once they have returned. Every CREATE of a batch therefore passes mutating
admission before the scheduler can bind any of them, and a whole scale-up spans a few API
round trips (`step_seconds` each), well within the webhook's watch delay. A trace's scale-up is
the run of pods of one Deployment (kind `Deployment`) arriving within `window` seconds of its
first pod; without bursts every pod is created, reviewed and scheduled at its own arrival.

Naming: a controller's pod reaches admission with `metadata.generateName` (`<owner name>-`),
no `name` and no `uid`, and an ownerReference (`controller: true`) carrying the owner's uid; the
API server names it after admission (`<generateName><5 characters>`) and assigns the uid, which
is what the scheduler and the watches see. Bare pods (`kind: Pod`) have a name but no uid.
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from webhook.sim.workload import PodSpec

_NAMESPACE = uuid.UUID("6f1d52a4-0c5e-4c43-9d2a-51ab0d3c1e7a")  # for deterministic sim uids
_SUFFIX_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"  # apimachinery utilrand.String


@dataclass(frozen=True, slots=True)
class CreationConfig:
    bursts: bool = True
    step_seconds: float = 0.05  # one batch of CREATEs: API round trips incl. admission
    window: float = 1.0  # pods of one Deployment arriving this close form one scale-up


@dataclass(frozen=True, slots=True)
class Step:
    """CREATEs issued together at `time` (indices into the trace's pods)."""

    time: float
    pods: tuple[int, ...]


def slow_start_sizes(count: int, initial: int = 1) -> list[int]:
    """Batch sizes of replica_set.go slowStartBatch for `count` creations."""
    sizes: list[int] = []
    size = min(count, initial)
    remaining = count
    while size > 0:
        sizes.append(size)
        remaining -= size
        size = min(2 * size, remaining)
    return sizes


def plan_steps(pods: Sequence[PodSpec], config: CreationConfig) -> list[Step]:
    """The CREATE steps of a trace, in time order."""
    if not config.bursts:
        return [Step(p.arrival, (i,)) for i, p in enumerate(pods)]
    groups: list[list[int]] = []
    open_group: dict[str, list[int]] = {}  # workload -> its current scale-up
    for i, spec in enumerate(pods):
        group = open_group.get(spec.workload) if spec.kind == "Deployment" else None
        if group is not None and spec.arrival - pods[group[0]].arrival <= config.window:
            group.append(i)
            continue
        group = [i]
        groups.append(group)
        if spec.kind == "Deployment":
            open_group[spec.workload] = group
    steps: list[Step] = []
    for group in groups:
        start, at = pods[group[0]].arrival, 0
        for n, size in enumerate(slow_start_sizes(len(group))):
            when = round(start + n * config.step_seconds, 6)  # no float drift in the times
            steps.append(Step(when, tuple(group[at:at + size])))
            at += size
    steps.sort(key=lambda s: s.time)  # stable: equal times keep trace order
    return steps


def owner_uid(spec: PodSpec) -> str | None:
    """The controller's uid (ReplicaSet for a Deployment's pods, the Job), None for bare pods."""
    if spec.kind == "Deployment":
        return _uid(f"replicaset/{spec.workload}")
    if spec.kind == "Job":
        return _uid(f"job/{spec.workload}")
    return None


def spreading_owner(spec: PodSpec) -> str | None:
    """The owner the default topology spreading counts: ReplicaSet-owned pods only (no
    Service/ReplicaSet/StatefulSet selects a Job's pods)."""
    return owner_uid(spec) if spec.kind == "Deployment" else None


def pod_uid(spec: PodSpec) -> str:
    return _uid(f"pod/{spec.name}")


def replicaset_name(workload: str) -> str:
    return f"{workload}-{hashlib.sha256(workload.encode()).hexdigest()[:10]}"


def admission_object(spec: PodSpec) -> dict[str, Any]:
    """The Pod as mutating admission receives it (a CREATE from the controller or a user)."""
    labels = {"app": spec.workload}
    metadata: dict[str, Any] = {"namespace": "default", "labels": labels}
    uid = owner_uid(spec)
    if spec.kind == "Deployment":
        rs = replicaset_name(spec.workload)
        labels["pod-template-hash"] = rs.rsplit("-", 1)[1]
        metadata["generateName"] = f"{rs}-"
        metadata["ownerReferences"] = [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                        "name": rs, "uid": uid, "controller": True,
                                        "blockOwnerDeletion": True}]
    elif spec.kind == "Job":
        labels["job-name"] = spec.workload
        metadata["generateName"] = f"{spec.workload}-"
        metadata["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job",
                                        "name": spec.workload, "uid": uid, "controller": True,
                                        "blockOwnerDeletion": True}]
    else:
        metadata["name"] = spec.name
    requests = {"cpu": f"{spec.cpu_milli}m", "memory": str(spec.memory)}

    def containers(images: Sequence[str], prefix: str) -> list[dict[str, Any]]:
        return [{"name": f"{prefix}{i}", "image": image,
                 "resources": {"requests": dict(requests)}} for i, image in enumerate(images)]

    pod_spec: dict[str, Any] = {"containers": containers(spec.images, "c")}
    if spec.init_images:
        pod_spec["initContainers"] = containers(spec.init_images, "init")
    if spec.tolerations:
        pod_spec["tolerations"] = [dict(t) for t in spec.tolerations]
    if spec.node_selector:
        pod_spec["nodeSelector"] = dict(spec.node_selector)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": pod_spec}


def created_object(admitted: dict[str, Any], spec: PodSpec) -> dict[str, Any]:
    """What the API server stores after admission: named (generateName + suffix) and a uid."""
    metadata = dict(admitted.get("metadata") or {})
    if not metadata.get("name"):
        digest = hashlib.sha256(spec.name.encode()).digest()
        suffix = "".join(_SUFFIX_ALPHABET[b % len(_SUFFIX_ALPHABET)] for b in digest[:5])
        metadata["name"] = f"{metadata.get('generateName', '')}{suffix}"
    metadata["uid"] = pod_uid(spec)
    return {**admitted, "metadata": metadata}


def _uid(label: str) -> str:
    return str(uuid.uuid5(_NAMESPACE, label))
