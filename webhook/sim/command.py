"""`layer-locality simulate`: argument parsing only. Everything else is imported when the
command runs, so the webhook's runtime (and the container image, which ships only this module
of webhook/sim) never imports the simulator or its extra dependencies (jsonpatch, matplotlib).

    layer-locality simulate                                # the documented run, seed 1 (table)
    layer-locality simulate --seeds 1-5 --held-out 6-10 --sweep
    layer-locality simulate --preset quick --seeds 1-5     # a smaller workload (calibration)
    layer-locality simulate --trace trace.json             # a user trace (webhook/sim/workload.py)
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from webhook.config import ConfigError
from webhook.report.plots import REPLACE_HELP, check_plot_dir

# What --plot writes (webhook/sim/report.py plot()).
PLOT_NAMES = ("sim-bytes-over-time.png", "sim-pull-time-cdf.png", "sim-calibration-sweep.png")

PRESETS = ("documented", "quick")
INSTALL_HINT = ("the simulator needs the 'sim' extra: pip install 'layer-locality[sim]' "
                "(or `make install` in a checkout); the container image does not include it")
# Modules whose absence means "the sim extra / the simulator is not installed".
_OPTIONAL = ("jsonpatch", "matplotlib", "webhook.sim")


def parse_seeds(text: str) -> tuple[int, ...]:
    """`1-5`, `1,3,7`, `1-3,8` -> seeds in the order given, without repeats."""
    seeds: dict[int, None] = {}
    try:
        for part in (p.strip() for p in text.split(",")):
            low, sep, high = part.partition("-")
            first, last = int(low), int(high) if sep else int(low)
            if last < first:
                raise ValueError(part)
            seeds.update(dict.fromkeys(range(first, last + 1)))
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"invalid seeds {text!r}: expected N, N-M or a comma-separated list of those"
        ) from None
    return tuple(seeds)


def add_parser(sub: Any) -> None:
    """Register the `simulate` subcommand on the CLI's subparsers."""
    p: argparse.ArgumentParser = sub.add_parser(
        "simulate", help="replay a workload through an emulated kube-scheduler, per policy",
        description="Needs the 'sim' extra (pip install 'layer-locality[sim]').")
    p.add_argument("--trace", type=Path, help="trace JSON (default: a generated workload)")
    p.add_argument("--write-trace", type=Path, metavar="FILE",
                   help="write the trace replayed (the first seed's)")
    p.add_argument("--catalog", type=Path, help="extra layer catalog (the embedded one is used)")
    p.add_argument("--policies", help="comma-separated subset of stock,webhook,plugin,oracle,"
                   "greedy (default: all)")
    p.add_argument("--seeds", "--seed", dest="seeds", type=parse_seeds, default=(1,),
                   metavar="SEEDS", help="workload and scheduler seeds, e.g. 1 or 1-5 (tuning)")
    p.add_argument("--held-out", type=parse_seeds, default=(), metavar="SEEDS",
                   help="seeds reported separately as held out, e.g. 6-10")
    p.add_argument("--preset", choices=PRESETS, default="documented",
                   help="generated workload size: the documented run or a quick one")
    p.add_argument("--nodes", type=int, help="nodes (default: from the preset)")
    p.add_argument("--hours", type=float, help="arrival window (default: from the preset)")
    p.add_argument("--rate", type=float,
                   help="workloads (Deployments and Jobs) arriving per hour (default: preset)")
    p.add_argument("--app-share", type=float, help="share of workloads running an app image "
                   "built FROM an official one (default: preset)")
    p.add_argument("--bandwidth", default="20MiB", metavar="SIZE",
                   help="registry bandwidth per node, per second (bytes, or a unit: 20MiB; "
                   "default: 20MiB)")
    p.add_argument("--no-gc", action="store_true", help="disable image garbage collection")
    p.add_argument("--percentage-of-nodes-to-score", type=int, default=0,
                   help="kube-scheduler percentageOfNodesToScore (0: adaptive default)")
    p.add_argument("--bursts", action=argparse.BooleanOptionalAction, default=True,
                   help="Deployments create replicas in slow-start steps 1, 2, 4, ... each "
                   "reviewed before any is bound (default: on)")
    p.add_argument("--watch-delay", type=float, default=None, metavar="SECONDS",
                   help="delay before the webhook's watches report a bind, a pod end or a node "
                   "status change (default: 1.0)")
    p.add_argument("--registry-delay", type=float, default=None, metavar="SECONDS",
                   help="time from the first review of an image the webhook has not seen to "
                   "the registry's answer (default: 0.5; 0: every image known)")
    p.add_argument("--budget-ms", type=int, default=None, metavar="MS",
                   help="as `serve --budget-ms`: a registry answering within it is waited for "
                   "(default: the webhook's, 250)")
    p.add_argument("--min-bytes", metavar="SIZE",
                   help="webhook calibration, as `serve --min-bytes`: bytes, or a unit (23MiB) "
                   "(default: the webhook's defaults, as every knob below)")
    p.add_argument("--full-bytes", metavar="SIZE", help="as `serve --full-bytes`")
    p.add_argument("--max-weight", type=int, help="as `serve --max-weight`")
    p.add_argument("--share", type=float, help="as `serve --share`")
    p.add_argument("--lack-bytes", metavar="SIZE", help="as `serve --lack-bytes`")
    p.add_argument("--explain", action="store_true",
                   help="also print where the webhook's lost bytes went: per placement, the "
                        "bytes its node lacked beyond the best node it could have had, by "
                        "cause (docs/evaluation.md)")
    p.add_argument("--spread-step", type=int, help="as `serve --spread-step`")
    p.add_argument("--max-nodes", type=int, help="as `serve --max-nodes`")
    p.add_argument("--baseline", choices=("true", "false"), help="as `serve --baseline`")
    p.add_argument("--spread-guard", action=argparse.BooleanOptionalAction, default=True,
                   help="the webhook counts siblings from its pod watch, as in live mode "
                   "(default: on; off replays the static-inventory webhook)")
    p.add_argument("--sweep", action="store_true", help="also sweep the webhook's calibration")
    p.add_argument("--output", choices=("table", "json"), default="table",
                   help="per-seed tables and group summaries (default), or JSON")
    p.add_argument("--plot", type=Path, metavar="DIR",
                   help="write PNG plots of the first seed (matplotlib)")
    p.add_argument("--replace-plots", action="store_true", help=REPLACE_HELP)
    p.set_defaults(run=main)


def main(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    check_plot_dir(args.plot, PLOT_NAMES, args.replace_plots)
    try:
        from webhook.sim.driver import simulate
    except ModuleNotFoundError as exc:
        if missing_optional(exc):
            raise ConfigError(f"{INSTALL_HINT} (missing module: {exc.name})") from exc
        raise
    try:
        return simulate(args)
    except ModuleNotFoundError as exc:  # matplotlib is imported only for --plot
        if missing_optional(exc):
            raise ConfigError(f"{INSTALL_HINT} (missing module: {exc.name})") from exc
        raise


def missing_optional(exc: ModuleNotFoundError, modules: Sequence[str] = _OPTIONAL) -> bool:
    """Whether `exc` is one of `modules` (or a submodule) missing: an extra not installed."""
    name = exc.name or ""
    return any(name == m or name.startswith(m + ".") for m in modules)
