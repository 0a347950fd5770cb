"""What the tests of the in-cluster install (test_realnodes_install.py) watch it with, from
inside the cluster: the release's names, a server-side dry run's decision, a stream of pod
creations each counted, a script the agent's pod runs with its own token, the agent's Lease, a
TCP probe from a pod, and a command run in the cluster's namespaces. (Moved out of
test_realnodes_install.py: its tests share one installed cluster, so they stay in one module.)"""

from __future__ import annotations

import json
import threading
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from tests.integration.realnodes_fixture import (
    DECISION,
    RealCluster,
    app_image,
    pod_manifest,
)
from webhook.devcluster.install import repo_root
from webhook.devcluster.realnodes import oci

MiB = 1 << 20
RELEASE = NAMESPACE = "layer-locality"
AGENT_NAMESPACE = "layer-locality-agent"
L1 = oci.busybox_layer()
STREAMED = app_image("install/streamed", L1, oci.filler_layer("install-streamed", 24 * MiB))
NEVER_BIND = "layer-locality-test-no-scheduler"
STATUS_TIMEOUT = 90


def dry_run_decision(cluster: RealCluster, namespace: str, image: oci.Image) -> Any:
    out = json.loads(cluster.kubectl(
        "-n", namespace, "create", "--dry-run=server", "-o", "json", "-f", "-",
        stdin=json.dumps(pod_manifest("probe", cluster.ref(image)))))
    annotation = (out["metadata"].get("annotations") or {}).get(DECISION)
    return json.loads(annotation) if annotation else None


@dataclass
class Stream:
    """Pods created one after another (never bound: a scheduler name nobody serves) until
    stopped, each counted: created and patched, created unpatched, or refused."""

    cluster: RealCluster
    namespace: str
    outcomes: Counter[str] = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)
    stopping: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        """On a thread inside the namespace, with a client of its own, until stopped."""
        from kubernetes import client, config

        api = config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.cluster.plane.kubeconfig))
        core: Any = client.CoreV1Api(api)
        body = pod_manifest("s", self.cluster.ref(STREAMED))
        del body["metadata"]["name"]
        body["metadata"]["generateName"] = "s-"
        body["spec"]["schedulerName"] = NEVER_BIND
        while not self.stopping.is_set():
            try:
                pod = core.create_namespaced_pod(self.namespace, body)
            except Exception as exc:
                self.outcomes["failed"] += 1
                self.errors.append(f"{type(exc).__name__}: {exc}"[:300])
                continue
            patched = DECISION in (pod.metadata.annotations or {})
            self.outcomes["patched" if patched else "unpatched"] += 1

    def __enter__(self) -> Stream:
        self.future = self.cluster.runner.submit(self.run)
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopping.set()
        self.future.result(timeout=60)


# Run inside the agent's pod (`kubectl exec`): its own kubelet-issued token, in-cluster config.
AGENT_WRITES = """
import json
from kubernetes import client, config
config.load_incluster_config()
api = client.CustomObjectsApi()
out = {}
for name in ("node-1", "node-2"):
    for _ in range(5):  # the agent itself may update the object meanwhile: 409, try again
        obj = api.get_cluster_custom_object("layer-locality.io", "v1alpha1", "nodelayers", name)
        try:
            api.replace_cluster_custom_object("layer-locality.io", "v1alpha1", "nodelayers",
                                              name, obj)
            out[name] = "200"
            break
        except client.ApiException as exc:
            out[name] = f"{exc.status} {exc.body}"
            if exc.status != 409:
                break
print(json.dumps(out))
"""


def agent_lease(cluster: RealCluster, node: str) -> dict[str, Any]:
    found: dict[str, Any] = cluster.kubectl_json("-n", AGENT_NAMESPACE, "get", "lease", node)
    return found


def reaches(cluster: RealCluster, namespace: str, pod: str, ip: str, port: int) -> bool:
    """From `pod`, a TCP connection to ip:port: sends a line that is not TLS, which the
    webhook answers by closing the connection (nc exits 0); a connection the enforcer drops
    times out (3 s, nc exits 1)."""
    out = cluster.kubectl("-n", namespace, "exec", pod, "--", "sh", "-c",
                          f"echo x | nc -w 3 {ip} {port}; echo rc=$?")
    return out.strip().endswith("rc=0")


def entering(cluster: RealCluster) -> list[str]:
    from webhook.devcluster.realnodes.namespaces import enter

    return enter(cluster.holder, wd=repo_root())
