"""Heartbeats for fake nodes beside real ones. With real nodes the node lifecycle controller
runs (it lifts the not-ready taint off a kubelet's node and taints one whose kubelet stops), so
a fake Node with no kubelet would be tainted unreachable once its grace period passed. This
process renews each fake node's Lease in kube-node-lease, as a kubelet does every 10 s, and so
keeps the fake nodes schedulable for scale tests beside the real ones.

`layer-locality cluster up --kubelets N --nodes FILE` starts it (`cluster heartbeat`), and
`cluster down` stops it with the rest. Each round writes one Lease per fake node: meant for
tens to hundreds of fake nodes, not thousands (use a cluster without real nodes for those)."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Sequence
from typing import Any

LEASE_NAMESPACE = "kube-node-lease"
LEASE_SECONDS = 40
INTERVAL = 5.0  # under the controller's grace (20 s here) with room for a slow round


def lease_body(node: str, now: dt.datetime) -> dict[str, Any]:
    stamp = now.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": node, "namespace": LEASE_NAMESPACE},
            "spec": {"holderIdentity": node, "leaseDurationSeconds": LEASE_SECONDS,
                     "renewTime": stamp}}


def renew(coordination: Any, nodes: Sequence[str], now: dt.datetime) -> None:
    from kubernetes.client.exceptions import ApiException

    for node in nodes:
        body = lease_body(node, now)
        try:
            coordination.patch_namespaced_lease(node, LEASE_NAMESPACE, {"spec": body["spec"]})
        except ApiException as exc:
            if exc.status != 404:
                raise
            coordination.create_namespaced_lease(LEASE_NAMESPACE, body)


def run(kubeconfig: str, nodes: Sequence[str], interval: float = INTERVAL) -> None:
    """Renew forever (until SIGTERM); an API error skips a round, never ends the loop."""
    from kubernetes import client, config

    api = config.new_client_from_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
    coordination = client.CoordinationV1Api(api)
    while True:
        try:
            renew(coordination, nodes, dt.datetime.now(dt.UTC))
        except Exception as exc:  # any failure: the next round tries again
            print(f"heartbeat round failed: {type(exc).__name__}: {exc}", flush=True)
        time.sleep(interval)
