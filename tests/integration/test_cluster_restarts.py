"""Restarts under the running webhook: etcd, then kube-apiserver, stop and start again on the
same ports and data. The webhook's watches relist and resume (a node created after the restart
reaches its decisions), decisions stay correct, and nothing is logged in a loop."""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest

from tests.integration.cluster_fixture import (
    DECISION,
    catalog_entries,
    new_namespace,
    pod_manifest,
    top_node,
    wait_for,
)
from webhook.devcluster.cluster import LocalCluster

pytestmark = pytest.mark.controlplane
# In no other node's status: only the node added after the restarts holds it.
IMAGE = "docker.io/library/mariadb:10.10"
LATE_NODE = "late-mariadb"
# A message repeated more often than this after the restarts counts as a loop.
MAX_REPEATS = 5
_STAMP = re.compile(r"^\S+ \S+ ")  # the asctime of the webhook's log format
_NUMBERS = re.compile(r"\d+(\.\d+)?")


def test_watches_resume_after_etcd_and_apiserver_restarts(local_cluster: LocalCluster) -> None:
    from kubernetes import client

    from webhook.devcluster.nodes import create_nodes

    namespace = new_namespace(local_cluster, opted_in=True)
    log = local_cluster.plane.log("webhook")
    offset = log.stat().st_size

    local_cluster.plane.restart("etcd")
    local_cluster.plane.restart("kube-apiserver")

    entry = catalog_entries()[IMAGE]
    size = sum(x["size"] for x in entry["platforms"]["linux/amd64"]["layers"])
    late = {"metadata": {"name": LATE_NODE, "labels": {
        "kubernetes.io/hostname": LATE_NODE, "topology.kubernetes.io/zone": "zone-c"}},
        "status": {"images": [{"names": [f"docker.io/library/mariadb@{entry['digest']}", IMAGE],
                               "sizeBytes": size}]}}
    with local_cluster.api_client() as api:
        core: Any = client.CoreV1Api(api)
        create_nodes(core, [late])
        try:
            wait_for(lambda: top_node(local_cluster, namespace, IMAGE) == LATE_NODE, 60,
                     f"the webhook to see {LATE_NODE}, created after the restarts")
            # An opted-in pod is still patched as before the restarts.
            pod = api.sanitize_for_serialization(core.create_namespaced_pod(
                namespace, pod_manifest("after-restart")))
            assert DECISION in pod["metadata"]["annotations"]
        finally:
            core.delete_node(LATE_NODE)

    with open(log, errors="replace") as handle:
        handle.seek(offset)
        # Numbers (retry delays, counts, ports) differ between the lines of one loop.
        lines = [_NUMBERS.sub("N", _STAMP.sub("", line)).strip()
                 for line in handle if line.strip()]
    repeats = Counter(lines).most_common(1)
    assert not repeats or repeats[0][1] <= MAX_REPEATS, repeats
