"""Decisions after faults, on the real control plane: a probe set of pods reviewed again and
again, during and after each fault, by the webhook the API server calls (the subject) and by
another replica (the reference), and compared with what a replica started fresh after the
fault answers (the truth: what a complete, current picture gives).

Per fault it reports: how long the fault lasted; for the subject and the reference, the
seconds after the fault's end until every probe's answer equals the truth (and stays so), how
many answers carried a patch unlike the truth (a decision from a wrong picture: the number
that must stay 0 for faults that do not change the cluster) and how many were unpatched or
unanswered (failing open: the API server admits the pod unpatched); and the pods created
through the API server meanwhile: created, failed while the API server itself was down, failed
for the control plane's own trouble, failed calling the webhook (must be 0), denied (must be 0).

Probes carry no owner, so no spread guard state enters: an answer depends on the inventory
alone. Answers are compared on what the patch says: the allowed flag, the preferred terms and
the decision annotation without its per-review fields (`id`, `by`).

    python -m bench.faults [--faults subject-restart,apiserver-restart,...]

The faults (FAULTS): the subject killed (SIGKILL) and started again; both replicas killed and
started again at once; kube-apiserver restarted; etcd restarted; the API server slow (the
subject reads it through bench/delayproxy.py, which adds SLOW_SECONDS to every round trip for
SLOW_FOR seconds: its watches and relists late, its reviews not); a node holding the probes'
base deleted and created again with the same name and no images.
"""

from __future__ import annotations

import argparse
import http.client
import json
import os
import signal
import ssl
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import orjson

from bench.delayproxy import DelayProxy
from bench.fault_agent import StandInAgent
from bench.fault_answers import Answer, ReplicaOutcome, canonical, outcome, patched
from bench.workload import review_doc
from webhook.config import AGENT_NAMESPACE
from webhook.devcluster.cluster import LocalCluster
from webhook.devcluster.controlplane import write_kubeconfig
from webhook.devcluster.processes import ClusterError, free_port, stop
from webhook.report.promread import TLS, scrape

PROBE_INTERVAL = 0.25  # seconds between two rounds of probes
SLOW_SECONDS = 0.2  # what the slow API server adds to a round trip (half each way)
SLOW_FOR = 20.0  # how long it stays slow


def probe_review(image: str, index: int) -> bytes:
    """The AdmissionReview of a bare pod running `image` (no owner: no spread guard)."""
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": f"probe-{index}", "namespace": "faults"},
           "spec": {"containers": [{"name": "app", "image": image,
                                    "resources": {"requests": {"cpu": "10m",
                                                               "memory": "16Mi"}}}]}}
    return orjson.dumps(review_doc(pod, f"00000000-0000-4000-8000-{index:012d}"))


class Reviewer:
    """One replica's /mutate over a kept-alive TLS connection (opened again after an error)."""

    def __init__(self, port: int, context: ssl.SSLContext) -> None:
        self.port, self.context = port, context
        self.connection: http.client.HTTPSConnection | None = None

    def answer(self, body: bytes) -> Answer:
        for _ in range(2):
            try:
                if self.connection is None:
                    self.connection = http.client.HTTPSConnection(
                        "127.0.0.1", self.port, context=self.context, timeout=5)
                self.connection.request("POST", "/mutate", body,
                                        {"Content-Type": "application/json"})
                response = self.connection.getresponse()
                data = response.read()
                if response.status == 200:
                    return canonical(data)
                return None
            except (OSError, http.client.HTTPException):
                self.close()
        return None

    def close(self) -> None:
        if self.connection is not None:
            self.connection.close()
            self.connection = None


@dataclass
class Timeline:
    """Every probe round's answers, per replica, with the time (monotonic) it ended."""

    rounds: dict[str, list[tuple[float, tuple[Answer, ...]]]] = field(default_factory=dict)


@dataclass(frozen=True)
class FaultResult:
    fault: str
    seconds: float  # the fault's own length
    subject: ReplicaOutcome
    reference: ReplicaOutcome
    pods_created: int
    # Failed for the control plane's own trouble (the API server down, etcd unreachable):
    # not the webhook's to prevent.
    pods_failed_control_plane: int
    pods_failed_webhook: int  # failed calling the webhook: must be 0 (failurePolicy Ignore)
    pods_denied: int  # denied by the webhook: must be 0
    truth_patched: int  # probes the truth answers with a patch (0: the run proves little)
    changed: bool  # the truth differs from the subject's answers just before the fault


