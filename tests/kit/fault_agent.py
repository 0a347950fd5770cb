"""A node agent's API traffic without the agent, for faults.py's agent faults on fake
nodes (no containerd to read): the NodeLayers object the real agent would publish for a node
holding `images` (webhook.agent.nodelayers.build_spec, the agent's own code) and its Lease,
created and renewed on a thread as webhook/agent/lease.py renews it. A stand-in because the
fault is in what the webhook reads (a Lease renewed, paused or run out), which this writes as
the agent does; the agent itself is exercised on real nodes (tests/integration/
test_realnodes_*). `pause` stops the renewals, `resume` starts them again; `close` removes
both objects.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from webhook.agent.nodelayers import NodeRef, RuntimeImage, build_object, build_spec
from webhook.core.layers import ImageLayers, Platform
from webhook.devcluster.cluster import LocalCluster
from webhook.inventory.agentlease import lease_body, renew_seconds

GROUP, VERSION, PLURAL = "layer-locality.io", "v1alpha1", "nodelayers"


class StandInAgent:
    def __init__(self, cluster: LocalCluster, node: str, images: Sequence[ImageLayers],
                 namespace: str, lease_seconds: int) -> None:
        from kubernetes import client

        self.node, self.namespace, self.lease_seconds = node, namespace, lease_seconds
        self.renewed = 0.0
        self._api = cluster.api_client()
        core: Any = client.CoreV1Api(self._api)
        self._custom: Any = client.CustomObjectsApi(self._api)
        self._leases: Any = client.CoordinationV1Api(self._api)
        platform = Platform("linux", "amd64")
        held = [RuntimeImage(image.ref, image.digest, image.platforms[platform].digest,
                             image.platforms[platform].layers) for image in images]
        uid: str = core.read_node(node).metadata.uid
        _ensure_namespace(core, namespace)
        spec = build_spec(node, "containerd", platform, 300, _now_text(), held)
        self._custom.create_cluster_custom_object(GROUP, VERSION, PLURAL,
                                                  build_object(NodeRef(node, uid), spec))
        self._renewing = threading.Event()
        self._closed = threading.Event()
        self._renew()  # the Lease exists before the first probe
        self._renewing.set()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def _renew(self) -> None:
        from kubernetes.client.exceptions import ApiException

        now = datetime.now(UTC)
        self.renewed = now.timestamp()  # the Lease runs out lease_seconds after this
        try:  # the agent writes with the version its last write returned; a read is as good
            current = self._leases.read_namespaced_lease(self.node, self.namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            self._leases.create_namespaced_lease(
                self.namespace, lease_body(self.node, self.namespace, self.lease_seconds, now))
            return
        body = lease_body(self.node, self.namespace, self.lease_seconds, now,
                          acquired=current.spec.acquire_time,
                          resource_version=current.metadata.resource_version)
        self._leases.replace_namespaced_lease(self.node, self.namespace, body)

    def _loop(self) -> None:
        period = renew_seconds(self.lease_seconds)
        while not self._closed.wait(period):
            if self._renewing.is_set():
                self._renew()

    def pause(self) -> None:
        """Stop renewing (the agent stopped, or restarting)."""
        self._renewing.clear()

    def resume(self) -> None:
        """Renew at once and from now on (the agent started again)."""
        self._renew()
        self._renewing.set()

    def close(self) -> None:
        self._closed.set()
        self._thread.join(timeout=10)
        from kubernetes.client.exceptions import ApiException

        deletes: list[tuple[Any, tuple[str, ...]]] = [
            (self._custom.delete_cluster_custom_object, (GROUP, VERSION, PLURAL, self.node)),
            (self._leases.delete_namespaced_lease, (self.node, self.namespace))]
        for delete, args in deletes:
            try:
                delete(*args)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        self._api.close()


def _now_text() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _ensure_namespace(core: Any, namespace: str) -> None:
    """The agents' namespace, as the node-agent component creates it (kept afterwards)."""
    from kubernetes.client.exceptions import ApiException

    try:
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace",
                               "metadata": {"name": namespace}})
    except ApiException as exc:
        if exc.status != 409:
            raise
