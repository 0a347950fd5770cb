"""The control-plane benchmark's own arithmetic and its TCP balancer: the figures in
docs/performance.md's 5,000-node section are computed by these."""

from __future__ import annotations

import asyncio
import math
import signal

from bench import l4proxy
from bench.controlplane import bake, cpu_delta, deployment, summarize
from bench.cp_api import SampleKey, by_label, delta, hist, total
from bench.workload import build_world


def _histogram(name: str, labels: dict[str, str], buckets: dict[float, float], total_sum: float,
               ) -> dict[SampleKey, float]:
    out: dict[SampleKey, float] = {}
    for bound, count in buckets.items():
        key = tuple(sorted({**labels, "le": "+Inf" if math.isinf(bound) else str(bound)}.items()))
        out[(f"{name}_bucket", key)] = count
    plain = tuple(sorted(labels.items()))
    out[(f"{name}_sum", plain)] = total_sum
    out[(f"{name}_count", plain)] = buckets[math.inf]
    return out


def test_a_histogram_delta_gives_the_share_within_a_bound_and_the_mean() -> None:
    name = "apiserver_admission_webhook_admission_duration_seconds"
    ours = {"name": "pods.layer-locality.io", "operation": "CREATE"}
    before = _histogram(name, ours, {0.005: 10, 0.025: 10, math.inf: 10}, 0.02)
    after = _histogram(name, ours, {0.005: 90, 0.025: 105, math.inf: 110}, 0.52)
    # Another webhook's calls in the same family are not ours.
    after |= _histogram(name, {"name": "other.example.com", "operation": "CREATE"},
                        {0.005: 0, 0.025: 0, math.inf: 50}, 99.0)
    h = hist(delta(after, before), name, name="*layer-locality*", operation="CREATE")
    assert h.count == 100
    assert h.share_within(0.005) == 0.8
    assert h.share_within(0.025) == 0.95
    assert math.isclose(h.sum / h.count, 0.005)
    median = h.quantile(0.5)
    assert median is not None and median <= 0.005


def test_counters_sum_and_split_by_a_label() -> None:
    samples: dict[SampleKey, float] = {("apiserver_flowcontrol_dispatched_requests_total",
                (("flow_schema", "ll-agent"), ("priority_level", "workload-low"))): 30.0,
               ("apiserver_flowcontrol_dispatched_requests_total",
                (("flow_schema", "exempt"), ("priority_level", "exempt"))): 5.0,
               ("apiserver_flowcontrol_dispatched_requests_total",
                (("flow_schema", "ll-agent"), ("priority_level", "other"))): 2.0}
    assert by_label(samples, "apiserver_flowcontrol_dispatched_requests_total",
                    "flow_schema") == {"ll-agent": 32.0, "exempt": 5.0}
    assert total(samples, "apiserver_flowcontrol_dispatched_requests_total",
                 priority_level="workload-low") == 30.0


def test_cpu_of_a_restarted_process_counts_from_zero() -> None:
    before = {"kube-apiserver@10": 100.0, "webhook-0@20": 50.0, "machine": 1.0}
    after = {"kube-apiserver@10": 130.0, "webhook-0@21": 4.0, "machine": 9.0}
    assert cpu_delta(before, after) == {"kube-apiserver": 30.0, "webhook-0": 4.0}


def test_a_baked_deployment_carries_the_terms_and_decision_in_its_template() -> None:
    body = deployment(build_world(app_images=20), 3, 10)
    terms = [{"weight": 90, "preference": {"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1", "n2"]}]}}]
    bake(body, terms, '{"v":3}')
    template = body["spec"]["template"]
    assert template["spec"]["affinity"]["nodeAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"] == terms
    assert template["metadata"]["annotations"] == {"layer-locality.io/decision": '{"v":3}'}
    assert [c["name"] for c in template["spec"]["containers"]] == ["app", "sidecar"]


def test_ratios_pair_each_round_with_its_own_stock_round() -> None:
    rounds = [{"mode": "stock", "pods_per_second": 16.0, "pod_watch_bytes": 100.0},
              {"mode": "opted-in", "pods_per_second": 16.0, "pod_watch_bytes": 240.0},
              {"mode": "stock", "pods_per_second": 20.0, "pod_watch_bytes": 100.0},
              {"mode": "opted-in", "pods_per_second": 18.0, "pod_watch_bytes": 250.0}]
    figures = summarize({"rounds": rounds})
    assert figures["throughput_ratio"] == [1.0, 0.9]
    assert figures["pod_watch_bytes_ratio"] == [2.4, 2.5]
    met = {t["target"]: t["met"] for t in figures["targets"]}
    assert met["opted-in pods/s >= 0.95x stock"] is False  # 0.9 in the second round
    assert met["pod watch bytes <= 1.3x stock"] is False


async def test_the_balancer_passes_bytes_both_ways_and_counts_connections() -> None:
    async def echo(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data[::-1])
            await writer.drain()
        writer.close()

    backends = [await asyncio.start_server(echo, "127.0.0.1", 0) for _ in range(2)]
    ports = [s.sockets[0].getsockname()[1] for s in backends]
    probe = await asyncio.start_server(lambda r, w: None, "127.0.0.1", 0)
    port = probe.sockets[0].getsockname()[1]
    probe.close()
    await probe.wait_closed()
    serving = asyncio.create_task(l4proxy.serve(port, ports))
    for _ in range(100):
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            break
        except OSError:
            await asyncio.sleep(0.02)
    payload = bytes(range(256)) * 1000  # larger than one read
    writer.write(payload)
    await writer.drain()
    writer.write_eof()
    got = b""
    while chunk := await reader.read(65536):
        got += chunk
    writer.close()
    assert len(got) == len(payload)
    assert sorted(got) == sorted(payload)  # every byte through, none added
    signal.raise_signal(signal.SIGTERM)  # serve() stops on it and returns its counts
    counts = await asyncio.wait_for(serving, 5)
    assert sum(counts) == 1
    for server in backends:
        server.close()
