"""What bench.controlplane reads of the cluster's processes: the metrics it scrapes from
kube-apiserver, kube-scheduler and each webhook replica, every process's CPU so far, and the
NodeLayers objects a replica holds."""

from __future__ import annotations

import contextlib
import ssl
from typing import Any

from bench import report
from bench.controlplane.apiclient import Api
from bench.controlplane.setup import Bench
from bench.controlplane.standin_renewer import RenewerProcess
from bench.controlplane.window_figures import machine_busy
from webhook.report.promread import parse
from webhook.report.series import total

# What the control-plane benchmark scrapes from kube-apiserver.
APISERVER_METRICS = (
    "apiserver_admission_webhook_admission_duration_seconds",
    "apiserver_request_duration_seconds", "apiserver_watch_events_sizes",
    "apiserver_watch_events_total", "apiserver_request_total", "apiserver_response_sizes",
    "apiserver_flowcontrol_dispatched_requests_total", "apiserver_longrunning_requests",
    "apiserver_admission_webhook_request_total",
    # Where a steered create's time goes (issue 38, item 3): the request less the webhook's
    # HTTP time and the APF wait (sli), the API server's own clock on the webhook's HTTP
    # round trip (rest_client, hack/kube's mains import client-go's metrics), each admission
    # plugin's calls (a changed object runs the mutating chain twice), the APF wait.
    "apiserver_request_sli_duration_seconds", "rest_client_request_duration_seconds",
    "apiserver_admission_controller_admission_duration_seconds",
    "apiserver_flowcontrol_request_wait_duration_seconds")
SCHEDULER_METRICS = ("scheduler_scheduling_algorithm_duration_seconds",
                     "scheduler_plugin_execution_duration_seconds",
                     "scheduler_scheduling_attempt_duration_seconds",
                     "scheduler_schedule_attempts_total")
WEBHOOK_METRICS = ("layer_locality_review_duration_seconds", "layer_locality_reviews_total",
                   "layer_locality_connections_closed_total", "layer_locality_agent_leases")
PROCESSES = ("etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager",
             "webhook-0", "webhook-1", RenewerProcess.NAME)


def pids(bench: Bench) -> dict[str, int]:
    return {name: p.pid for name, p in bench.cluster.plane.processes.items()
            if name in PROCESSES}


def cpu(bench: Bench) -> dict[str, float]:
    """CPU seconds so far by process name (name@pid: a restarted replica is another)."""
    out = {}
    for name, pid in pids(bench).items():
        with contextlib.suppress(OSError):
            out[f"{name}@{pid}"] = report.cpu_seconds(pid)
    out["machine"] = machine_busy()
    return out


def urls(bench: Bench) -> dict[str, str]:
    ports = bench.cluster.plane.ports
    return {"apiserver": bench.cluster.plane.server + "/metrics",
            "scheduler": f"https://127.0.0.1:{ports['scheduler']}/metrics"}


async def scrape(bench: Bench, api: Api, insecure: Api) -> dict[str, Any]:
    found = urls(bench)
    out = {"apiserver": await api.metrics(found["apiserver"], APISERVER_METRICS),
           "scheduler": await insecure.metrics(found["scheduler"], SCHEDULER_METRICS)}
    for i, port in enumerate(bench.replica_ports):
        out[f"webhook-{i}"] = await insecure.metrics(f"https://127.0.0.1:{port}/metrics",
                                                     WEBHOOK_METRICS)
    return out


def nodelayers_held(url: str, context: ssl.SSLContext) -> float:
    """The NodeLayers objects the replica whose /metrics is `url` holds, every state (0 while
    it does not answer)."""
    from webhook.devcluster.processes import fetch

    page = fetch(url, context)
    return total(parse(page.decode()), "layer_locality_nodelayers_objects") if page else 0
