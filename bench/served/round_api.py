"""The stand-in API server (tests/kit/apiserver_process.py's, a process of its own) with a pod
round on demand: what a replica's watches receive while 2,000 pods of 200 Deployments are created.

POST /bench/round?pods=N&rate=R&bind_ms=B emits, for pod i at i/R seconds, the pod created
unbound (ADDED: no nodeName, Pending, with the terms and decision annotation the webhook's
shipped shape writes: about 100 hostnames in 7 terms, 3.6 KB) and, B ms later, its bind
(MODIFIED: nodeName and the PodScheduled condition), as kube-scheduler's bind reaches a pod
watcher. `--heartbeats H` also rewrites H NodeLayers objects per second (the node agents'
resync at 5,000 nodes is 16.7/s), each a 47.6 KB event. GET /bench/round answers how many
pods were created and bound, and the time the round's last event was sent. Prints
`READY <port>` once serving.

    python -m bench.served.round_api --nodes 5000 --pods 50000 [--nodelayers --heartbeats 16.7]
"""

from __future__ import annotations

import asyncio
import copy
import time
from datetime import UTC, datetime
from typing import Any

import orjson
from aiohttp import web

from tests.kit import workload
from tests.kit.apiserver_process import BenchApiServer, serve_process, world_arguments
from tests.kit.running_pods import running_pod

TERM_WEIGHTS = (100, 86, 72, 58, 44, 30, 16)  # the shipped shape: up to 100 names, 7 terms
NAMES_PER_TERM = 14
Obj = dict[str, Any]


def steered(pod: Obj, k: int, nodes: int) -> Obj:
    """`pod` with the shipped shape's preferred terms and decision annotation."""
    names = [workload.node_name((k * 7 + j) % nodes)
             for j in range(len(TERM_WEIGHTS) * NAMES_PER_TERM)]
    terms = [{"weight": weight, "preference": {"matchExpressions": [{
        "key": "kubernetes.io/hostname", "operator": "In",
        "values": names[t * NAMES_PER_TERM:(t + 1) * NAMES_PER_TERM]}]}}
        for t, weight in enumerate(TERM_WEIGHTS)]
    top = [{"node": names[j], "bytes": 300_000_000 - j * 1_000_000} for j in range(5)]
    decision = orjson.dumps({"v": 1, "id": f"d-{k:x}", "podBytes": 320_000_000,
                             "meanBytes": 120_000_000, "preferredNodes": len(names),
                             "top": top, "terms": len(terms)}).decode()
    metadata = {**pod["metadata"], "annotations": {
        **pod["metadata"].get("annotations", {}), "layer-locality.io/decision": decision}}
    spec = {**pod["spec"], "affinity": {"nodeAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": terms}}}
    return {**pod, "metadata": metadata, "spec": spec}


class RoundApiServer(BenchApiServer):
    def __init__(self, world: workload.World, heartbeats: float = 0.0) -> None:
        super().__init__(world)
        self.heartbeats = heartbeats
        self.created = self.bound = 0
        self.last_sent = 0.0
        self._next_pod = 0  # round pods take slots after the running ones (never listed)
        self._round: asyncio.Task[None] | None = None
        self._beats: asyncio.Task[None] | None = None

    def add_routes(self, app: web.Application) -> None:
        super().add_routes(app)
        app.router.add_post("/bench/round", self._start_round)
        app.router.add_get("/bench/round", self._round_state)

    async def _start_round(self, request: web.Request) -> web.Response:
        pods = int(request.query.get("pods", "2000"))
        rate = float(request.query.get("rate", "100"))
        bind = float(request.query.get("bind_ms", "50")) / 1000
        if self._round is not None and not self._round.done():
            return web.json_response({"error": "a round is running"}, status=409)
        self._round = asyncio.create_task(self.round(pods, rate, bind))
        if self.heartbeats > 0 and self._beats is None:
            self._beats = asyncio.create_task(self.beat(self.heartbeats))
        return web.json_response({"pods": pods, "rate": rate})

    async def _round_state(self, request: web.Request) -> web.Response:
        done = self._round is not None and self._round.done()
        return web.json_response({"created": self.created, "bound": self.bound,
                                  "done": done, "last_sent": self.last_sent})

    async def round(self, pods: int, rate: float, bind: float, tick: float = 0.005) -> None:
        """Pod i created at i/rate s, bound `bind` s later (paced on a clock)."""
        loop = asyncio.get_running_loop()
        started = time.monotonic()
        first = self._next_pod
        self._next_pod += pods
        for i in range(pods):
            due = started + i / rate
            if (delay := due - time.monotonic()) > tick:
                await asyncio.sleep(delay)
            k = self.pod_slots + first + i
            pod = steered(running_pod(self.world, k, self.node_count, phase="Pending"), k,
                          self.node_count)
            spec = {key: v for key, v in pod["spec"].items() if key != "nodeName"}
            self._emit("ADDED", {**pod, "spec": spec, "status": {
                "phase": "Pending", "qosClass": "Burstable"}})
            self.created += 1
            loop.call_later(bind, self._bind, pod)
        await asyncio.sleep(bind + 0.1)

    def _bind(self, pod: Obj) -> None:
        self._emit("MODIFIED", {**pod, "status": {
            "phase": "Pending", "qosClass": "Burstable", "conditions": [
                {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                 "lastTransitionTime": "2025-01-02T00:00:00Z"}]}})
        self.bound += 1

    def _emit(self, kind: str, obj: Obj) -> None:
        # Not kept in the event log or the generated slots: a round's pods are never listed.
        self.version += 1
        obj["metadata"] = {**obj["metadata"], "resourceVersion": str(self.version)}
        self._send("pods", {"type": kind, "object": obj})
        self.last_sent = time.monotonic()

    async def beat(self, per_second: float) -> None:
        """NodeLayers objects rewritten with a new heartbeat, as each agent does every resync."""
        names = sorted(self.objects["nodelayers"])
        started, sent = time.monotonic(), 0
        while names:
            await asyncio.sleep(0.02)
            while sent < per_second * (time.monotonic() - started):
                obj = copy.deepcopy(self.objects["nodelayers"][names[sent % len(names)]])
                obj["spec"]["heartbeat"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                self.put("nodelayers", obj)
                self._trim()
                sent += 1


def main(argv: list[str] | None = None) -> None:
    parser = world_arguments("python -m bench.served.round_api")
    parser.add_argument("--heartbeats", type=float, default=0.0,
                        help="NodeLayers rewrites per second during a round")
    args = parser.parse_args(argv)
    serve_process(RoundApiServer(workload.build_world(), args.heartbeats), args)


if __name__ == "__main__":
    main()
