"""The node agent's liveness: a `coordination.k8s.io/v1` Lease per node in the agent's
namespace, as kubelets keep node leases. Pure: the object the agent writes and what the
webhook reads back from it.

The agent renews its node's Lease every `renew_seconds(duration)`; the Lease says how long
it holds (`leaseDurationSeconds`). The webhook counts a node's agent alive while
`renewTime + leaseDurationSeconds` has not passed; a renewal stamped ahead of the webhook's
clock counts from when it arrived, so an agent whose clock runs fast cannot keep a dead node
alive. While its agent is alive, a node's NodeLayers object and layer labels are trusted; the
object is then rewritten only when the node's layers change (its `heartbeat` says when).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from webhook.config import AGENT_NAMESPACE as AGENT_NAMESPACE  # the shipped manifests'

LEASE_GROUP = "coordination.k8s.io"
LEASE_VERSION = "v1"
LEASE_API_VERSION = f"{LEASE_GROUP}/{LEASE_VERSION}"
DEFAULT_LEASE_SECONDS = 180
MIN_LEASE_SECONDS = 15
MAX_LEASE_SECONDS = 86_400
RENEWALS_PER_LEASE = 3  # a Lease survives two lost renewals
AGENT_LABELS = {"app.kubernetes.io/name": "layer-locality",
                "app.kubernetes.io/component": "node-agent"}


def renew_seconds(duration: int) -> float:
    """How often an agent renews a Lease of `duration` seconds."""
    return duration / RENEWALS_PER_LEASE


def micro_time(moment: datetime) -> str:
    """A Kubernetes MicroTime: RFC 3339 in UTC with microseconds."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_body(node: str, namespace: str, duration: int, now: datetime,
               node_uid: str | None = None, acquired: datetime | None = None,
               resource_version: str | None = None) -> dict[str, Any]:
    """The Lease an agent writes for `node` (named after it). With `node_uid` it is owned by
    the Node, so the garbage collector removes it with the node."""
    metadata: dict[str, Any] = {"name": node, "namespace": namespace,
                                "labels": dict(AGENT_LABELS)}
    if node_uid:
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node,
                                        "uid": node_uid}]
    if resource_version:
        metadata["resourceVersion"] = resource_version
    return {
        "apiVersion": LEASE_API_VERSION, "kind": "Lease", "metadata": metadata,
        "spec": {"holderIdentity": node, "leaseDurationSeconds": duration,
                 "acquireTime": micro_time(acquired or now), "renewTime": micro_time(now)},
    }


@dataclass(frozen=True, slots=True)
class AgentLease:
    """A node's agent Lease as the webhook keeps it: when it runs out (wall time)."""

    node: str
    expires: float  # seconds since the epoch

    def alive(self, now: float) -> bool:
        return now <= self.expires


def parse_lease(obj: Mapping[str, Any], arrived: float) -> AgentLease | None:
    """The Lease's node and expiry, or None when it is not an agent's (no holder, no renewal,
    no duration). `arrived`: the wall time it was read, which caps a renewal from the future."""
    metadata = obj.get("metadata")
    spec = obj.get("spec")
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        return None
    name = metadata.get("name")
    holder = spec.get("holderIdentity")
    duration = spec.get("leaseDurationSeconds")
    renewed = parse_micro_time(spec.get("renewTime"))
    if (not isinstance(name, str) or not name or holder != name or renewed is None
            or not isinstance(duration, int) or isinstance(duration, bool)
            or not 0 < duration <= MAX_LEASE_SECONDS):
        return None
    return AgentLease(name, min(renewed, arrived) + duration)


def parse_micro_time(value: object) -> float | None:
    """RFC 3339 (MicroTime or Time, with an offset) -> seconds since the epoch; None else."""
    if not isinstance(value, str) or not value:
        return None
    try:
        moment = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    if moment.tzinfo is None:
        return None
    stamp = moment.timestamp()
    return stamp if math.isfinite(stamp) else None
