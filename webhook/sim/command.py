"""`layer-locality simulate`: replay a generated or given workload under every policy.

    layer-locality simulate                      # the documented default run (table)
    layer-locality simulate --sweep --plot docs/images --output json
    layer-locality simulate --trace trace.json   # a user trace (format: webhook/sim/workload.py)
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from webhook.catalog import CatalogError, StaticCatalog
from webhook.config import ConfigError, parse_size
from webhook.scoring import ScoringPolicy
from webhook.sim.engine import SimConfig, SweepPoint, compare, sweep
from webhook.sim.policies import POLICIES
from webhook.sim.report import document, plot, table
from webhook.sim.workload import Trace, TraceError, WorkloadConfig, generate, load_trace
from webhook.sim.world import WorldConfig

_DEFAULT_POLICY = ScoringPolicy()
_DEFAULT_WL = WorkloadConfig()


def add_parser(sub: Any) -> None:
    """Register the `simulate` subcommand on the CLI's subparsers."""
    p: argparse.ArgumentParser = sub.add_parser(
        "simulate", help="replay a workload through an emulated kube-scheduler, per policy")
    p.add_argument("--trace", type=Path, help="trace JSON (default: a generated workload)")
    p.add_argument("--write-trace", type=Path, metavar="FILE", help="write the trace replayed")
    p.add_argument("--catalog", type=Path, help="extra layer catalog (the embedded one is used)")
    p.add_argument("--policies", default=",".join(POLICIES),
                   help=f"comma-separated subset of {','.join(POLICIES)}")
    p.add_argument("--seed", type=int, default=1, help="workload and scheduler seed")
    p.add_argument("--nodes", type=int, default=_DEFAULT_WL.nodes)
    p.add_argument("--hours", type=float, default=_DEFAULT_WL.hours)
    p.add_argument("--rate", type=float, default=_DEFAULT_WL.workloads_per_hour,
                   help="workloads (Deployments and Jobs) arriving per hour")
    p.add_argument("--app-share", type=float, default=_DEFAULT_WL.app_share,
                   help="share of workloads running an app image built FROM an official one")
    p.add_argument("--bandwidth", default="20MiB", help="registry bandwidth per node, per second")
    p.add_argument("--no-gc", action="store_true", help="disable image garbage collection")
    p.add_argument("--percentage-of-nodes-to-score", type=int, default=0,
                   help="kube-scheduler percentageOfNodesToScore (0: adaptive default)")
    p.add_argument("--min-bytes", default=f"{_DEFAULT_POLICY.min_bytes}",
                   help="webhook calibration (default: the webhook's defaults)")
    p.add_argument("--full-bytes", default=f"{_DEFAULT_POLICY.full_bytes}")
    p.add_argument("--max-weight", type=int, default=_DEFAULT_POLICY.max_weight)
    p.add_argument("--baseline", choices=("true", "false"),
                   default=str(_DEFAULT_POLICY.baseline).lower())
    p.add_argument("--sweep", action="store_true", help="also sweep the webhook's calibration")
    p.add_argument("--output", choices=("table", "json"), default="table")
    p.add_argument("--plot", type=Path, metavar="DIR", help="write PNG plots (needs matplotlib)")
    p.set_defaults(run=main)


def main(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from webhook.wiring import demo_catalog

    base = demo_catalog()
    if args.catalog:
        try:
            for image in StaticCatalog.load(args.catalog).images():
                base.add(image)
        except CatalogError as exc:
            raise ConfigError(str(exc)) from exc
    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise ConfigError(f"unknown policies {unknown}; choose from {', '.join(POLICIES)}")
    try:
        scoring = ScoringPolicy(min_bytes=parse_size(args.min_bytes),
                                full_bytes=parse_size(args.full_bytes),
                                max_weight=args.max_weight, baseline=args.baseline == "true")
        bandwidth = float(parse_size(args.bandwidth))
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    workload = WorkloadConfig(seed=args.seed, nodes=args.nodes, hours=args.hours,
                              workloads_per_hour=args.rate, app_share=args.app_share,
                              bandwidth=bandwidth)
    trace = _trace(args, workload, base)
    if args.write_trace:
        from webhook.sim.workload import trace_document

        args.write_trace.write_bytes(orjson.dumps(trace_document(trace)))
    config = SimConfig(seed=args.seed, world=replace(WorldConfig(), gc=not args.no_gc),
                       scoring=scoring,
                       percentage_of_nodes_to_score=args.percentage_of_nodes_to_score)

    def progress(name: str) -> None:
        print(f"simulate: {name}", file=sys.stderr)

    results = compare(trace, base, policies, config, progress)
    points: list[SweepPoint] = sweep(trace, base, config, progress=progress) if args.sweep else []
    meta = {"seed": args.seed, "pods": len(trace.pods), "nodes": len(trace.nodes),
            "trace": str(args.trace) if args.trace else None,
            "workload": None if args.trace else _plain(workload),
            "scoring": _plain(scoring), "percentageOfNodesToScore":
            args.percentage_of_nodes_to_score, "gc": not args.no_gc}
    if args.plot:
        for path in plot(results, points, args.plot):
            print(f"simulate: wrote {path}", file=sys.stderr)
    if args.output == "json":
        sys.stdout.write(orjson.dumps(document(results, points, meta),
                                      option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(f"{len(trace.pods)} pods on {len(trace.nodes)} nodes, seed {args.seed}\n")
        sys.stdout.write(table(results, points))
    return 0


def _trace(args: argparse.Namespace, workload: WorkloadConfig, base: StaticCatalog) -> Trace:
    if args.trace is None:
        return generate(workload, base.images())
    try:
        return load_trace(orjson.loads(args.trace.read_bytes()))
    except (orjson.JSONDecodeError, TraceError, CatalogError) as exc:
        raise ConfigError(f"{args.trace}: {exc}") from exc


def _plain(obj: Any) -> dict[str, Any]:
    return {name: getattr(obj, name) for name in obj.__dataclass_fields__}
