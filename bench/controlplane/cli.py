"""The webhook on the real control plane (`python -m bench --only controlplane`, or
`python -m bench.controlplane [--nodes N] [--running-pods N] [--no-agent] ...`).

A local cluster as `layer-locality cluster up` makes it (etcd, kube-apiserver, kube-scheduler,
kube-controller-manager from hack/kube, their flags unchanged) with `--nodes` fake nodes in 3
zones, 50 images each from the real layer data (tests/kit/workload.py), `--running-pods` pods bound
to them, and the webhook as 2 replicas in live mode behind a TCP balancer
(tests/kit/tcp_balancer.py, as a Service's kube-proxy balances connections).

With the node agent running (the default; bench/controlplane/standin_agents.py stands in for
it on every node, with the agent's ServiceAccount, tokens bound to each node, through the
component's ValidatingAdmissionPolicies): a NodeLayers object per node written once, each Node
labelled with the agent's layer labels of its images' layers, and a Lease per node renewed
every third of its duration for the whole run, by a process of its own. `--no-agent`: none of
them, and the agent's component removed (the hostname fallback).

Then rounds of `--deployments` Deployments x `--replicas` replicas created at once, in a plain
namespace (stock) and in an opted-in one, alternating which goes first, the same Deployments
in the same order; each round's namespace is deleted before the next. Per round, from the
real components:

- pods/s from the first Deployment created to the last pod bound, and arrival -> bind latency
  (this process's pod watch);
- the webhook's admission duration and the pod-create latency, from kube-apiserver's /metrics;
- kube-scheduler's algorithm duration (filter + score), its NodeAffinity plugin's score time,
  and its CPU per pod (/proc);
- the pod watch bytes kube-apiserver sent (apiserver_watch_events_sizes, every watcher);
- CPU of every process; where the pods landed (bench/controlplane/placement.py): the
  telemetry's bind outcome of each steered pod, label and hostname terms, and bytes on the
  node against the best candidate's.

Then the product's own load on kube-apiserver (flow schemas matching the webhook's and the
node agent's ServiceAccounts, so that APF's metrics count their requests by identity): an
idle window (the Lease renewals held), a steady one (the renewals), a label-churn window per
`--label-churn` rate (nodes gaining an image's layer labels), the NodeLayers heartbeats of
agents before Leases (`--legacy-heartbeats`), and a relist of both replicas; and the time to
ready after restarting one replica. Writes bench/results/controlplane.json
(controlplane-no-agent.json with `--no-agent`)."""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import report
from bench.controlplane import runner, summary
from bench.controlplane.setup import Bench
from webhook.inventory.agentlease import DEFAULT_LEASE_SECONDS

NODES = 5_000
RUNNING_PODS = 50_000
DEPLOYMENTS = 200
REPLICAS = 10
ROUNDS = 2
STEADY_SECONDS = 60.0
# 1 % of the nodes a minute gain an image's layer labels: a 5,000-node cluster rolling out
# 200 Deployments x 10 replicas of new image versions an hour pulls on 0.7 % of its nodes a
# minute; a burst of new pods can patch at the bind rate while it lasts (--label-churn).
LABEL_CHURN_PERCENT = 1.0


def result_name(args: argparse.Namespace) -> str:
    """The results file's name: the two agent modes are separate runs, kept side by side."""
    return "controlplane" if args.agent else "controlplane-no-agent"


