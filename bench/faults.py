"""Decisions after faults, on the real control plane, with bench/fault_harness.py: per fault,
how long it lasted; for the subject (the webhook the API server calls) and the reference (a
second replica), the seconds after the fault's end until every probe's answer equals the
truth (a replica started fresh afterwards) and stays so, how many answers carried a patch
unlike the truth (a decision from a wrong picture: must stay 0 for faults that do not change
the cluster) and how many were unpatched or unanswered (failing open); and the pods created
through the API server meanwhile: created, failed while the control plane itself was down,
failed calling the webhook (must be 0), denied (must be 0).

    python -m bench.faults [--faults subject-restart,apiserver-restart,...] [--settle-seconds S]

The faults: the subject killed (SIGKILL) and started again; both replicas killed and started
again at once; kube-apiserver restarted (its watch cache rebuilt: every watch ends, resumed or
relisted after 410 Gone); etcd restarted; the API server slow (the subject reads it through
tests/kit/delayproxy.py, which adds SLOW_SECONDS to every round trip for SLOW_FOR seconds); a node
holding the probes' base deleted and created again with the same name and no images; a node
agent restarted (its Lease not renewed for AGENT_RESTART_SECONDS) and stopped (until its Lease
has run out), written by bench/fault_agent.py's stand-in.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import signal
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from bench.fault_agent import StandInAgent
from bench.fault_harness import FaultResult, Harness
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


def table(results: Sequence[FaultResult]) -> str:
    def seconds(value: float | None) -> str:
        return "never" if value is None else f"{value:.1f} s"

    lines = ["| fault | lasted | subject: converged after / unlike truth / unpatched / "
             "unanswered / relists | reference: the same | pods created / failed (control plane) / "
             "failed (webhook) / denied |", "|---|---|---|---|---|"]
    for r in results:
        s, ref = r.subject, r.reference
        lines.append(
            f"| {r.fault} | {r.seconds:.1f} s | {seconds(s.converged_after)} / {s.unlike_truth}"
            f" / {s.unpatched} / {s.unanswered} / {s.relists} | "
            f"{seconds(ref.converged_after)} / {ref.unlike_truth} / {ref.unpatched} / "
            f"{ref.unanswered} / {ref.relists} | {r.pods_created} / "
            f"{r.pods_failed_control_plane} / {r.pods_failed_webhook} / {r.pods_denied} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    from tests.integration.cluster_fixture import (
        APP_IMAGE,
        BASE_IMAGE,
        COLD,
        WARM,
        new_namespace,
        start_cluster,
    )

    parser = argparse.ArgumentParser(prog="python -m bench.faults", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", default=",".join([*FAULTS, "node-recreated",
                                                      "agent-restarted", "agent-stopped"]))
    parser.add_argument("--settle-seconds", type=float, default=30.0)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="ll-bench-faults-"))
    cluster = start_cluster(root, ["--log-level", "info"])
    try:
        namespace = new_namespace(cluster, opted_in=True)
        harness = Harness(cluster, [APP_IMAGE, BASE_IMAGE, "docker.io/library/mariadb:10.10"],
                          namespace, args.settle_seconds)
        faults = {**FAULTS, "node-recreated": node_recreated(WARM[0])}
        results = []

        def record(name: str, inject: Callable[[Harness], None]) -> None:
            result = harness.run(name, lambda: inject(harness))
            print(json.dumps(asdict(result)), flush=True)
            results.append(result)

        try:
            chosen = args.faults.split(",")
            for name in chosen:
                if name in faults:
                    record(name, faults[name])
            if {"agent-restarted", "agent-stopped"} & set(chosen):
                agent = agent_holding_app(harness, COLD[0])
                try:
                    for name, make in (("agent-restarted", agent_restarted),
                                       ("agent-stopped", agent_stopped)):
                        if name in chosen:
                            record(name, make(agent))
                finally:
                    agent.close()
        finally:
            harness.close()
        print(table(results))
    finally:
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)  # etcd's data, certificates, logs


if __name__ == "__main__":
    main()
