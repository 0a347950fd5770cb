"""`layer-locality evaluate`: placement on the REAL kube-scheduler. For each scenario, seed and
repeat, a fresh local control plane with fake nodes and the kubelet stand-in runs the scenario
twice, stock (namespace not opted in) then webhook (opted in); each run is measured and, unless
--no-simulate, its observed trace replayed through the simulator (stock, webhook, oracle).
Runs are sequential: each one starts etcd, the control plane and the webhook.

Argument parsing here; the rest is imported when the command runs (it needs the 'sim' extra).

    layer-locality evaluate                                   # steady and bursts, seed 1, 5 repeats
    layer-locality evaluate --scenarios bursts --repeats 1 --nodes 12
    layer-locality evaluate --seeds 1-3 --json eval.json --plot plots/
    layer-locality evaluate --webhook-arg=--spread-step --webhook-arg=2
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from webhook.config import ConfigError
from webhook.report.plots import REPLACE_HELP, check_plot_dir
from webhook.sim.command import INSTALL_HINT, missing_optional, parse_seeds

# What --plot writes (webhook/evaluation/report.py plot()).
PLOT_NAMES = ("eval-bytes.png", "eval-pull-times.png", "eval-real-vs-stand-in.png")

if TYPE_CHECKING:
    from webhook.evaluation.balancer import Split

SCENARIOS = ("steady", "bursts")  # scenario.KINDS, without importing the simulator here
SPLITS = ("connection", "one", "even")  # balancer.SPLITS, without importing aiohttp here
# Modules whose absence means "the sim extra / the simulator is not installed" (the container
# image ships only the argparse modules of webhook/sim, webhook/evaluation, webhook/devcluster).
_OPTIONAL = ("jsonpatch", "matplotlib", "webhook.sim", "webhook.evaluation", "webhook.devcluster")


def parse_scenarios(text: str) -> tuple[str, ...]:
    """`steady,bursts` -> the kinds in the order given, without repeats."""
    names = [n.strip() for n in text.split(",")]
    unknown = [n for n in names if n not in SCENARIOS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"invalid scenarios {text!r}: expected a comma-separated subset of "
            f"{','.join(SCENARIOS)}")
    return tuple(dict.fromkeys(names))


def parse_splits(text: str) -> tuple[Split, ...]:
    """`connection,one,even` -> the splits in the order given, without repeats."""
    names = [n.strip() for n in text.split(",")]
    unknown = [n for n in names if n not in SPLITS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"invalid splits {text!r}: expected a comma-separated subset of {','.join(SPLITS)}")
    return tuple(dict.fromkeys(cast("Split", n) for n in names))


def registry_bandwidth(text: str) -> int:
    from webhook.devcluster.command import bandwidth

    return bandwidth(text)


def add_parser(sub: Any) -> None:
    """Register the `evaluate` subcommand on the CLI's subparsers."""
    p: argparse.ArgumentParser = sub.add_parser(
        "evaluate", help="run scenarios on a real kube-scheduler (local control plane, fake "
                         "nodes), stock vs webhook, and compare with the simulator",
        description="Needs the 'sim' extra (pip install 'layer-locality[sim]') and the pinned "
                    "control plane (make kube). Runs one after another: about 1-3 minutes each.")
    p.add_argument("--scenarios", type=parse_scenarios, default=SCENARIOS, metavar="LIST",
                   help="comma-separated subset of steady,bursts (default: both)")
    p.add_argument("--seeds", "--seed", dest="seeds", type=parse_seeds, default=(1,),
                   metavar="SEEDS", help="scenario seeds, e.g. 1 or 1-3: each seed is a "
                   "different generated scenario (default: 1)")
    p.add_argument("--repeats", type=int, default=5, metavar="N",
                   help="runs of each (scenario, seed, mode) on fresh clusters: the real "
                   "scheduler's tie-breaks are random and cannot be seeded (default: 5)")
    p.add_argument("--bin-dir", type=Path, default=None, metavar="DIR",
                   help="the pinned binaries (default: $LAYER_LOCALITY_KUBE_BIN, else what "
                   "hack/kube/build.sh prints)")
    p.add_argument("--clock-scale", type=float, default=20.0, metavar="X",
                   help="nominal seconds of pulling per wall second (default: 20)")
    p.add_argument("--bandwidth", default="20MiB",
                   metavar="SIZE", help="registry bandwidth per node, per nominal second "
                   "(bytes, or a unit: 20MiB; default: 20MiB)")
    p.add_argument("--nodes", type=int, default=None,
                   help="fake nodes per cluster (default: the scenario's, 30)")
    p.add_argument("--output", choices=("table", "json"), default="table",
                   help="a table per scenario (default), or JSON on stdout")
    p.add_argument("--json", type=Path, metavar="FILE", dest="json_file",
                   help="also write the full JSON (every run's raw metrics) to FILE")
    p.add_argument("--plot", type=Path, metavar="DIR",
                   help="write PNG plots (bytes per mode, pull-time distribution; matplotlib)")
    p.add_argument("--replace-plots", action="store_true", help=REPLACE_HELP)
    p.add_argument("--no-simulate", dest="simulate", action="store_false",
                   help="skip the simulator replay of each run (no oracle, no agreement)")
    p.add_argument("--webhook-arg", action="append", default=[], metavar="ARG",
                   dest="webhook_args",
                   help="an argument for the webhook process (repeatable; write options as "
                   "--webhook-arg=--spread-step --webhook-arg=2)")
    p.add_argument("--webhook-replicas", type=int, default=2, metavar="N",
                   help="webhook processes behind a balancer that spreads the API server's "
                   "connections at random, as a Service does (default: 2, as the manifests "
                   "ship)")
    p.add_argument("--splits", type=parse_splits, default=("connection",), metavar="LIST",
                   help="how the balancer splits the reviews between the webhook replicas, "
                   "one opted-in run per split and repeat: connection (each API-server "
                   "connection to one replica at random, as a Service does; the default), "
                   "one (all to one replica), even (review by review in turn)")
    p.add_argument("--write-traces", type=Path, metavar="DIR",
                   help="write each run's observed trace (the simulator's trace format: "
                   "`layer-locality simulate --trace FILE` replays it) into DIR")
    p.add_argument("--real-nodes", type=int, default=0, metavar="N",
                   help="run on N REAL nodes (kubelets and containerd v2 on this machine, "
                   "images built with the data set's layer sizes and sharing, pulled from "
                   "the cluster's registry through a per-node throttle) instead of fake "
                   "nodes and the kubelet stand-in; needs root and make node (default: 0)")
    p.add_argument("--registry-bandwidth", type=registry_bandwidth, default=32 << 20,
                   metavar="SIZE",
                   help="with --real-nodes: what each node may download from the registry "
                   "per wall second (default: 32MiB)")
    p.add_argument("--scale", type=float, default=1.0, metavar="X",
                   help="with --real-nodes: layer sizes built = the data set's x X (0 < X "
                   "<= 1; the webhook is told the data set's sizes; default: 1)")
    p.add_argument("--stand-in", dest="stand_in", action="store_true",
                   help="with --real-nodes: also run every scenario with the kubelet stand-in "
                   "on the same scenario (same node names, images and bandwidth, clock x1) "
                   "and report the two side by side")
    p.add_argument("--real-runs", type=Path, metavar="FILE",
                   help="with --real-nodes and --stand-in: take the real nodes' runs from FILE "
                   "(the --json of an earlier real-node evaluation of the same scenarios) and "
                   "run only the stand-in beside them")
    p.add_argument("--holdout-report", type=Path, metavar="DIR",
                   help="with --real-nodes: after each opted-in run, `layer-locality report` "
                   "on each webhook replica's /metrics into DIR (give the webhook a holdout: "
                   "--webhook-arg=--holdout --webhook-arg=0.5)")
    p.add_argument("--keep", action="store_true",
                   help="keep each run's directory (cluster logs, etcd data) under the "
                   "temporary directory instead of removing it")
    p.set_defaults(run=main)


