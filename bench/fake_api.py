"""The stand-in API server (bench/stand_in_apiserver.py) as a process of
its own, preloaded with a synthetic cluster, so the inventory's memory is measured without it.

Extra routes for the benchmarks: POST /bench/burst?count=K emits K node changes then adds the
node `sentinel-<n>`; `--events-per-second` emits node changes continuously (half change the
node's images, half only its heartbeat). Prints `READY <port>` on stdout once serving.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import random
import sys

from aiohttp import web

from bench import workload

try:
    from bench.stand_in_apiserver import FakeApiServer
except ImportError as exc:  # pragma: no cover - run from the repository root
    raise SystemExit(
        f"bench needs the repository's tests package (run from the repo root): {exc}"
    ) from exc

_MAX_LOG = 20_000


class BenchApiServer(FakeApiServer):
    def __init__(self, world: workload.World, seed: int = 5) -> None:
        super().__init__()
        self.world = world
        self.rng = random.Random(seed)
        self.sentinels = 0

    def preload(self, nodes: int) -> None:
        """Nodes present before anyone lists (no event log: a list returns them)."""
        self.version += 1
        for obj in workload.node_objects(self.world, nodes):
            obj["metadata"]["resourceVersion"] = str(self.version)
            self.objects["nodes"][obj["metadata"]["name"]] = obj

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
        self._trim()

    def _trim(self) -> None:
        if len(self.log) > _MAX_LOG:
            del self.log[: _MAX_LOG // 2]
            self.compacted = self.log[0][0] - 1

    async def start(self) -> None:
        # As FakeApiServer.start, plus the benchmark's control route.
        app = web.Application()
        app.router.add_get("/api/v1/nodes", self._handle("nodes"))
        app.router.add_get("/api/v1/pods", self._handle("pods"))
        app.router.add_post("/bench/burst", self._burst)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

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


async def _serve(args: argparse.Namespace) -> None:
    server = BenchApiServer(workload.build_world())
    server.preload(args.nodes)
    await server.start()
    print(f"READY {server.port}", flush=True)
    try:
        if args.events_per_second > 0:
            interval = 1 / args.events_per_second
            k = 0
            while True:
                await asyncio.sleep(interval)
                server.change_node(images_too=k % 2 == 0)
                k += 1
        else:
            await asyncio.Event().wait()
    finally:
        await server.stop()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fake_api")
    parser.add_argument("--nodes", type=int, default=5000)
    parser.add_argument("--events-per-second", type=float, default=0.0)
    args = parser.parse_args(argv)
    try:
        asyncio.run(_serve(args))
    except KeyboardInterrupt:
        sys.exit(0)


if __name__ == "__main__":
    main()
