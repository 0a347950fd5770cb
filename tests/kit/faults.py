"""The faults the fault harness (fault_harness.py) injects on the real control plane, one
function each: the subject (the webhook the API server calls) killed and started again, both
replicas at once, kube-apiserver or etcd restarted, etcd compacted, the API server slowed
(through delayproxy.py), a node deleted and created again without its images, a node agent
restarted or stopped (fault_agent.py's stand-in). tests/integration/test_cluster_faults.py
asserts on them; the benchmark (bench/served/faults.py, `python -m bench.served.faults`)
reports how long each took to settle."""

from __future__ import annotations

import base64
import json
import os
import signal
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.kit.fault_agent import StandInAgent
from tests.kit.fault_harness import Harness
from webhook.config import AGENT_NAMESPACE
from webhook.devcluster.cluster import LocalCluster
from webhook.devcluster.processes import stop

SLOW_SECONDS = 0.2  # what the slow API server adds to a round trip (half each way)
SLOW_FOR = 20.0  # how long it stays slow


# ---- the faults -------------------------------------------------------------------------

def kill(cluster: LocalCluster, name: str) -> None:
    process = cluster.plane.processes[name]
    if process.alive():
        os.kill(process.pid, signal.SIGKILL)
    stop(process)


def subject_restart(harness: Harness) -> None:
    kill(harness.cluster, "webhook")
    harness.start_subject()


def both_restart(harness: Harness) -> None:
    cluster = harness.cluster
    kill(cluster, "webhook")
    kill(cluster, "webhook-1")
    threads = [threading.Thread(target=harness.start_subject),
               threading.Thread(target=cluster.start_webhook_replica,
                                args=(1, harness.reference_port))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def apiserver_restart(harness: Harness) -> None:
    harness.cluster.plane.restart("kube-apiserver")


def etcd_restart(harness: Harness) -> None:
    harness.cluster.plane.restart("etcd")


def etcd_compacted(harness: Harness) -> None:
    """etcd compacted to its current revision (physical), through its v3 HTTP gateway on
    loopback: every older revision is gone, as after the API server's own periodic
    compaction under heavy churn."""
    base = f"http://127.0.0.1:{harness.cluster.plane.ports['etcd']}/v3/kv"

    def post(path: str, body: dict[str, Any]) -> dict[str, Any]:
        request = urllib.request.Request(f"{base}/{path}", json.dumps(body).encode(),
                                         {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as answer:
            found: dict[str, Any] = json.loads(answer.read())
            return found

    revision = int(post("range", {"key": base64.b64encode(b"/").decode()})["header"]["revision"])
    post("compaction", {"revision": revision, "physical": True})


def apiserver_slow(harness: Harness) -> None:
    harness.proxy.delay = SLOW_SECONDS / 2
    try:
        time.sleep(SLOW_FOR)
    finally:
        harness.proxy.delay = 0.0


AGENT_LEASE_SECONDS = 10  # the stand-in agent's Lease (the shipped default is 180 s)
AGENT_RESTART_SECONDS = 3.0  # a restart: no renewal for this long, well within the Lease


def agent_holding_app(harness: Harness, node: str) -> StandInAgent:
    """A stand-in agent on `node` publishing the app image the probes run (python:3.11's
    layers and the app's own: more of the app's bytes than any node holds by its status), its
    Lease AGENT_LEASE_SECONDS long; returned once both replicas name the node."""
    from webhook.registry.catalog import StaticCatalog

    catalog = StaticCatalog.load(Path(harness.cluster.plane.extra["catalog"]))
    app = next(image for image in catalog.images() if "/team/app:" in image.ref)
    agent = StandInAgent(harness.cluster, node, [app], AGENT_NAMESPACE, AGENT_LEASE_SECONDS)
    try:
        harness.wait_until_named(node)
    except BaseException:
        agent.close()
        raise
    return agent


def agent_restarted(agent: StandInAgent) -> Callable[[Harness], None]:
    """The node's agent restarted: no renewal for AGENT_RESTART_SECONDS, then renewed again
    (its NodeLayers unchanged, as the real agent leaves it when the layers are)."""

    def fault(harness: Harness) -> None:
        agent.pause()
        time.sleep(AGENT_RESTART_SECONDS)
        agent.resume()

    return fault


def agent_stopped(agent: StandInAgent) -> Callable[[Harness], None]:
    """The node's agent stopped: renewals end; the fault lasts until its Lease runs out (the
    node's NodeLayers and labels then stop counting: the truth changes), so "converged after"
    is how long a replica takes to notice."""

    def fault(harness: Harness) -> None:
        agent.pause()
        time.sleep(max(0.0, agent.renewed + agent.lease_seconds - time.time()))

    return fault


def node_recreated(node: str) -> Callable[[Harness], None]:
    """`node` deleted, then created again with the same name, labels and no images."""

    def fault(harness: Harness) -> None:
        from kubernetes import client

        from webhook.devcluster.nodes import create_nodes

        with harness.cluster.api_client() as api:
            core: Any = client.CoreV1Api(api)
            labels = core.read_node(node).metadata.labels
            core.delete_node(node)
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and any(
                    n.metadata.name == node for n in core.list_node().items):
                time.sleep(0.2)
            create_nodes(core, [{"metadata": {"name": node, "labels": labels},
                                 "status": {"images": []}}])

    return fault


FAULTS: dict[str, Callable[[Harness], None]] = {
    "subject-restart": subject_restart,
    "both-restart": both_restart,
    "apiserver-restart": apiserver_restart,
    "etcd-restart": etcd_restart,
    "etcd-compacted": etcd_compacted,
    "apiserver-slow": apiserver_slow,
}