def run(quick: bool = False, argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse(argv if argv is not None else (_QUICK if quick else []))
    root = Path(tempfile.mkdtemp(prefix="ll-bench-cp-"))
    bench = Bench(args, root)
    try:
        bench.up()
        asyncio.run(runner.run(bench))
    finally:
        bench.close()
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    result = bench.result
    result.update(summary.summarize(result))
    result["machine"] = report.machine()
    result["code"] = report.source()
    print(summary.rounds_table(result.get("rounds", [])))
    return result


_QUICK = ["--nodes", "300", "--running-pods", "1000", "--deployments", "20", "--replicas", "5",
          "--rounds", "1", "--steady-seconds", "10", "--restarts", "1"]


def parse(argv: Sequence[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m bench.controlplane", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=NODES)
    p.add_argument("--running-pods", type=int, default=RUNNING_PODS)
    p.add_argument("--deployments", type=int, default=DEPLOYMENTS)
    p.add_argument("--replicas", type=int, default=REPLICAS)
    p.add_argument("--rounds", type=int, default=ROUNDS,
                   help="rounds of stock + opted in (the order alternates)")
    p.add_argument("--round-timeout", type=float, default=900.0)
    p.add_argument("--steady-seconds", type=float, default=STEADY_SECONDS,
                   help="length of each load window (the idle one at most the Lease's "
                        "duration less a renewal period and 20 s)")
    p.add_argument("--restarts", type=int, default=3)
    p.add_argument("--restarts-both", type=int, default=1,
                   help="times both replicas are restarted at once, after --restarts")
    p.add_argument("--no-agent", dest="agent", action="store_false",
                   help="no node agent: no NodeLayers, layer labels or Leases, its component "
                        "removed (the webhook's hostname fallback); results in "
                        "controlplane-no-agent.json")
    p.add_argument("--lease-seconds", type=int, default=DEFAULT_LEASE_SECONDS,
                   help="the agents' Lease duration; renewed every third of it")
    p.add_argument("--label-churn", type=float, action="append", default=None,
                   metavar="PERCENT",
                   help="a label-churn window with PERCENT of the nodes a minute gaining an "
                        f"image's layer labels (repeatable; default {LABEL_CHURN_PERCENT})")
    p.add_argument("--legacy-heartbeats", action="store_true",
                   help="also a window of the NodeLayers heartbeats of agents before Leases "
                        "(GET + PUT of the object per node every 300 s)")
    p.add_argument("--webhook-arg", action="append", default=[],
                   help="extra `serve` argument for both replicas (repeatable)")
    p.add_argument("--variant", action="append", default=[], metavar="NAME=ARGS",
                   help="another opted-in mode, the replicas restarted with these extra `serve` "
                        "arguments, e.g. lean='--max-nodes 16' (repeatable)")
    p.add_argument("--percentage-of-nodes-to-score", type=int, default=None, metavar="N",
                   help="kube-scheduler's percentageOfNodesToScore (default: its adaptive one)")
    p.add_argument("--client-qps", type=int, default=None, metavar="N",
                   help="kube-controller-manager's and kube-scheduler's API client QPS (burst "
                        "twice it; default: theirs, 20 and 50: the ReplicaSet controller then "
                        "sets the pods' rate)")
    p.add_argument("--profile-seconds", type=int, default=0, metavar="S",
                   help="kube-apiserver's CPU profile over the first S seconds of the first "
                        "stock, opted-in and baked rounds, in bench/results/controlplane-pprof/")
    p.add_argument("--baked", action="store_true",
                   help="also a mode in a plain namespace whose Deployments carry, in their "
                        "template, the terms and decision an opted-in review gave them: the "
                        "bigger pod's cost at the API server without the webhook call")
    p.add_argument("--no-warmup", dest="warmup", action="store_false",
                   help="leave out the unrecorded warm-up rounds")
    p.add_argument("--null", action="store_true",
                   help="also modes with null webhooks, behind the balancer and direct (the floor)")
    p.add_argument("--keep", action="store_true", help="keep the run's directory")
    args = p.parse_args(list(argv))
    if args.label_churn is None:
        args.label_churn = [] if not args.agent else [LABEL_CHURN_PERCENT]
    if not args.agent and (args.legacy_heartbeats or args.label_churn):
        p.error("--legacy-heartbeats and --label-churn need the agent (leave out --no-agent)")
    if args.lease_seconds < 15:
        p.error("--lease-seconds must be at least 15 (the product's minimum)")
    return args


def main(argv: list[str] | None = None) -> int:
    result = run(argv=argv if argv is not None else sys.argv[1:])
    path = report.write(result_name(parse(argv if argv is not None else sys.argv[1:])), result)
    print(report.targets_table([("controlplane", t) for t in result["targets"]]))
    print(f"-> {path}")
    return 0
