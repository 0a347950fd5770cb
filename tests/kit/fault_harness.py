"""The fault harness (bench/served/faults.py runs it; tests/integration/test_cluster_faults.py
too): a probe set of pods reviewed again and again, during and after a fault, by the webhook the API
server calls (the subject, which reads the API server through tests/kit/delayproxy.py) and by
another replica (the reference), compared with what a replica started fresh after the fault
answers (the truth); and a pod created through the API server every 0.5 s meanwhile.

Probes carry no owner, so no spread guard state enters: an answer depends on the inventory
alone. Answers are compared on what the patch says (tests/kit/fault_answers.py).
"""

from __future__ import annotations

import http.client
import json
import ssl
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import orjson

from tests.kit.delayproxy import DelayProxy
from tests.kit.fault_answers import Answer, ReplicaOutcome, canonical, outcome, patched
from tests.kit.workload import review_doc
from webhook.devcluster.cluster import LocalCluster
from webhook.devcluster.controlplane import write_kubeconfig
from webhook.devcluster.processes import ClusterError, free_port, stop
from webhook.report.promread import TLS, scrape
from webhook.report.series import total

PROBE_INTERVAL = 0.25  # seconds between two rounds of probes


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
        return int(total(scrape(f"https://127.0.0.1:{port}/metrics", self.tls),
                         "layer_locality_relists_total"))

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
