"""bench.controlplane's figures side by side and its targets, from the rounds and the load
windows (pure), and the tables it prints."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from bench import report
from bench.controlplane.apiclient import Hist


def merge(a: Hist, b: Hist) -> Hist:
    buckets: dict[float, float] = dict(a.buckets)
    for bound, count in b.buckets:
        buckets[bound] = buckets.get(bound, 0.0) + count
    return Hist(tuple(sorted(buckets.items())), a.sum + b.sum, a.count + b.count)


def ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v * 1000:.1f} ms"


def pct(v: float | None) -> str:
    return "n/a" if v is None else f"{100 * v:.1f} %"


def span(values: Sequence[float], unit: str) -> str:
    if not values:
        return "n/a"
    lo, hi = min(values), max(values)
    return f"{lo:.2f}{unit}" if lo == hi else f"{lo:.2f}-{hi:.2f}{unit}"


def _fmt(d: Mapping[str, Any], key: str) -> str:
    v = d.get(key)
    return "n/a" if v is None else f"{v:.1f}"


def summarize(result: Mapping[str, Any]) -> dict[str, Any]:
    """Side-by-side figures and the targets, from the rounds (and, with the agent running,
    the steady window)."""
    rounds = result.get("rounds", [])
    by_mode: dict[str, list[dict[str, Any]]] = {"stock": [], "opted-in": []}
    for r in rounds:
        by_mode.setdefault(r["mode"], []).append(r)

    def vals(mode: str, *path: str) -> list[float]:
        out = []
        for r in by_mode[mode]:
            v: Any = r
            for p in path:
                v = v.get(p) if isinstance(v, dict) else None
            if isinstance(v, (int, float)):
                out.append(float(v))
        return out

    def ratio(*path: str, mode: str = "opted-in") -> list[float]:
        # Round r's opted-in against round r's stock: the same cluster, minutes apart.
        return [o / s for o, s in zip(vals(mode, *path), vals("stock", *path), strict=False) if s]

    def difference(*path: str, mode: str = "opted-in") -> list[float]:
        return [o - s for o, s in zip(vals(mode, *path), vals("stock", *path), strict=False)]

    tput = ratio("pods_per_second")
    algo = ratio("algorithm_ms", "p99")
    create = ratio("pod_create_ms", "p99")
    create_mean = difference("pod_create_ms", "mean")
    watch = ratio("pod_watch_bytes")
    within = vals("opted-in", "webhook_within_5ms")
    placed = [r["placement"] for r in by_mode["opted-in"] if "placement" in r]
    top = [p["top_share"] for p in placed if p.get("top_share") is not None]
    ready = result.get("ready_after_restart_seconds", [])
    up = result.get("cluster_up", {}).get("seconds")
    agent = bool(result.get("settings", {}).get("agent", True))
    targets = [
        report.target("opted-in pods/s >= 0.95x stock", span(tput, "x"),
                      bool(tput) and min(tput) >= 0.95),
        report.target(">= 99 % of webhook calls under 5 ms (API server's metric)",
                      span([100 * w for w in within], " %"),
                      bool(within) and min(within) >= 0.99),
        report.target("steered pod-create mean <= stock + 2 ms", span(create_mean, " ms"),
                      bool(create_mean) and max(create_mean) <= 2.0),
        report.target("steered pod-create p99 <= 1.2x stock", span(create, "x"),
                      bool(create) and max(create) <= 1.2),
        report.target("scheduler algorithm p99 <= 1.1x stock", span(algo, "x"),
                      bool(algo) and max(algo) <= 1.1),
        report.target("pod watch bytes <= 1.3x stock", span(watch, "x"),
                      bool(watch) and max(watch) <= 1.3),
        report.target(">= 95 % of steered pods on a top-weight node"
                      + ("" if agent else " (no agent: hostname terms)"),
                      span([100 * t for t in top], " %"), bool(top) and min(top) >= 0.95),
        report.target("cluster up with the nodes <= 30 s", f"{up:.1f} s" if up else "n/a",
                      bool(up) and up <= 30),
        report.target("ready after a restart <= 20 s", span(ready, " s"),
                      bool(ready) and max(ready) <= 20),
    ]
    steady = (result.get("api_load") or {}).get("steady")
    if agent and steady:
        cores = steady.get("over_idle_cores", {}).get("kube-apiserver")
        writes = steady.get("lease_writes_per_second", 0.0)
        targets.append(report.target(
            "agent Leases <= 0.05 of an API-server core",
            "n/a" if cores is None else f"{cores:.3f} cores ({writes:.1f} writes/s)",
            cores is not None and cores <= 0.05))
    modes = {mode: {"throughput_ratio": ratio("pods_per_second", mode=mode),
                    "algorithm_p99_ratio": ratio("algorithm_ms", "p99", mode=mode),
                    "pod_create_p99_ratio": ratio("pod_create_ms", "p99", mode=mode),
                    "pod_create_mean_over_stock_ms": difference("pod_create_ms", "mean",
                                                                mode=mode),
                    "pod_watch_bytes_ratio": ratio("pod_watch_bytes", mode=mode),
                    "scheduler_cpu_per_pod_ratio": ratio("scheduler_cpu_ms_per_pod", mode=mode),
                    "webhook_within_5ms": vals(mode, "webhook_within_5ms"),
                    "placement": [r["placement"] for r in by_mode[mode] if "placement" in r]}
             for mode in by_mode if mode != "stock"}
    return {"by_mode": modes, "throughput_ratio": tput, "algorithm_p99_ratio": algo,
            "pod_create_p99_ratio": create, "pod_create_mean_over_stock_ms": create_mean,
            "pod_watch_bytes_ratio": watch, "webhook_within_5ms": within, "placement": placed,
            "stock_placement": [r["placement"] for r in by_mode["stock"] if "placement" in r],
            "top_share": top, "targets": targets}


def rounds_table(rounds: Sequence[Mapping[str, Any]]) -> str:
    rows = [(r["mode"], r["namespace"], f"{r['pods_per_second']:.1f}",
             f"{r['bind_latency']['p50_ms']:.0f}/{r['bind_latency']['p99_ms']:.0f}",
             _fmt(r["webhook_admission_ms"], "p50") + "/" + _fmt(r["webhook_admission_ms"], "p99"),
             "/".join(_fmt(r["pod_create_ms"], k) for k in ("mean", "p50", "p99")),
             _fmt(r["algorithm_ms"], "p50") + "/" + _fmt(r["algorithm_ms"], "p99"),
             f"{r['scheduler_cpu_ms_per_pod']:.2f}", f"{r['pod_watch_bytes'] / 1e6:.1f}")
            for r in rounds]
    return report.table(["mode", "ns", "pods/s", "bind p50/p99 ms", "webhook p50/p99 ms",
                         "pod create mean/p50/p99 ms", "algorithm p50/p99 ms", "sched CPU ms/pod",
                         "pod watch MB"], rows)


def placement_line(p: Mapping[str, Any]) -> str:
    """One round's placement in a line."""
    out = p.get("outcomes", {})
    terms = p.get("terms", {})
    most = p.get("on_most_bytes_share")
    ratio = p.get("present_ratio_mean")
    line = (f"most-bytes node {pct(most)}, bytes/best {'n/a' if ratio is None else f'{ratio:.3f}'}")
    if p.get("steered"):
        line = (f"{p['steered']} steered: TOP {out.get('top', 0)} / PREFERRED "
                f"{out.get('preferred', 0)} / OTHER {out.get('other', 0)} "
                f"({pct(p.get('top_share'))} top); terms: labels only "
                f"{terms.get('label_only', 0)}, hostnames only {terms.get('hostname_only', 0)},"
                f" both {terms.get('both', 0)}; {p.get('added_bytes_mean', 0):.0f} bytes "
                f"added; " + line)
    return line


