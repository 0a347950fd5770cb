"""bench.controlplane's run on a cluster that is up, in its order: what the scheduler runs with,
the agents' objects and the running pods, the webhook replicas, the warm-up rounds, the rounds
of every mode (the order rotated each round), the product's own load on kube-apiserver, and the
restarts."""

from __future__ import annotations

import asyncio
import ssl
import threading
from typing import Any

import orjson

from bench.controlplane.api_load import ApiLoad
from bench.controlplane.apiclient import Api
from bench.controlplane.restarts import restart, restart_both
from bench.controlplane.rounds import round_of
from bench.controlplane.scraping import urls
from bench.controlplane.setup import Bench
from bench.controlplane.variants import modes, use_variant


async def run(bench: Bench) -> dict[str, Any]:
    plane = bench.cluster.plane
    # Replicas restart from threads at once; the state file has one writer at a time.
    lock, save = threading.Lock(), plane.save

    def locked_save() -> None:
        with lock:
            save()

    plane.save = locked_save
    api = Api(plane.server, plane.tls_context())
    insecure_ctx = plane.tls_context()
    insecure_ctx.check_hostname = False
    insecure_ctx.verify_mode = ssl.CERT_NONE
    insecure = Api(plane.server, insecure_ctx)
    try:
        # What the scheduler runs with, read back from it.
        configz = await insecure.request(
            "GET", "", server=urls(bench)["scheduler"].replace("/metrics", "/configz"))
        if isinstance(configz, bytes):
            configz = orjson.loads(configz)
        componentconfig = configz.get("componentconfig") or {}
        bench.result["scheduler_percentage_of_nodes_to_score"] = componentconfig.get(
            "percentageOfNodesToScore")
        bench.result["scheduler_client_qps"] = (componentconfig.get(
            "clientConnection") or {}).get("qps")
        bench.result["client_qps"] = bench.args.client_qps
        await bench.populate(api)
        await asyncio.to_thread(bench.start_webhooks)
        if bench.args.warmup:
            # Not recorded: the first pods after set-up meet cold caches and the tail of
            # the set-up's own work (the garbage collector's and the replicas' first sync).
            saved = bench.args.deployments
            bench.args.deployments = max(1, saved // 10)
            for mode in ("stock", "opted-in"):
                await round_of(bench, api, insecure, mode, -1)
            bench.args.deployments = saved
        rounds = []
        every = modes(bench.args)
        for r in range(bench.args.rounds):
            # Each round rotates the order, so no mode always follows the same one.
            shift = r % len(every)
            for mode in every[shift:] + every[:shift]:
                await asyncio.to_thread(use_variant, bench, mode)
                rounds.append(await round_of(bench, api, insecure, mode, r))
        await asyncio.to_thread(use_variant, bench, "opted-in")
        bench.result["rounds"] = rounds
        # What the terms and annotations were, for the record: the first 20 Deployments'.
        bench.result["patch_samples"] = [
            {"app": app, "terms": terms, "decision": decision}
            for app, (terms, decision) in sorted(bench.baked.items())[:20]]
        bench.result["api_load"] = await ApiLoad(bench, api).run()
        restarts = [await asyncio.to_thread(restart, bench, r % 2)
                    for r in range(bench.args.restarts)]
        bench.result["ready_after_restart_seconds"] = restarts
        print("ready after restart: " + ", ".join(f"{s:.1f}" for s in restarts) + " s",
              flush=True)
        both = [await asyncio.to_thread(restart_both, bench)
                for _ in range(bench.args.restarts_both)]
        bench.result["ready_after_restarting_both_seconds"] = both
        print("ready after restarting both: " + "; ".join(
            ", ".join(f"{s:.1f}" for s in pair) for pair in both) + " s", flush=True)
        if bench.agent_side is not None and bench.agent_side.renewer is not None:
            bench.result["renewer"] = await bench.agent_side.renewer_command("stats")
    finally:
        await api.close()
        await insecure.close()
    return bench.result
