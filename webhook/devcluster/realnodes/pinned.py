"""Images put on real nodes the way a user would: a pod per (node, image), pinned to the node by
`nodeName`, run until Running, then deleted; containerd keeps the layers. `cluster up
--seed-demo` (seed.py) and the evaluation's warm-up (evaluation/realchild.py) both do it."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from webhook.devcluster.processes import ClusterError

POLL_SECONDS = 0.5


def run_pinned(core: Any, namespace: str, pods: Mapping[str, tuple[str, str]], timeout: float,
               what: str, clock: Callable[[], float] = time.monotonic) -> None:
    """Run each pod of `pods` (name -> (image, node)) in `namespace` (made when absent) until
    all are Running, then delete them at once. `core`: a CoreV1Api; `what` names them in
    errors. ClusterError when one fails or `timeout` seconds pass first."""
    from kubernetes.client.exceptions import ApiException

    try:
        core.create_namespace({"metadata": {"name": namespace}})
    except ApiException as exc:
        if exc.status != 409:
            raise
    for name, (image, node) in pods.items():
        core.create_namespaced_pod(namespace, {
            "metadata": {"name": name},
            "spec": {"nodeName": node, "terminationGracePeriodSeconds": 0,
                     "containers": [{"name": "warm", "image": image}]}})
    deadline = clock() + timeout
    while True:
        phases = {p.metadata.name: p.status.phase
                  for p in core.list_namespaced_pod(namespace).items if p.metadata.name in pods}
        failed = sorted(name for name, phase in phases.items() if phase == "Failed")
        if failed:
            raise ClusterError(f"{what}: pods {failed} failed (see the kubelets' logs)")
        if len(phases) == len(pods) and all(phase == "Running" for phase in phases.values()):
            break
        if clock() > deadline:
            raise ClusterError(f"{what} did not all run within {timeout:.0f} s")
        time.sleep(POLL_SECONDS)
    for name in pods:
        core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
