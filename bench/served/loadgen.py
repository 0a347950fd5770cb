"""A load generator in its own process: aiohttp client, TLS verified against the benchmark CA,
keep-alive connections. `paced`: requests are scheduled at a fixed rate and latency counts
from the scheduled time (no coordinated omission); `closed`: N workers send back to back
(saturation). Bodies come from a JSON list; `@@SEQ@@` in a body becomes a request number.
`--patch-sizes`: also the size of each answer's JSONPatch (decoded bytes; off by default: a
JSON decode per answer costs this process CPU at high rates). Prints one JSON line of results.

    python -m bench.served.loadgen --url https://127.0.0.1:PORT/mutate --ca ca.crt --bodies FILE
        --mode paced --rate 500 --duration 10
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import ssl
import sys
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from bench import report


async def _run(args: argparse.Namespace, bodies: list[bytes]) -> dict[str, Any]:
    context = ssl.create_default_context(cafile=args.ca)
    connector = aiohttp.TCPConnector(ssl=context, limit=args.connections)
    headers = {"Content-Type": "application/json"}
    latency: list[float] = []
    service: list[float] = []
    statuses: dict[str, int] = {}
    errors: dict[str, int] = {}
    patched = 0
    patch_bytes: list[int] = []
    clock = time.perf_counter
    seq = 0

    async def one(scheduled: float, record: bool) -> None:
        nonlocal seq, patched
        seq += 1
        body = bodies[seq % len(bodies)].replace(b"@@SEQ@@", str(seq).encode())
        sent = clock()
        try:
            async with session.post(args.url, data=body, headers=headers) as response:
                answer = await response.read()
                status = response.status
        except Exception as exc:
            if record:
                errors[type(exc).__name__] = errors.get(type(exc).__name__, 0) + 1
            return
        done = clock()
        if record:
            latency.append(done - scheduled)
            service.append(done - sent)
            statuses[str(status)] = statuses.get(str(status), 0) + 1
            if b'"patch"' in answer:
                patched += 1
                if args.patch_sizes:
                    patch = orjson.loads(answer)["response"]["patch"]
                    patch_bytes.append(len(base64.b64decode(patch)))

    async with aiohttp.ClientSession(connector=connector) as session:
        for _ in range(min(50, args.connections)):  # open the connections (TLS handshakes)
            await one(clock(), record=False)
        started = clock()
        if args.mode == "paced":
            tasks = set()
            total = int(args.rate * (args.warmup + args.duration))
            warm = int(args.rate * args.warmup)
            for i in range(total):
                scheduled = started + i / args.rate
                delay = scheduled - clock()
                if delay > 0:
                    await asyncio.sleep(delay)
                task = asyncio.create_task(one(scheduled, record=i >= warm))
                tasks.add(task)
                task.add_done_callback(tasks.discard)
            await asyncio.gather(*tasks)
        else:
            stop_at = started + args.warmup + args.duration
            record_from = started + args.warmup

            async def worker() -> None:
                while (now := clock()) < stop_at:
                    await one(now, record=now >= record_from)

            await asyncio.gather(*(worker() for _ in range(args.connections)))
        elapsed = clock() - started - args.warmup
    ok = statuses.get("200", 0)
    sizes = sorted(patch_bytes)
    return {"patch_bytes": {"n": len(sizes), "p50": report.percentile(sizes, 50),
                            "max": sizes[-1]} if sizes else None,
            "mode": args.mode, "offered_rate": args.rate if args.mode == "paced" else None,
            "duration_s": elapsed, "completed": len(latency), "ok": ok, "patched": patched,
            "statuses": statuses, "errors": errors, "throughput_rps": len(latency) / elapsed,
            "latency": report.summary_ms(latency), "service": report.summary_ms(service),
            "connections": args.connections}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.served.loadgen")
    parser.add_argument("--url", required=True)
    parser.add_argument("--ca", required=True)
    parser.add_argument("--bodies", required=True)
    parser.add_argument("--mode", choices=("paced", "closed"), default="paced")
    parser.add_argument("--rate", type=float, default=500.0)
    parser.add_argument("--duration", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, default=2.0)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--patch-sizes", action="store_true",
                        help="the size of each answer's patch (decoded bytes): p50 and max")
    args = parser.parse_args(argv)
    bodies = [b.encode() for b in orjson.loads(Path(args.bodies).read_bytes())]
    result = asyncio.run(_run(args, bodies))
    sys.stdout.write(orjson.dumps(result).decode() + "\n")


if __name__ == "__main__":
    main()
