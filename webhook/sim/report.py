"""Simulation output: a table, a JSON document and matplotlib PNGs (matplotlib is imported only
when plotting, so the webhook itself does not need it)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from webhook.sim.engine import RunResult, SweepPoint

MiB = 1 << 20
GiB = 1 << 30


def reduction(result: RunResult, stock: RunResult | None) -> float | None:
    """Share of the stock policy's pulled bytes this policy does not pull."""
    if stock is None or stock.bytes_pulled == 0:
        return None
    return 1 - result.bytes_pulled / stock.bytes_pulled


def summary(result: RunResult, stock: RunResult | None = None) -> dict[str, Any]:
    return {
        "policy": result.policy,
        "pods": result.pods,
        "scheduled": result.scheduled,
        "bytesPulled": result.bytes_pulled,
        "bytesNeeded": result.bytes_needed,
        "reductionVsStock": reduction(result, stock),
        "pullSeconds": {"p50": result.percentile(50), "p95": result.percentile(95),
                        "mean": result.mean_pull},
        "coldStarts": result.cold_starts,
        "schedulingFailures": {"podsThatWaited": result.waited,
                               "neverScheduled": result.unscheduled},
        "maxPodsOfOneWorkloadPerNode": result.max_heat,
        "meanMaxPodsPerNode": result.mean_heat,
        "nodeCpuAllocation": {"mean": result.mean_util, "stdevAcrossNodes":
                              result.mean_util_spread},
        "webhook": {"patched": result.patched, "reasons": result.reasons}
        if result.policy == "webhook" else None,
    }


def document(results: Mapping[str, RunResult], sweep: Sequence[SweepPoint] = (),
             meta: Mapping[str, Any] | None = None) -> dict[str, Any]:
    stock = results.get("stock")
    doc: dict[str, Any] = {"meta": dict(meta or {}),
                           "policies": [summary(r, stock) for r in results.values()]}
    oracle = results.get("oracle")
    hook = results.get("webhook")
    if stock and oracle and hook:
        best, got = reduction(oracle, stock), reduction(hook, stock)
        doc["webhookShareOfOracle"] = got / best if best and got is not None else None
    if sweep:
        doc["sweep"] = [
            {"label": p.label, "minBytes": p.scoring.min_bytes, "fullBytes": p.scoring.full_bytes,
             "maxWeight": p.scoring.max_weight, "baseline": p.scoring.baseline,
             **summary(p.result, stock)}
            for p in sweep
        ]
    return doc


def table(results: Mapping[str, RunResult], sweep: Sequence[SweepPoint] = ()) -> str:
    stock = results.get("stock")
    head = (f"{'POLICY':<14} {'PULLED':>9} {'VS STOCK':>8} {'P50 s':>6} {'P95 s':>6} "
            f"{'MEAN s':>6} {'COLD':>5} {'WAITED':>6} {'UNSCHED':>7} {'HEAT':>4} "
            f"{'HEAT~':>5} {'CPU':>4} {'SPREAD':>6}")
    lines = [head]
    rows: list[tuple[str, RunResult]] = list(results.items())
    rows += [(f"  {p.label}", p.result) for p in sweep]
    for label, r in rows:
        red = reduction(r, stock)
        lines.append(
            f"{label:<14} {r.bytes_pulled / GiB:>5.1f} GiB {_pct(red):>8} "
            f"{r.percentile(50):>6.1f} {r.percentile(95):>6.1f} {r.mean_pull:>6.1f} "
            f"{r.cold_starts:>5} {r.waited:>6} {r.unscheduled:>7} {r.max_heat:>4} "
            f"{r.mean_heat:>5.2f} {r.mean_util:>4.0%} {r.mean_util_spread:>6.3f}"
        )
    lines.append("")
    lines.append("PULLED: bytes downloaded; P50/P95/MEAN: pull time per pod (bind -> images ready);"
                 " COLD: pods that waited for a pull;")
    lines.append("WAITED/UNSCHED: pods that failed a scheduling attempt / were never placed; "
                 "HEAT: max pods of one Deployment on one node,")
    lines.append("HEAT~: its mean over multi-replica Deployments; CPU/SPREAD: node cpu allocation"
                 " mean / stdev across nodes.")
    return "\n".join(lines) + "\n"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{-value:+.0%}"


def plot(results: Mapping[str, RunResult], sweep: Sequence[SweepPoint], out: Path) -> list[Path]:
    """Write bytes-over-time, pull-time CDF and (with a sweep) the calibration trade-off."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    written = []
    styles = {"stock": "tab:gray", "webhook": "tab:blue", "plugin": "tab:orange",
              "oracle": "tab:green", "greedy": "tab:red"}

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for name, r in results.items():
        xs = [0.0] + [t / 3600 for t, _ in r.timeline]
        ys = [0.0] + [b / GiB for _, b in r.timeline]
        ax.step(xs, ys, where="post", label=name, color=styles.get(name))
    ax.set_xlabel("time (hours)")
    ax.set_ylabel("cumulative bytes pulled (GiB)")
    ax.set_title("Bytes pulled over time")
    ax.legend()
    ax.grid(alpha=0.3)
    written.append(_save(fig, out / "sim-bytes-over-time.png"))

    fig, ax = plt.subplots(figsize=(6.4, 4.0), dpi=100)
    for name, r in results.items():
        values = sorted(r.pull_times)
        if not values:
            continue
        n = len(values)
        ax.step(values, [(i + 1) / n for i in range(n)], where="post", label=name,
                color=styles.get(name))
    ax.set_xscale("symlog", linthresh=1.0)
    ax.set_xlabel("pull time per pod (s, symlog)")
    ax.set_ylabel("share of pods")
    ax.set_title("Pull-time CDF")
    ax.legend(loc="lower right")
    ax.grid(alpha=0.3)
    written.append(_save(fig, out / "sim-pull-time-cdf.png"))

    stock = results.get("stock")
    if sweep and stock is not None:
        fig, ax = plt.subplots(figsize=(6.4, 4.4), dpi=100)
        for p in sweep:
            red = reduction(p.result, stock) or 0.0
            ax.scatter(p.result.mean_heat, 100 * red, color="tab:blue")
            ax.annotate(p.label, (p.result.mean_heat, 100 * red), fontsize=7,
                        xytext=(3, 3), textcoords="offset points")
        for name in ("stock", "plugin", "oracle", "greedy"):
            if name in results:
                r = results[name]
                red = reduction(r, stock) or 0.0
                ax.scatter(r.mean_heat, 100 * red, marker="s", color=styles[name], label=name)
        ax.set_xlabel("heating: mean over Deployments of max pods on one node")
        ax.set_ylabel("bytes pulled saved vs stock (%)")
        ax.set_title("Webhook calibration sweep: savings vs heating")
        ax.legend(loc="lower right", fontsize=8)
        ax.grid(alpha=0.3)
        written.append(_save(fig, out / "sim-calibration-sweep.png"))
    return written


def _save(fig: Any, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
