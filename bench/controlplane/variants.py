"""The modes of bench.controlplane's rounds and what each runs against: stock and opted-in on
the replicas with the shipped settings, null webhooks in their place (--null), the baked
Deployments (--baked), and each --variant's replicas restarted with its extra `serve`
arguments."""

from __future__ import annotations

import argparse

from bench.controlplane.balancer import NULL_MODES
from bench.controlplane.restarts import restart
from bench.controlplane.setup import Bench


def modes(args: argparse.Namespace) -> list[str]:
    """Every mode a round runs in, in the first round's order."""
    return ["stock", "opted-in", *(NULL_MODES if args.null else ()),
            *(["baked"] if args.baked else []), *(v.split("=", 1)[0] for v in args.variant)]


def use_variant(bench: Bench, mode: str) -> None:
    """Restart the replicas with the variant's extra `serve` arguments when they differ
    from the ones they run with (stock and opted-in: the shipped settings)."""
    balancer = bench.balancer
    assert balancer is not None, "the replicas start (and the balancer) before any round"
    backends = mode if mode in NULL_MODES else "replicas"
    if backends != balancer.backends:
        if balancer.backends in NULL_MODES:
            balancer.stop_null(bench.replica_ports)
        if backends in NULL_MODES:
            balancer.start_null(direct=backends == "null-direct")
        balancer.backends = backends
    if mode in ("stock", "baked") or mode in NULL_MODES:
        return  # the replicas serve no review: whatever they run with stays
    variants = dict(v.split("=", 1) for v in bench.args.variant)
    wanted = tuple(variants[mode].split()) if mode in variants else ()  # opted-in: shipped
    if wanted == bench.replica_args:
        return
    bench.replica_args = wanted
    for i in range(len(bench.replica_ports)):
        restart(bench, i)
