"""The holdout: which workloads the webhook leaves alone, so that `report` can measure what
steering changed on this cluster (a randomised control group). Pure.

A workload is in the holdout when a stable hash of its key, salted by the configured seed,
falls below the fraction. The key is the workload as a user sees it, so every pod of it gets
the same group, in every webhook replica and after every restart, and a rollout (a new
ReplicaSet with a new uid and name suffix) keeps the Deployment in its group:
- a pod of a Deployment's ReplicaSet: namespace + the ReplicaSet's name less its
  `pod-template-hash` suffix (the Deployment's name); the webhook cannot read ReplicaSets,
  and needs not: the label on the pod is the suffix the Deployment controller appended;
- a pod of another controller: namespace + its kind + its name;
- a pod without a controller: namespace + its name, or its generateName.

The decision annotation carries the group and another hash of the key (`workload_hash`); the
telemetry puts each pod in one of COHORTS buckets by it, and the report's bootstrap resamples
those cohorts, because pods of one workload are not independent.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from webhook.core.objects import items, mapping, text

HOLDOUT_LABEL = "layer-locality.io/holdout"  # on a namespace: `exempt` keeps it steered
EXEMPT = "exempt"
TEMPLATE_HASH_LABEL = "pod-template-hash"
COHORTS = 64
_SPAN = float(1 << 64)


class Group(StrEnum):
    """A pod's group (metric label values: a contract for dashboards)."""

    STEERED = "steered"  # in the experiment, steered
    HOLDOUT = "holdout"  # in the experiment, left alone
    NONE = "none"  # not in the experiment: the holdout is off, or the namespace is exempt


@dataclass(frozen=True, slots=True)
class HoldoutPolicy:
    fraction: float = 0.0  # of workloads held out; 0: off
    seed: str = ""  # salts the split: a new seed draws new groups

    def __post_init__(self) -> None:
        if not 0.0 <= self.fraction < 1.0:
            raise ValueError("holdout must be >= 0 and < 1")

    @property
    def on(self) -> bool:
        return self.fraction > 0.0

    def group(self, key: str, exempt: bool = False) -> Group:
        """The group of the workload `key` (from `workload_key`); `exempt`: its namespace
        opted out of the holdout."""
        if exempt or not self.on:
            return Group.NONE
        return Group.HOLDOUT if _unit(self.seed, key) < self.fraction else Group.STEERED


NO_HOLDOUT = HoldoutPolicy()


def workload_key(pod: Mapping[str, Any]) -> str:
    """The workload the pod belongs to, as a user sees it (see the module's docstring)."""
    metadata = mapping(pod.get("metadata"))
    namespace = text(metadata.get("namespace"))
    for owner in items(metadata.get("ownerReferences")):
        ref = mapping(owner)
        if ref.get("controller") is not True:
            continue
        kind, name = text(ref.get("kind")), text(ref.get("name"))
        suffix = text(mapping(metadata.get("labels")).get(TEMPLATE_HASH_LABEL))
        if kind == "ReplicaSet" and suffix and name.endswith("-" + suffix):
            return f"{namespace}/Deployment/{name[:-len(suffix) - 1]}"
        return f"{namespace}/{kind}/{name}"
    name = text(metadata.get("name")) or text(metadata.get("generateName"))
    return f"{namespace}/Pod/{name}"


def workload_hash(key: str) -> str:
    """The workload's id in the decision annotation: 16 hex digits of a hash unrelated to
    the group's (the key itself may be long, and names nothing the report needs)."""
    return hashlib.blake2b(key.encode(), digest_size=8, person=b"ll-workload").hexdigest()


def cohort(workload: str) -> int | None:
    """The cohort, 0..COHORTS-1, of a `workload_hash`; None when it is not one."""
    try:
        return int(workload, 16) % COHORTS if len(workload) == 16 else None
    except ValueError:
        return None


def _unit(seed: str, key: str) -> float:
    """A uniform draw in [0, 1) fixed by (seed, key): the same in every process."""
    salt = hashlib.blake2b(seed.encode(), digest_size=32).digest()  # any length of seed
    digest = hashlib.blake2b(key.encode(), digest_size=8, key=salt,
                             person=b"ll-holdout").digest()
    return int.from_bytes(digest, "big") / _SPAN