def windows_lines(load: Mapping[str, Any]) -> list[str]:
    """The load windows, one line each: rates and cores beyond the idle window."""
    lines = []
    for name, w in load.items():
        for window in (w if isinstance(w, list) else [w]):
            if not isinstance(window, dict) or "cores" not in window:
                continue
            extra = window.get("over_idle_cores")
            cores = ", ".join(f"{k} {v:+.3f}" for k, v in sorted((extra or {}).items())
                              if abs(v) >= 0.0005)
            rates = ", ".join(f"{k} {v:.1f}/s" for k, v in sorted(
                window.get("requests_per_second_by_resource_verb", {}).items())
                if k.split(" ")[0] in ("leases", "nodes", "nodelayers") and v >= 0.05)
            watch = window.get("watch_bytes_per_second_by_resource", {})
            label = name + (f" {window['percent_per_minute']} %/min" if "percent_per_minute"
                            in window else "")
            lines.append(f"{label} ({window['seconds']:.0f} s): {rates or 'no agent writes'}; "
                         f"node watch {watch.get('nodes', 0) / 1e3:.1f} KB/s; "
                         + (f"cores over idle: {cores}" if extra is not None else
                            f"kube-apiserver {window['cores'].get('kube-apiserver', 0):.3f} "
                            f"cores"))
    return lines
