"""A digest of the webhook's decisions, to prove that a change of speed changed no decision.

Runs a fixed set of reviews through what `handle_mutate` does in process (parse_review,
Mutator.review, build_response, the orjson encode of the answer) and prints a SHA-256 of
every answer's bytes (the patch, base64, holds the annotation) with its result and reason,
per configuration and over all of them. Configurations, 5,000 nodes each:

- the handler bench's traffic (bench/inprocess/handler.py): distinct pods (the memo emptied
  before each review) and workload-shaped runs of replicas, with the spread guard (a sibling
  tracker and, for shaped traffic, binds simulated BIND_LAG reviews late, which change the
  index) and without it (a static inventory), for several seeds of the inventory and of the traffic;
- the same shaped traffic with the memo off (every review prepares afresh);
- the end-to-end bench's two shapes (bench/served/e2e_traffic.py) on a static inventory, as
  `serve --nodes` answers them, with fresh uids.

Run it on two commits and compare the last line:

    .venv/bin/python hack/decisions_digest.py [--quick]

(from a worktree of the other commit: copy this file there and run the same command in it; on a
commit before issue 48's move it was bench/decisions_digest.py there: `python -m
bench.decisions_digest [--quick]`).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import sys
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script from hack/

from bench.inprocess import handler
from bench.served import e2e_traffic
from tests.kit import workload
from webhook.config import STATIC_SHARE
from webhook.core.admission import build_response, parse_review
from webhook.core.scoring import ScoringPolicy
from webhook.inventory.memory import StaticInventory
from webhook.serving.mutate import Mutator

NODES = 5_000
SEEDS = ((11, 9), (12, 21), (13, 33))  # (inventory seed, traffic seed)


async def _digest(mutator: Mutator, requests: list[handler.Request], distinct: bool,
                  binder: handler.Binder | None) -> tuple[str, int, int]:
    """SHA-256 over the answers (and result, reason) of `requests` in order; (hex, patched,
    hostnames)."""
    sha = hashlib.sha256()
    patched = hostnames = 0
    for request in requests:
        if distinct:
            mutator.memo.clear()
        review = parse_review(request.body)
        outcome = await mutator.review(review)
        answer = orjson.dumps(build_response(review.uid, outcome.patch))  # as the server
        sha.update(answer)
        sha.update(f"|{outcome.result}|{outcome.reason}|{outcome.pod}\n".encode())
        patched += bool(outcome.patch)
        hostnames += sum(len(t.hostnames) for t in outcome.terms)
        if binder is not None:
            top = outcome.decision.top if outcome.decision is not None else None
            binder.reviewed(request, top.node.name if top is not None else None)
    return sha.hexdigest(), patched, hostnames


def _handler_configs(world: workload.World, bodies: list[bytes], count: int,
                     ) -> list[tuple[str, str, int, int]]:
    rows = []
    for (index_seed, traffic_seed), shaped, guard, memo in itertools.product(
            SEEDS, (False, True), (True, False), (True, False)):
        if not memo and not shaped:
            continue  # distinct traffic empties the memo anyway
        index = workload.build_index(world, NODES, seed=index_seed)
        owners = max(1, NODES * handler.PODS_PER_NODE // 3)
        tracker = handler._tracker(index, owners)
        mutator = Mutator((world.catalog,), StaticInventory(index), ScoringPolicy(),
                          siblings=tracker if guard else None,
                          memo_entries=2048 if memo else 0)
        requests = handler.traffic(mutator, bodies, owners, shaped, count, seed=traffic_seed)
        binder = handler.Binder(index, tracker, seed=traffic_seed) if shaped and guard else None
        digest, patched, hostnames = asyncio.run(_digest(mutator, requests, not shaped, binder))
        name = (f"handler seed={index_seed}/{traffic_seed} "
                f"{'shaped' if shaped else 'distinct'} {'live' if guard else 'static'}"
                f"{'' if memo else ' memo-off'}")
        rows.append((name, digest, patched, hostnames))
    return rows


def _e2e_configs(world: workload.World, count: int) -> list[tuple[str, str, int, int]]:
    """As `serve --nodes` answers them (a static inventory weighs by share 0,
    config.STATIC_SHARE), and by share 1 too."""
    rows = []
    index = workload.build_index(world, NODES)
    for shape in e2e_traffic.build(world, paced_pods=200):
        bodies = shape.saturation.bodies(count)
        requests = [handler.Request(body, "", "", frozenset()) for body in bodies]
        for share in (STATIC_SHARE, 1.0):
            mutator = Mutator((world.catalog,), StaticInventory(index), ScoringPolicy(share=share))
            digest, patched, hostnames = asyncio.run(_digest(mutator, requests, False, None))
            rows.append((f"e2e {shape.name} static share={share:g}", digest, patched, hostnames))
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python hack/decisions_digest.py",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="fewer reviews per configuration")
    args = parser.parse_args(argv)
    count = 300 if args.quick else 1_000
    started = time.perf_counter()
    world = workload.build_world()
    bodies = workload.review_bodies(world, 500)
    rows = _handler_configs(world, bodies, count) + _e2e_configs(world, count)
    total = hashlib.sha256()
    for name, digest, patched, hostnames in rows:
        print(f"{digest[:16]}  {name}: {patched} patched, {hostnames} hostnames")
        total.update(f"{name}={digest}\n".encode())
    print(f"{len(rows)} configurations x {count} reviews, "
          f"{time.perf_counter() - started:.0f} s")
    print(f"digest {total.hexdigest()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
