"""Load windows of bench.controlplane (pure): what the API server did and what every process
spent over a window, from two /metrics scrapes and two CPU readings, and one window against
another (the idle one: what the product's writes added)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from bench.controlplane.apiclient import SampleKey, by_label, hist
from webhook.evaluation.machine import cpu_times

REQUESTS = "apiserver_request_total"


def cpu_delta(before: Mapping[str, float], after: Mapping[str, float]) -> dict[str, float]:
    """CPU spent between two readings by process name; a process started in between counts
    from zero."""
    out: dict[str, float] = {}
    for key, value in after.items():
        if key != "machine":
            name = key.split("@", 1)[0]
            out[name] = out.get(name, 0.0) + value - before.get(key, 0.0)
    return out


def machine_busy() -> float:
    """Seconds of CPU the whole machine spent busy so far (/proc/stat), all cores."""
    return cpu_times()[0] / os.sysconf("SC_CLK_TCK")


def requests_by_resource_verb(d: Mapping[SampleKey, float]) -> dict[str, float]:
    """Requests by `resource verb` (the API server's own verb names) over a window."""
    out: dict[str, float] = {}
    for (name, labels), value in d.items():
        if name == REQUESTS and value:
            found = dict(labels)
            key = f"{found.get('resource', '')} {found.get('verb', '')}".strip()
            out[key] = out.get(key, 0.0) + value
    return out


def load_window(d: Mapping[SampleKey, float], seconds: float, cpu0: Mapping[str, float],
                cpu1: Mapping[str, float]) -> dict[str, Any]:
    """One window: `d` the API server's metrics delta, `cpu0`/`cpu1` the readings."""
    flows = by_label(d, "apiserver_flowcontrol_dispatched_requests_total", "flow_schema")
    lists = by_label(d, "apiserver_response_sizes_sum", "resource", verb="LIST")
    list_count = by_label(d, "apiserver_response_sizes_count", "resource", verb="LIST")
    watch = by_label(d, "apiserver_watch_events_sizes_sum", "resource")
    watch_events = by_label(d, "apiserver_watch_events_sizes_count", "resource")
    writes = by_label(d, REQUESTS, "resource", verb="UPDATE")
    cpu = cpu_delta(cpu0, cpu1)
    latency = {f"{resource} {verb}": hist(d, "apiserver_request_duration_seconds",
                                          resource=resource, verb=verb).as_dict()
               for resource, verb in (("leases", "PUT"), ("nodes", "PATCH"),
                                      ("nodelayers", "PUT"))}
    return {
        "seconds": seconds,
        "requests_per_second_by_flow_schema": {k: v / seconds for k, v in flows.items() if v},
        "requests_per_second_by_resource_verb": {
            k: v / seconds for k, v in requests_by_resource_verb(d).items()},
        "request_ms": {k: v for k, v in latency.items() if v["count"]},
        "list_bytes_by_resource": {k: v for k, v in lists.items() if v},
        "lists_by_resource": {k: v for k, v in list_count.items() if v},
        "watch_bytes_per_second_by_resource": {k: v / seconds for k, v in watch.items() if v},
        "watch_events_per_second_by_resource": {
            k: v / seconds for k, v in watch_events.items() if v},
        "updates_by_resource": {k: v for k, v in writes.items() if v},
        "cpu_seconds": cpu,
        "cores": {k: v / seconds for k, v in cpu.items()},
    }


def over(window: Mapping[str, Any], baseline: Mapping[str, Any]) -> dict[str, float]:
    """Cores each process spent in `window` beyond what it spent in `baseline` (windows of
    any length: per second of each)."""
    base = baseline.get("cores", {})
    return {k: v - base.get(k, 0.0) for k, v in window.get("cores", {}).items()}


def rate(window: Mapping[str, Any], key: str) -> float:
    """Requests per second of one `resource verb` in `window` (0 when none)."""
    return float(window.get("requests_per_second_by_resource_verb", {}).get(key, 0.0))
