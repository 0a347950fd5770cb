"""Run the evaluation test's burst scenario opted in, again and again, and say for each run
the worst skew any ReplicaSet reached; for one past maxSkew (3), its pods in creation order
with the decision each carried and where it was bound. How the spread guard's spill under
load was found and checked (docs/evaluation.md, "Two replicas that see each other late").

    python hack/spill_repeat.py RUNS [--busy]

`--busy` keeps one core busy beside it (a loaded CI machine). Each run brings up a local
control plane (about 15 s) and takes it down."""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.integration.test_cluster_evaluation import CONFIG
from webhook.devcluster.binaries import kube_bin_dir
from webhook.evaluation.pulls import PullSettings
from webhook.evaluation.run import RunSettings, run_once
from webhook.evaluation.scenario import generate
from webhook.serving.wiring import demo_catalog

MAX_SKEW = 3


def _busy(until: float) -> None:
    while time.time() < until:
        pass


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", type=int)
    parser.add_argument("--busy", action="store_true", help="keep one core busy meanwhile")
    args = parser.parse_args()
    catalog = demo_catalog()
    scenario = generate(CONFIG, catalog.images())
    busy = None
    if args.busy:
        busy = multiprocessing.Process(target=_busy, args=(time.time() + 3600,), daemon=True)
        busy.start()
    spills = 0
    try:
        for run in range(args.runs):
            with tempfile.TemporaryDirectory() as work:
                settings = RunSettings(pulls=PullSettings(), work_dir=Path(work),
                                       settle_timeout=90.0, webhook_replicas=2, split="even")
                record = asyncio.run(run_once(kube_bin_dir(), scenario, catalog, "webhook", 0,
                                              settings))
            worst = 0
            for owner in sorted({str(s.owner) for s in record.starts}):
                per_node = Counter(s.node for s in record.starts if str(s.owner) == owner)
                counts = [per_node.get(n.name, 0) for n in scenario.nodes]
                skew = max(counts) - min(counts)
                worst = max(worst, skew)
                if skew > MAX_SKEW:
                    print(f"past maxSkew: {owner} {dict(per_node)}")
                    for pod in sorted((p for p in record.pods.values()
                                       if str(p.owner) == owner),
                                      key=lambda p: p.created):
                        print(f"  {pod.created:8.3f} {pod.name} -> {pod.node}: "
                              f"{json.dumps(pod.decision)}")
            spills += worst > MAX_SKEW
            print(f"run {run}: worst skew {worst}, reviews per replica "
                  f"{record.webhook_reviews}", flush=True)
    finally:
        if busy is not None:
            busy.terminate()
            busy.join()
    print(f"{spills} of {args.runs} runs past maxSkew")
    return 0


if __name__ == "__main__":
    sys.exit(main())