class Harness:
    """The subject is the cluster's webhook (the one the API server calls); the reference a
    second replica on its own port; the truth a third started after each fault."""

    def __init__(self, cluster: LocalCluster, images: Sequence[str],
                 namespace: str, settle_seconds: float = 30.0) -> None:
        self.cluster = cluster
        self.tls = TLS(str(cluster.webhook_certs.ca_cert))
        self.context = self.tls.context()
        self.reviews = [probe_review(image, i) for i, image in enumerate(images)]
        self.namespace = namespace
        self.settle = settle_seconds
        self.reference_port = free_port()
        # Replicas start from threads at once (both-restart); the state file has one writer.
        lock, save = threading.Lock(), cluster.plane.save

        def locked_save() -> None:
            with lock:
                save()

        cluster.plane.save = locked_save  # type: ignore[method-assign]
        # The subject reads the API server through a proxy that passes bytes untouched until
        # a fault slows it (apiserver-slow); the reference reads it directly.
        server = urlsplit(cluster.plane.server)
        self.proxy = DelayProxy((server.hostname or "127.0.0.1", server.port or 443))
        config = json.loads(cluster.webhook_kubeconfig.read_text())
        self.subject_kubeconfig = cluster.webhook_kubeconfig.with_name("kubeconfig-proxied")
        write_kubeconfig(self.subject_kubeconfig, f"https://127.0.0.1:{self.proxy.port}",
                         Path(config["clusters"][0]["cluster"]["certificate-authority"]),
                         config["users"][0]["user"], "layer-locality-webhook")
        self.start_subject()
        cluster.start_webhook_replica(1, self.reference_port)

    def start_subject(self) -> None:
        """(Re)start the cluster's webhook, reading the API server through the proxy (the
        last --kubeconfig given wins)."""
        self.cluster.start_webhook(["--kubeconfig", str(self.subject_kubeconfig)])

    def answers(self, reviewer: Reviewer) -> tuple[Answer, ...]:
        return tuple(reviewer.answer(body) for body in self.reviews)

    def wait_until_named(self, node: str, timeout: float = 30.0) -> None:
        """Until the subject's and the reference's answers both name `node` (a change they
        must have seen before a fault starts)."""
        needle = f'"node":"{node}"'
        for port in (self.cluster.webhook_port, self.reference_port):
            reviewer = Reviewer(port, self.context)
            try:
                deadline = time.monotonic() + timeout
                while not any(needle in (answer or "") for answer in self.answers(reviewer)):
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"the replica on port {port} never named {node}")
                    time.sleep(0.2)
            finally:
                reviewer.close()

    def relists(self, port: int) -> int:
        """The replica's relists so far (layer_locality_relists_total, every resource)."""
        samples = scrape(f"https://127.0.0.1:{port}/metrics", self.tls)
        return int(sum(value for name, _, value in samples
                       if name == "layer_locality_relists_total"))

    def truth(self) -> tuple[Answer, ...]:
        """The answers of a replica started now (ready: synced), then stopped."""
        port = free_port()
        process = self.cluster.start_webhook_replica(2, port)
        try:
            reviewer = Reviewer(port, self.context)
            try:
                return self.answers(reviewer)
            finally:
                reviewer.close()
        finally:
            stop(process)

    def run(self, name: str, fault: Callable[[], None]) -> FaultResult:
        timeline = Timeline({"subject": [], "reference": []})
        pods = {"created": 0, "control_plane": 0, "webhook": 0, "denied": 0}
        done = threading.Event()

        def probe() -> None:
            reviewers = {"subject": Reviewer(self.cluster.webhook_port, self.context),
                         "reference": Reviewer(self.reference_port, self.context)}
            try:
                while not done.is_set():
                    for who, reviewer in reviewers.items():
                        got = self.answers(reviewer)
                        timeline.rounds[who].append((time.monotonic(), got))
                    done.wait(PROBE_INTERVAL)
            finally:
                for reviewer in reviewers.values():
                    reviewer.close()

        def create() -> None:
            while not done.is_set():
                pods[self.create_pod()] += 1
                done.wait(0.5)

        relisted = {"subject": self.relists(self.cluster.webhook_port),
                    "reference": self.relists(self.reference_port)}
        threads = [threading.Thread(target=probe), threading.Thread(target=create)]
        for thread in threads:
            thread.start()
        try:
            time.sleep(1.0)
            start = time.monotonic()
            fault()
            end = time.monotonic()
            time.sleep(self.settle)
        finally:
            done.set()
            for thread in threads:
                thread.join()
        for who, port in (("subject", self.cluster.webhook_port),
                          ("reference", self.reference_port)):
            now = self.relists(port)
            # A restarted replica counts from 0: all of its relists are the fault's.
            relisted[who] = now - relisted[who] if now >= relisted[who] else now
        truth = self.truth()
        subject = timeline.rounds["subject"]
        before = [answers for at, answers in subject if at < start]
        return FaultResult(name, end - start,
                           outcome(subject, truth, start, end, relisted["subject"]),
                           outcome(timeline.rounds["reference"], truth, start, end,
                                   relisted["reference"]),
                           pods["created"], pods["control_plane"], pods["webhook"],
                           pods["denied"],
                           sum(map(patched, truth)), bool(before) and before[-1] != truth)

    def create_pod(self) -> str:
        """One pod through the API server (never bound): what happened to it."""
        manifest = {"apiVersion": "v1", "kind": "Pod",
                    "metadata": {"name": f"f-{uuid.uuid4().hex[:10]}"},
                    "spec": {"schedulerName": "layer-locality-faults-no-scheduler",
                             "containers": [{"name": "app", "image": "docker.io/library/"
                                             "python:3.11"}]}}
        try:
            self.cluster.kubectl_run(["-n", self.namespace, "create", "-f", "-",
                                      "--request-timeout=10s"], stdin=json.dumps(manifest))
            return "created"
        except ClusterError as exc:  # kubectl's message says which
            text = str(exc)
            if "denied the request" in text:
                return "denied"
            return "webhook" if "webhook" in text else "control_plane"

    def close(self) -> None:
        process = self.cluster.plane.processes.get("webhook-1")
        if process is not None:
            stop(process)
        self.cluster.stop_webhook()  # it reads through the proxy, which goes now
        self.proxy.close()


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
    """The node's agent stopped: renewals end; the fault lasts until its Lease has run out
    (the node's NodeLayers and labels then stop counting: the truth changes)."""

    def fault(harness: Harness) -> None:
        agent.pause()
        time.sleep(agent.lease_seconds + 0.5)

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


if __name__ == "__main__":
    main()