def main(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    check_plot_dir(args.plot, PLOT_NAMES, args.replace_plots)
    try:
        return evaluate(args, env)
    except ModuleNotFoundError as exc:
        if missing_optional(exc, _OPTIONAL):
            raise ConfigError(f"{INSTALL_HINT} (missing module: {exc.name})") from exc
        raise


def evaluate(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Fake nodes with the kubelet stand-in, or with --real-nodes real ones (realcommand.py):
    one driver (driver.py) either way."""
    from webhook.evaluation.realcommand import check_options, evaluate_real

    if args.real_nodes:
        return evaluate_real(args, env)
    check_options(args)
    import logging
    import time

    from webhook.devcluster.binaries import kube_bin_dir, kube_version
    from webhook.devcluster.processes import ClusterError
    from webhook.evaluation.driver import StandInBackend, drive, finish, scenarios, settings
    from webhook.evaluation.run import check_binaries
    from webhook.serving.wiring import demo_catalog

    run_settings = settings(args)  # bad values are refused before anything starts
    catalog = demo_catalog()
    planned = scenarios(args, catalog)
    try:
        bin_dir = args.bin_dir or kube_bin_dir(env)
        check_binaries(bin_dir)
    except ClusterError as exc:
        raise ConfigError(str(exc)) from exc
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    meta = {
        "kubernetesVersion": kube_version() or bin_dir.parent.name.split("-")[0],
        "binDir": str(bin_dir), "clockScale": run_settings.pulls.clock_scale,
        "bandwidth": run_settings.pulls.bandwidth, "repeats": args.repeats,
        "seeds": list(args.seeds), "scenarios": list(args.scenarios),
        "nodes": len(planned[0].nodes) if planned else None,
        "webhookArgs": list(run_settings.webhook_args), "simulated": args.simulate,
        "webhookReplicas": run_settings.webhook_replicas, "splits": list(args.splits),
    }
    started = time.perf_counter()
    backend = StandInBackend(bin_dir, catalog, run_settings, args.simulate, args.write_traces)
    return finish(args, drive(planned, args.repeats, args.splits, backend), meta, started)
