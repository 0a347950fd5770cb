"""`layer-locality simulate` once its arguments are parsed (command.py): builds the workload
per seed, runs every policy (and the sweep), prints the report."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson

from webhook.config import ConfigError
from webhook.core.causes import LossTable
from webhook.core.scoring import ScoringPolicy
from webhook.registry.catalog import CatalogError, StaticCatalog
from webhook.sim.creation import CreationConfig
from webhook.sim.engine import SimConfig, compare, sweep
from webhook.sim.lossprobe import cause_lines
from webhook.sim.policies import POLICIES
from webhook.sim.report import document, plot, report
from webhook.sim.results import SeedRun
from webhook.sim.view import ViewConfig
from webhook.sim.workload import Trace, TraceError, WorkloadConfig, generate, load_trace
from webhook.sim.world import WorldConfig
from webhook.value_parsers import parse_size

# `documented`: the run docs/evaluation.md reports. `quick`: about a quarter of the pods and
# half the nodes, for calibration sweeps over many seeds (docs/evaluation.md, "Run time").
PRESETS = {
    "documented": WorkloadConfig(),
    "quick": WorkloadConfig(nodes=20, hours=3.0, workloads_per_hour=75.0),
}


def simulate(args: argparse.Namespace) -> int:
    from webhook.serving.wiring import demo_catalog

    base = demo_catalog()
    if args.catalog:
        try:
            for image in StaticCatalog.load(args.catalog).images():
                base.add(image)
        except CatalogError as exc:
            raise ConfigError(str(exc)) from exc
    policies = [p.strip() for p in (args.policies or ",".join(POLICIES)).split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise ConfigError(f"unknown policies {unknown}; choose from {', '.join(POLICIES)}")
    overlap = set(args.seeds) & set(args.held_out)
    if overlap:
        raise ConfigError(f"seeds {sorted(overlap)} are both tuning and held out")
    config = _config(args)
    workload = _workload(args)
    runs: list[SeedRun] = []
    groups = [(s, "tuning") for s in args.seeds] + [(s, "held-out") for s in args.held_out]
    for seed, group in groups:
        started = time.perf_counter()
        trace = _trace(args, replace(workload, seed=seed), base)
        if args.write_trace and not runs:
            from webhook.sim.workload import trace_document

            args.write_trace.write_bytes(orjson.dumps(trace_document(trace)))
        cfg = replace(config, seed=seed)

        def progress(name: str, seed: int = seed) -> None:
            print(f"simulate: seed {seed}: {name}", file=sys.stderr)

        results = compare(trace, base, policies, cfg, progress)
        points = sweep(trace, base, cfg, progress=progress) if args.sweep else []
        runs.append(SeedRun(seed, group, len(trace.pods), len(trace.nodes), results,
                            tuple(points), time.perf_counter() - started))
    if args.plot:
        for path in plot(runs[0].results, runs[0].sweep, args.plot):
            print(f"simulate: wrote {path}", file=sys.stderr)
    if args.output == "json":
        meta = {"seeds": list(args.seeds), "heldOut": list(args.held_out),
                "preset": None if args.trace else args.preset,
                "trace": str(args.trace) if args.trace else None,
                "workload": None if args.trace else _plain(workload),
                "scoring": _plain(config.scoring), "view": _plain(config.view),
                "bursts": config.creation.bursts,
                "percentageOfNodesToScore": config.percentage_of_nodes_to_score,
                "gc": config.world.gc, "seconds": sum(r.seconds for r in runs)}
        sys.stdout.write(orjson.dumps(document(runs, meta), option=orjson.OPT_INDENT_2).decode()
                         + "\n")
    else:
        sys.stdout.write(report(runs))
    if args.explain:
        _explain(runs)
    return 0


def _explain(runs: Sequence[SeedRun]) -> None:
    """The webhook's lost bytes by cause, per group of seeds (stderr with --output json)."""
    out = sys.stderr if any(r.results.get("webhook") is None for r in runs) else sys.stdout
    for group in dict.fromkeys(r.group for r in runs):
        table, gap = LossTable(), 0.0
        for r in runs:
            hook, oracle = r.results.get("webhook"), r.results.get("oracle")
            if r.group != group or hook is None:
                continue
            table.add(hook.losses)
            if oracle is not None:
                gap += max(0, hook.bytes_pulled - oracle.bytes_pulled)
        print(f"{group} seeds:", file=out)
        print("\n".join(cause_lines(table, gap if gap else None)), file=out)


def _config(args: argparse.Namespace) -> SimConfig:
    defaults, view = ScoringPolicy(), ViewConfig()
    try:
        scoring = ScoringPolicy(
            min_bytes=parse_size(args.min_bytes) if args.min_bytes else defaults.min_bytes,
            full_bytes=parse_size(args.full_bytes) if args.full_bytes else defaults.full_bytes,
            max_weight=defaults.max_weight if args.max_weight is None else args.max_weight,
            share=defaults.share if args.share is None else args.share,
            lack_bytes=(parse_size(args.lack_bytes) if args.lack_bytes is not None
                        else defaults.lack_bytes),
            spread_step=defaults.spread_step if args.spread_step is None else args.spread_step,
            max_nodes=defaults.max_nodes if args.max_nodes is None else args.max_nodes,
            baseline=defaults.baseline if args.baseline is None else args.baseline == "true")
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    delays = {"watch_delay": args.watch_delay, "registry_delay": args.registry_delay}
    if any(v is not None and v < 0 for v in delays.values()):
        raise ConfigError("--watch-delay and --registry-delay must be >= 0")
    if args.budget_ms is not None:
        if args.budget_ms < 0:
            raise ConfigError("--budget-ms must be >= 0")
        view = replace(view, budget=args.budget_ms / 1000)
    view = replace(view, spread_guard=args.spread_guard,
                   **{k: v for k, v in delays.items() if v is not None})
    return SimConfig(world=replace(WorldConfig(), gc=not args.no_gc), scoring=scoring,
                     percentage_of_nodes_to_score=args.percentage_of_nodes_to_score,
                     view=view, creation=CreationConfig(bursts=args.bursts),
                     explain=bool(getattr(args, "explain", False)))


def _workload(args: argparse.Namespace) -> WorkloadConfig:
    try:
        bandwidth = float(parse_size(args.bandwidth))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    given = {"nodes": args.nodes, "hours": args.hours, "workloads_per_hour": args.rate,
             "app_share": args.app_share}
    return replace(PRESETS[args.preset], bandwidth=bandwidth,
                   **{k: v for k, v in given.items() if v is not None})


def _trace(args: argparse.Namespace, workload: WorkloadConfig, base: StaticCatalog) -> Trace:
    if args.trace is None:
        return generate(workload, base.images())
    try:  # a given trace is the same for every seed: seeds then vary only the tie-breaks
        return load_trace(orjson.loads(args.trace.read_bytes()))
    except (orjson.JSONDecodeError, TraceError, CatalogError) as exc:
        raise ConfigError(f"{args.trace}: {exc}") from exc


def _plain(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__dataclass_fields__}
