"""The stand-in API server (tests/kit/apiserver.py) as a process of its own, preloaded
with a synthetic cluster, so the inventory's memory is measured without it.

Nodes are held as objects (with `--pods`, each reports its running pods' images among its
50, largest first, as a kubelet does); pods (`--pods N`: pod k is running_pods.running_pod(k),
bound to node k % nodes) are not: 600,000 pod dicts would take gigabytes, so each list page
is generated again on demand from a generation counter per pod slot, plus the few pods in
the middle of a lifecycle. Watch events go through the event log as usual.

Extra routes for the benchmarks: POST /bench/burst?count=K emits K node changes then adds the
node `sentinel-<n>`; POST /bench/load?pods=P&nodes=M starts continuous load: P pod events/s
(pods replaced as a rollout does: deletion marked, containers terminated, deleted, created
unbound, bound, ContainerCreating, Running; plus status updates of running pods) and M node
events/s (nine in ten a status-only change, one in ten a changed image); GET /bench/stats
counts what was sent (a second POST /bench/load replaces the rates: 0 stops that kind).
`--accelerators` makes one node in ACCELERATOR_EVERY an accelerator node holding the large
synthetic family (tests/kit/accelerators.py) in its status and its NodeLayers object;
`--layer-labels` puts the agent's layer labels on every Node. The agents' Leases are not
served (no coordination.k8s.io here: the webhook finds none). `--events-per-second` emits
node changes from the start (half change the node's images). Prints `READY <port>` on stdout
once serving.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import random
import sys
import time
from array import array
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

from tests.kit import workload
from tests.kit.accelerators import node_accelerators
from tests.kit.running_pods import images_of, running_pod
from webhook.core.layers import ImageLayers

try:
    from tests.kit.apiserver import CUSTOM, KINDS, FakeApiServer
except ImportError as exc:  # pragma: no cover - run from the repository root
    raise SystemExit(
        f"bench needs the repository's tests package (run from the repo root): {exc}"
    ) from exc

_MAX_LOG = 20_000
_STATUS_SHARE = 0.3  # pod events that are status updates of running pods (probes, restarts)
_DELETED_AT = "2025-01-02T00:00:00Z"
Obj = dict[str, Any]
ACCELERATOR_EVERY = 4  # with --accelerators: one node in four holds the large family


class BenchApiServer(FakeApiServer):
    def __init__(self, world: workload.World, seed: int = 5) -> None:
        super().__init__()
        self.world = world
        self.rng = random.Random(seed)
        self.sentinels = 0
        self.node_count = 0
        self.pod_slots = 0
        self._generation = array("I")  # pod slot -> incarnation
        self._changed: dict[int, Obj | None] = {}  # slot -> mid-lifecycle pod (None: absent)
        self._steps: deque[Callable[[], None]] = deque()
        self.sent = {"pods": 0, "nodes": 0}
        self._load: asyncio.Task[None] | None = None
        self._sorted: dict[str, list[str]] = {}  # resource -> names in list order

    def preload(self, nodes: int, pods: int = 0, nodelayers: bool = False,
                layer_labels: bool = False) -> None:
        """Nodes present before anyone lists (no event log: a list returns them), `pods`
        running pods generated on demand, and with `nodelayers` a NodeLayers object per node
        (tests/kit/nodelayers_objects.py: 300 layers, public and private images). A world
        with accelerators (workload.build_world) puts them on the accelerator nodes; with
        `layer_labels` each Node carries the labels its agent would put on it."""
        self.version += 1
        self.node_count = nodes
        family = self.world.accelerators
        by_ref = {image.ref: image for image in self.world.images}
        for i, obj in enumerate(workload.node_objects(self.world, nodes)):
            obj["metadata"]["resourceVersion"] = str(self.version)
            if pods:
                obj["status"]["images"] = self._node_images(i, obj, pods)
            held = node_accelerators(family, i, ACCELERATOR_EVERY)
            if held:  # largest first, as the kubelet reports them: ahead of the rest
                obj["status"]["images"] = [*(_entry(image) for image in held),
                                           *obj["status"]["images"]][:workload.IMAGES_PER_NODE]
            if layer_labels:
                images = [by_ref[e["names"][1]] for e in obj["status"]["images"]]
                obj["metadata"]["labels"].update(workload.layer_labels(images))
            self.objects["nodes"][obj["metadata"]["name"]] = obj
        self.pod_slots = pods
        self._generation = array("I", bytes(4 * pods))
        if nodelayers:
            from tests.kit.nodelayers_objects import nodelayers_objects

            if family:  # each object kept on its own node: the family's nodes hold it
                for obj in nodelayers_objects(nodes, held=lambda i: node_accelerators(
                        family, i, ACCELERATOR_EVERY)):
                    obj["metadata"]["resourceVersion"] = str(self.version)
                    self.objects["nodelayers"][obj["metadata"]["name"]] = obj
                return
            names = sorted(self.objects["nodes"])
            for name, obj in zip(names, nodelayers_objects(nodes), strict=True):
                obj["metadata"]["name"] = obj["spec"]["nodeName"] = name
                obj["metadata"]["resourceVersion"] = str(self.version)
                self.objects["nodelayers"][name] = obj

    def _node_images(self, i: int, obj: Obj, pods: int) -> list[Obj]:
        """As the kubelet reports a node running pods: their images are on it (pulled to
        run them), so they are among its 50 images (largest first), the rest after them."""
        running: dict[str, Obj] = {}
        for k in range(i, pods, self.node_count):
            for image in images_of(self.world, k):
                running[image.ref] = _entry(image)
        names = {n for entry in running.values() for n in entry["names"]}
        rest = [e for e in obj["status"]["images"] if not names.intersection(e["names"])]
        ordered = sorted(running.values(), key=lambda e: -int(e["sizeBytes"]))
        return [*ordered, *rest][:workload.IMAGES_PER_NODE]

    # -- pods: generated, not stored ------------------------------------------------------

    def pod(self, k: int) -> Obj | None:
        if k in self._changed:
            return self._changed[k]
        return running_pod(self.world, k, self.node_count, self._generation[k])

    def _list(self, request: web.Request, resource: str) -> web.Response:
        offset = int(request.query.get("continue") or 0)
        limit = int(request.query.get("limit") or 0) or 1 << 30
        if resource in ("nodes", "nodelayers"):
            # As the base class does, but encoded with orjson and the names sorted once, not
            # per page: at 65,000 objects a sort and a json.dumps per page made the source
            # grow faster than the list (bench/served/growth.py measures it alone).
            names = self._names(resource)
            end = min(len(names), offset + limit)
            items = [self.objects[resource][name] for name in names[offset:end]]
            return _page(f"{KINDS[resource]}List", items, self.version, end < len(names), end,
                         len(names) - end, CUSTOM.get(resource, "v1"))
        if resource != "pods" or not self.pod_slots:
            return super()._list(request, resource)
        bound_only = request.query.get("fieldSelector", "") == "spec.nodeName!="
        end = min(self.pod_slots, offset + limit)
        items = [obj for obj in map(self.pod, range(offset, end)) if obj is not None
                 and (not bound_only or obj["spec"].get("nodeName"))]
        return _page("PodList", items, self.version, end < self.pod_slots, end,
                     None if bound_only else self.pod_slots - end)

    def _names(self, resource: str) -> list[str]:
        """The objects' names in list order, sorted again only after one was added or
        deleted (_record drops the cache; preload fills the store before any list)."""
        names = self._sorted.get(resource)
        if names is None:
            names = self._sorted[resource] = sorted(self.objects[resource])
        return names

    def _record(self, resource: str, kind: str, obj: Obj) -> None:
        super()._record(resource, kind, obj)
        if kind != "MODIFIED":  # a name added or gone
            self._sorted.pop(resource, None)

    def _pod_event(self, kind: str, k: int, obj: Obj) -> None:
        self.version += 1
        obj["metadata"] = {**obj["metadata"], "resourceVersion": str(self.version)}
        self._changed[k] = None if kind == "DELETED" else obj
        self.log.append((self.version, "pods", kind, obj))
        self._send("pods", {"type": kind, "object": obj})
        self.sent["pods"] += 1
        self._trim()

    def _replace_pod(self) -> None:
        """Queue one pod's replacement: the seven events a rollout causes for it."""
        k = self.rng.randrange(self.pod_slots)
        if k in self._changed:
            return
        gen = self._generation[k]
        old = running_pod(self.world, k, self.node_count, gen)

        old["metadata"] = {**old["metadata"], "deletionTimestamp": _DELETED_AT,
                           "deletionGracePeriodSeconds": 30}
        # A copy per event: the log keeps what each event said.
        gone = {**old, "status": {**old["status"], "containerStatuses": [
            {**status, "ready": False,
             "state": {"terminated": {"exitCode": 0, "reason": "Completed"}}}
            for status in old["status"]["containerStatuses"]]}}

        def marked() -> None:
            self._pod_event("MODIFIED", k, old)

        def terminated() -> None:
            self._pod_event("MODIFIED", k, gone)

        def deleted() -> None:
            self._pod_event("DELETED", k, dict(gone))
            self._generation[k] = gen + 1

        new = running_pod(self.world, k, self.node_count, gen + 1, phase="Pending")
        node = new["spec"]["nodeName"]

        def created() -> None:
            spec = {key: v for key, v in new["spec"].items() if key != "nodeName"}
            self._pod_event("ADDED", k, {**new, "spec": spec, "status": {
                "phase": "Pending", "qosClass": "Burstable"}})

        def bound() -> None:
            self._pod_event("MODIFIED", k, {**new, "status": {
                "phase": "Pending", "qosClass": "Burstable", "conditions": [
                    {"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                     "lastTransitionTime": _DELETED_AT}]}})
            assert new["spec"]["nodeName"] == node

        def creating() -> None:
            self._pod_event("MODIFIED", k, new)

        def running() -> None:
            self._pod_event("MODIFIED", k, running_pod(self.world, k, self.node_count, gen + 1))
            del self._changed[k]  # as generated again: running

        self._changed[k] = old
        self._steps.extend((marked, terminated, deleted, created, bound, creating, running))

    def _status_update(self) -> None:
        k = self.rng.randrange(self.pod_slots)
        if k in self._changed:
            return
        obj = running_pod(self.world, k, self.node_count, self._generation[k])
        obj["status"]["containerStatuses"][0]["restartCount"] = self.rng.randint(1, 5)
        self._pod_event("MODIFIED", k, obj)
        del self._changed[k]  # the generated pod stands for it again (restarts not kept)

    def pod_event(self) -> None:
        """One pod event of the continuous load."""
        if self.rng.random() < _STATUS_SHARE:
            self._status_update()
            return
        if not self._steps:
            self._replace_pod()
        if self._steps:
            self._steps.popleft()()

    # -- nodes ------------------------------------------------------------------------------

    def change_node(self, images_too: bool) -> None:
        name = self.rng.choice(list(self.objects["nodes"]))
        obj = copy.deepcopy(self.objects["nodes"][name])
        status = obj["status"]
        if images_too:
            image = self.rng.choice(self.world.apps)
            status["images"][-1] = {"names": list(workload.reported_names(image)),
                                    "sizeBytes": 1}
        status["conditions"][-1]["lastHeartbeatTime"] = f"2025-01-01T00:00:{self.version % 60:02d}Z"
        self.put("nodes", obj)
        self.sent["nodes"] += 1
        self._trim()

    def _trim(self) -> None:
        if len(self.log) > _MAX_LOG:
            del self.log[: _MAX_LOG // 2]
            self.compacted = self.log[0][0] - 1

    # -- control routes ---------------------------------------------------------------------

    def add_routes(self, app: web.Application) -> None:
        app.router.add_post("/bench/burst", self._burst)
        app.router.add_post("/bench/load", self._start_load)
        app.router.add_get("/bench/stats", self._stats)

    async def _burst(self, request: web.Request) -> web.Response:
        count = int(request.query.get("count", "1000"))
        for k in range(count):
            self.change_node(images_too=k % 2 == 0)
            if k % 100 == 99:
                await asyncio.sleep(0)  # let the watch streams write
        self.sentinels += 1
        name = f"sentinel-{self.sentinels}"
        self.put("nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {
            "name": name, "labels": {"kubernetes.io/hostname": name}}, "spec": {},
            "status": {"nodeInfo": {"operatingSystem": "linux", "architecture": "amd64"}}})
        return web.json_response({"sent": count, "sentinel": name})

    async def _start_load(self, request: web.Request) -> web.Response:
        pods = float(request.query.get("pods", "50"))
        nodes = float(request.query.get("nodes", "5"))
        if self._load is not None:  # new rates replace the running ones
            self._load.cancel()
            await asyncio.gather(self._load, return_exceptions=True)
        self._load = asyncio.create_task(self.load(pods, nodes))
        return web.json_response({"pods": pods, "nodes": nodes})

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response({**self.sent, "version": self.version})

    async def load(self, pod_rate: float, node_rate: float, tick: float = 0.02) -> None:
        """Continuous events at the given rates (paced on a clock, not on sleeps)."""
        started = time.monotonic()
        pods0, nodes0 = self.sent["pods"], self.sent["nodes"]  # counted since the last start
        while True:
            await asyncio.sleep(tick)
            elapsed = time.monotonic() - started
            while self.pod_slots and self.sent["pods"] - pods0 < pod_rate * elapsed:
                self.pod_event()
            while self.sent["nodes"] - nodes0 < node_rate * elapsed:
                self.change_node(images_too=self.rng.random() < 0.1)


def _entry(image: ImageLayers) -> Obj:
    """An image as a Node's status lists it."""
    layers = image.platforms[workload.AMD64].layers
    return {"names": list(workload.reported_names(image)),
            "sizeBytes": sum(layer.size for layer in layers)}


def _page(kind: str, items: list[Obj], version: int, more: bool, end: int,
          remaining: int | None = None, api_version: str = "v1") -> web.Response:
    """A list page; `remaining`: kube-apiserver's remainingItemCount (None: not given, as
    with a field selector)."""
    metadata: Obj = {"resourceVersion": str(version)}
    if more:
        metadata["continue"] = str(end)
        if remaining is not None:
            metadata["remainingItemCount"] = remaining
    body = orjson.dumps({"kind": kind, "apiVersion": api_version, "metadata": metadata,
                         "items": items})
    return web.Response(body=body, content_type="application/json")


def world_arguments(prog: str) -> argparse.ArgumentParser:
    """The arguments every stand-in API server process takes: what it holds."""
    parser = argparse.ArgumentParser(prog=prog)
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--pods", type=int, default=0, help="running pods (k on node k %% nodes)")
    parser.add_argument("--nodelayers", action="store_true", help="a NodeLayers object per node")
    parser.add_argument("--accelerators", action="store_true",
                        help=f"one node in {ACCELERATOR_EVERY} holds the large synthetic family")
    parser.add_argument("--layer-labels", action="store_true",
                        help="every Node carries its agent's layer labels")
    return parser


def serve_process(server: BenchApiServer, args: argparse.Namespace,
                  meanwhile: Callable[[], Awaitable[None]] | None = None) -> None:
    """Preload `server` as `args` say, serve it, print `READY <port>` for the parent, and run
    `meanwhile` (else wait) until the process is stopped."""
    async def serve() -> None:
        server.preload(args.nodes, args.pods, args.nodelayers, args.layer_labels)
        await server.start()
        print(f"READY {server.port}", flush=True)
        try:
            await (meanwhile() if meanwhile is not None else asyncio.Event().wait())
        finally:
            await server.stop()

    try:
        asyncio.run(serve())
    except KeyboardInterrupt:
        sys.exit(0)


def main(argv: list[str] | None = None) -> None:
    parser = world_arguments("python -m tests.kit.apiserver_process")
    parser.add_argument("--events-per-second", type=float, default=0.0)
    args = parser.parse_args(argv)
    server = BenchApiServer(workload.build_world(accelerators=args.accelerators))

    async def churn() -> None:
        interval, k = 1 / args.events_per_second, 0
        while True:
            await asyncio.sleep(interval)
            server.change_node(images_too=k % 2 == 0)
            k += 1

    serve_process(server, args, churn if args.events_per_second > 0 else None)


if __name__ == "__main__":
    main()
