"""One round of bench.controlplane: `--deployments` Deployments x `--replicas` replicas
created at once in a namespace of their own (opted in, or plain for stock and baked), until
every pod is bound; the figures of the round from the real components (pods/s, bind latency,
the admission and pod-create latencies, the scheduler's times, the pod watch's bytes, CPU) and
where the pods landed; then the namespace deleted."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from bench import report
from bench.controlplane import placement, scraping, summary
from bench.controlplane.apiclient import (
    Api,
    ApiError,
    Hist,
    PodTimes,
    by_label,
    delta,
    hist,
    total,
    watch_pods,
)
from bench.controlplane.balancer import NULL_MODES
from bench.controlplane.objects import bake, deployment
from bench.controlplane.setup import Bench, default_service_account
from bench.controlplane.window_figures import cpu_delta

OPT_IN = {"layer-locality.io/enabled": "true"}


async def round_of(bench: Bench, api: Api, insecure: Api, mode: str, index: int
                   ) -> dict[str, Any]:
    """One round of `mode` (index -1: a warm-up round) in a namespace of its own, deleted
    after it: its figures."""
    args = bench.args
    ns = f"{mode}-{index}" if index >= 0 else f"warmup-{mode}"
    labels = OPT_IN if mode not in ("stock", "baked") else {}
    await api.request("POST", "/api/v1/namespaces",
                      {"metadata": {"name": ns, "labels": labels}})
    await default_service_account(api, ns)
    times = PodTimes()
    started = asyncio.Event()
    watcher = asyncio.create_task(watch_pods(api, ns, times, started))
    await started.wait()
    before, cpu0 = await scraping.scrape(bench, api, insecure), scraping.cpu(bench)
    expected = args.deployments * args.replicas
    t0 = time.monotonic()
    bodies = [deployment(bench.world, k, args.replicas) for k in range(args.deployments)]
    if mode == "baked":
        for body in bodies:
            bake(body, *bench.baked.get(body["metadata"]["name"], ([], "")))
    profile = None
    if args.profile_seconds and index == 0 and mode in ("stock", "opted-in", "baked"):
        # kube-apiserver's CPU profile over the round's first seconds (its --profiling is
        # on by default): `go tool pprof -top -diff_base stock.pb.gz opted-in.pb.gz`.
        profile = asyncio.create_task(api.request(
            "GET", f"/debug/pprof/profile?seconds={args.profile_seconds}"))
    await api.create_all(((f"/apis/apps/v1/namespaces/{ns}/deployments", body)
                          for body in bodies), concurrency=16)
    created_s = time.monotonic() - t0
    deadline = t0 + args.round_timeout
    while len(times.bound) < expected and time.monotonic() < deadline:  # noqa: ASYNC110
        await asyncio.sleep(0.2)
    t1 = max(times.bound.values(), default=time.monotonic())
    await asyncio.sleep(1.0)  # the last binds' metrics
    after, cpu1 = await scraping.scrape(bench, api, insecure), scraping.cpu(bench)
    watcher.cancel()
    if profile is not None:
        folder = report.RESULTS / "controlplane-pprof"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"{mode}.pb.gz").write_bytes(await profile)
    bound = len(times.bound)
    d = {k: delta(after[k], before[k]) for k in after}
    cpu = cpu_delta(cpu0, cpu1)
    latencies = sorted(times.bound[n] - times.added[n] for n in times.bound
                       if n in times.added)
    a, s = d["apiserver"], d["scheduler"]
    called = mode not in ("stock", "baked")  # the namespace is opted in
    webhook = hist(a, "apiserver_admission_webhook_admission_duration_seconds",
                   name="*layer-locality*", operation="CREATE") if called \
        else Hist((), 0.0, 0.0)
    pod_create = hist(a, "apiserver_request_duration_seconds", verb="POST",
                      resource="pods", subresource="")
    pod_create_sli = hist(a, "apiserver_request_sli_duration_seconds", verb="POST",
                          resource="pods", subresource="")
    webhook_http = hist(a, "rest_client_request_duration_seconds", verb="POST",
                        host=f"127.0.0.1:{bench.cluster.webhook_port}")
    apf_wait = hist(a, "apiserver_flowcontrol_request_wait_duration_seconds",
                    execute="true", flow_schema="*")
    admission_calls = by_label(
        a, "apiserver_admission_controller_admission_duration_seconds_count", "name",
        operation="CREATE", type="admit")
    algorithm = hist(s, "scheduler_scheduling_algorithm_duration_seconds")
    affinity_score = hist(s, "scheduler_plugin_execution_duration_seconds",
                          plugin="NodeAffinity", extension_point="Score")
    review = Hist((), 0.0, 0.0)
    for i in range(len(bench.replica_ports)):
        if mode in NULL_MODES:
            break
        h = hist(d[f"webhook-{i}"], "layer_locality_review_duration_seconds")
        review = summary.merge(review, h)
    watch_bytes = total(a, "apiserver_watch_events_sizes_sum", resource="pods")
    watch_events = total(a, "apiserver_watch_events_sizes_count", resource="pods")
    out: dict[str, Any] = {
        "mode": mode, "namespace": ns, "pods": expected, "bound": bound,
        "create_seconds": created_s, "seconds": t1 - t0,
        "pods_per_second": bound / (t1 - t0) if bound else 0.0,
        "bind_latency": report.summary_ms(latencies),
        "webhook_admission_ms": webhook.as_dict(),
        "webhook_within_5ms": webhook.share_within(0.005),
        "pod_create_ms": pod_create.as_dict(),
        "pod_create_within_5ms": pod_create.share_within(0.005),
        "pod_create_sli_ms": pod_create_sli.as_dict(),
        "webhook_http_ms": webhook_http.as_dict(),
        "apf_wait_ms": apf_wait.as_dict(),
        "admission_plugin_calls": {k: v for k, v in admission_calls.items() if v},
        "algorithm_ms": algorithm.as_dict(),
        "nodeaffinity_score_ms": affinity_score.as_dict(),
        "review_ms": review.as_dict(),
        "pod_watch_bytes": watch_bytes, "pod_watch_events": watch_events,
        "watch_bytes_this_client": times.bytes,
        "cpu_seconds": cpu, "machine_busy": cpu1["machine"] - cpu0["machine"],
        "scheduler_cpu_ms_per_pod": 1000 * cpu.get("kube-scheduler", 0.0) / max(bound, 1),
        "apiserver_cpu_ms_per_pod": 1000 * cpu.get("kube-apiserver", 0.0) / max(bound, 1),
        "webhook_calls": by_label(a, "apiserver_admission_webhook_request_total", "code",
                                  name="*layer-locality*"),
        # Each replica's view at the round's end: agents alive by their Lease (gauges).
        "agent_leases_alive": [total(after[f"webhook-{i}"], "layer_locality_agent_leases",
                                     state="alive")
                               for i in range(len(bench.replica_ports))],
    }
    # Every mode: a stock round's bytes on the bound node are the baseline.
    out["placement"] = await placement_of(bench, api, ns, mode)
    await delete_namespace(api, ns)
    print(f"round {index} {mode}: {bound}/{expected} bound in {t1 - t0:.1f} s "
          f"({out['pods_per_second']:.1f}/s); webhook p99 "
          f"{summary.ms(webhook.quantile(0.99))}, within 5 ms "
          f"{summary.pct(webhook.share_within(0.005))}; pod create mean/p99 "
          f"{summary.ms(pod_create.sum / pod_create.count if pod_create.count else None)}"
          f"/{summary.ms(pod_create.quantile(0.99))}; algorithm p99 "
          f"{summary.ms(algorithm.quantile(0.99))}; pod watch {watch_bytes / 1e6:.1f} MB"
          f"\n  placement: {summary.placement_line(out['placement'])}", flush=True)
    return out

async def placement_of(bench: Bench, api: Api, ns: str, mode: str) -> dict[str, Any]:
    """Where the round's pods landed; an opted-in round's terms and decision kept per
    Deployment for the baked rounds."""
    listing = await api.request("GET", f"/api/v1/namespaces/{ns}/pods")
    seen: set[str] = set()
    for pod in listing["items"]:
        terms = ((((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {})
                 .get("preferredDuringSchedulingIgnoredDuringExecution") or [])
        app = (pod["metadata"].get("labels") or {}).get("app", "")
        if terms and mode == "opted-in" and app not in seen:
            seen.add(app)  # what the latest opted-in review gave this Deployment's pods
            bench.baked[app] = (terms, (pod["metadata"].get("annotations") or {}).get(
                "layer-locality.io/decision", ""))
    placed = await asyncio.to_thread(placement.judge, listing["items"], bench.views,
                                     bench.world.catalog)
    return placement.summary(placed, len(listing["items"]))

async def delete_namespace(api: Api, ns: str) -> None:
    await api.request("DELETE", f"/api/v1/namespaces/{ns}")
    for _ in range(600):
        # A bound pod's graceful deletion waits for its kubelet, and fake nodes have none:
        # the pods go at once (the terminating namespace admits no new ones).
        try:
            await api.request("DELETE",
                              f"/api/v1/namespaces/{ns}/pods?gracePeriodSeconds=0")
        except ApiError as exc:
            # Deleting 2,000 pods at once under load can outlast the API server's request
            # timeout (504) though the deletions go on: ask again on the next turn.
            if exc.status not in (429, 500, 503, 504):
                raise
        try:
            await api.request("GET", f"/api/v1/namespaces/{ns}")
        except Exception:
            return
        await asyncio.sleep(1.0)
    raise RuntimeError(f"namespace {ns} still there after 600 s")
