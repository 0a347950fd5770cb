"""Decisions after faults, on the real control plane, with tests/kit/fault_harness.py: per fault,
how long it lasted; for the subject (the webhook the API server calls) and the reference (a
second replica), the seconds after the fault's end until every probe's answer equals the
truth (a replica started fresh afterwards) and stays so, how many answers carried a patch
unlike the truth (a decision from a wrong picture: must stay 0 for faults that do not change
the cluster) and how many were unpatched or unanswered (failing open); and the pods created
through the API server meanwhile: created, failed while the control plane itself was down,
failed calling the webhook (must be 0), denied (must be 0).

    python -m bench.served.faults [--faults subject-restart,apiserver-restart,...]
        [--settle-seconds S]

The faults: the subject killed (SIGKILL) and started again; both replicas killed and started
again at once; kube-apiserver restarted (its watch cache rebuilt: every watch ends, resumed or
relisted after 410 Gone); etcd restarted; the API server slow (the subject reads it through
tests/kit/delayproxy.py, which adds SLOW_SECONDS to every round trip for SLOW_FOR seconds); a node
holding the probes' base deleted and created again with the same name and no images; a node
agent restarted (its Lease not renewed for AGENT_RESTART_SECONDS) and stopped (until its Lease
has run out), written by tests/kit/fault_agent.py's stand-in.
"""

from __future__ import annotations

import argparse
import json
import shutil
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import asdict
from pathlib import Path

from tests.kit.fault_harness import FaultResult, Harness
from tests.kit.faults import (
    FAULTS,
    agent_holding_app,
    agent_restarted,
    agent_stopped,
    node_recreated,
)


def table(results: Sequence[FaultResult]) -> str:
    def seconds(value: float | None) -> str:
        return "never" if value is None else f"{value:.1f} s"

    lines = ["| fault | lasted | subject: converged after / unlike truth / unpatched / "
             "unanswered / relists | reference: the same | pods created / failed (control plane) / "
             "failed (webhook) / denied |", "|---|---|---|---|---|"]
    for r in results:
        s, ref = r.subject, r.reference
        lines.append(
            f"| {r.fault} | {r.seconds:.1f} s | {seconds(s.converged_after)} / {s.unlike_truth}"
            f" / {s.unpatched} / {s.unanswered} / {s.relists} | "
            f"{seconds(ref.converged_after)} / {ref.unlike_truth} / {ref.unpatched} / "
            f"{ref.unanswered} / {ref.relists} | {r.pods_created} / "
            f"{r.pods_failed_control_plane} / {r.pods_failed_webhook} / {r.pods_denied} |")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    from tests.integration.cluster_fixture import (
        APP_IMAGE,
        BASE_IMAGE,
        COLD,
        WARM,
        new_namespace,
        start_cluster,
    )

    parser = argparse.ArgumentParser(prog="python -m bench.served.faults", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--faults", default=",".join([*FAULTS, "node-recreated",
                                                      "agent-restarted", "agent-stopped"]))
    parser.add_argument("--settle-seconds", type=float, default=30.0)
    args = parser.parse_args(argv)
    root = Path(tempfile.mkdtemp(prefix="ll-bench-faults-"))
    cluster = start_cluster(root, ["--log-level", "info"])
    try:
        namespace = new_namespace(cluster, opted_in=True)
        harness = Harness(cluster, [APP_IMAGE, BASE_IMAGE, "docker.io/library/mariadb:10.10"],
                          namespace, args.settle_seconds)
        faults = {**FAULTS, "node-recreated": node_recreated(WARM[0])}
        results = []

        def record(name: str, inject: Callable[[Harness], None]) -> None:
            result = harness.run(name, lambda: inject(harness))
            print(json.dumps(asdict(result)), flush=True)
            results.append(result)

        try:
            chosen = args.faults.split(",")
            for name in chosen:
                if name in faults:
                    record(name, faults[name])
            if {"agent-restarted", "agent-stopped"} & set(chosen):
                agent = agent_holding_app(harness, COLD[0])
                try:
                    for name, make in (("agent-restarted", agent_restarted),
                                       ("agent-stopped", agent_stopped)):
                        if name in chosen:
                            record(name, make(agent))
                finally:
                    agent.close()
        finally:
            harness.close()
        print(table(results))
    finally:
        cluster.down()
        shutil.rmtree(root, ignore_errors=True)  # etcd's data, certificates, logs


if __name__ == "__main__":
    main()
