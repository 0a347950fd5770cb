"""A slow registry stub on 127.0.0.1 for the soak: answers the distribution API the resolver
uses (HEAD/GET manifests, GET config blobs) after a delay, for repositories whose name hashes
into the `found` share; everything else is 404 (a registry miss). Plain HTTP; the webhook is
started with `--registry-insecure 127.0.0.1:PORT`. Prints `READY <port>`."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import random

import orjson
from aiohttp import web

CONFIG = orjson.dumps({"architecture": "amd64", "os": "linux", "rootfs": {"type": "layers"}})
CONFIG_DIGEST = "sha256:" + hashlib.sha256(CONFIG).hexdigest()
MANIFEST_TYPE = "application/vnd.oci.image.manifest.v1+json"


def manifest_for(name: str) -> bytes:
    layers = [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip",
               "digest": "sha256:" + hashlib.sha256(f"{name} {k}".encode()).hexdigest(),
               "size": 10_000_000 * (k + 1)} for k in range(3)]
    return orjson.dumps({"schemaVersion": 2, "mediaType": MANIFEST_TYPE,
                         "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                                    "digest": CONFIG_DIGEST, "size": len(CONFIG)},
                         "layers": layers})


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tests.kit.slow_registry")
    parser.add_argument("--found", type=float, default=0.5, help="share of names that exist")
    parser.add_argument("--delay-ms", type=float, default=150.0, help="mean answer delay")
    args = parser.parse_args(argv)
    rng = random.Random(1)
    found: float = args.found
    manifests: dict[str, bytes] = {}
    counts = {"requests": 0, "found": 0, "missing": 0}

    def exists(repository: str) -> bool:
        return int(hashlib.sha256(repository.encode()).hexdigest()[:8], 16) / 2**32 < found

    async def manifest(request: web.Request) -> web.StreamResponse:
        counts["requests"] += 1
        await asyncio.sleep(rng.expovariate(1000 / args.delay_ms))
        repository, reference = request.match_info["repo"], request.match_info["ref"]
        if not exists(repository):
            counts["missing"] += 1
            return web.json_response({"errors": [{"code": "MANIFEST_UNKNOWN"}]}, status=404)
        counts["found"] += 1
        body = manifests.get(reference) or manifest_for(repository)
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        manifests[digest] = body
        headers = {"Docker-Content-Digest": digest, "Content-Type": MANIFEST_TYPE}
        if request.method == "HEAD":
            return web.Response(headers={**headers, "Content-Length": str(len(body))})
        return web.Response(body=body, headers=headers)

    async def blob(request: web.Request) -> web.Response:
        counts["requests"] += 1
        if request.match_info["digest"] != CONFIG_DIGEST:
            return web.Response(status=404)
        return web.Response(body=CONFIG, content_type="application/octet-stream")

    async def stats(request: web.Request) -> web.Response:
        return web.json_response(counts)

    async def base(request: web.Request) -> web.Response:
        return web.json_response({})

    async def serve() -> None:
        app = web.Application()
        app.router.add_route("*", "/v2/{repo:.+}/manifests/{ref}", manifest)
        app.router.add_get("/v2/{repo:.+}/blobs/{digest}", blob)
        app.router.add_get("/v2/", base)
        app.router.add_get("/bench/stats", stats)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(f"READY {runner.addresses[0][1]}", flush=True)
        await asyncio.Event().wait()

    asyncio.run(serve())


if __name__ == "__main__":
    main()
