"""The stand-in agents' Lease renewals (standin_agents.py sets the agents up), in a process of
their own for the whole of a bench.controlplane run: `python -m
bench.controlplane.standin_renewer`, driven over stdin by `RenewerProcess`. Every agent's Lease
is renewed every `renew_seconds(duration)` as webhook/agent/lease.py renews it (an update
carrying the last written resourceVersion; a 409 re-reads, a 404 creates), spread evenly:
renewal j renews agent j mod n at j * period / n. The renewals share one connection pool where
real agents hold a connection each: the API server's cost per request is the same, its idle
connections are not modelled."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench import report
from bench.controlplane.apiclient import Api, ApiError
from bench.controlplane.standin_agents import (
    LEASES,
    MAX_IN_FLIGHT,
    StandIn,
    headers,
    now,
)
from webhook.agent.kube import FIELD_MANAGER
from webhook.agent.lease import CONFLICT_RETRIES
from webhook.inventory.agentlease import (
    AGENT_NAMESPACE,
    lease_body,
    parse_micro_time,
    renew_seconds,
)


def renewal_slot(j: int, agents: int, period: float) -> tuple[int, float]:
    """Renewal j: which agent, and when (seconds after the first). Every agent once per
    period, `agents / period` renewals a second, evenly spaced; agent k's renewals are one
    period apart."""
    return j % agents, j * period / agents


@dataclass
class RenewalStats:
    writes: int = 0
    conflicts: int = 0  # 409: re-read, retried
    recreated: int = 0  # 404: created again
    errors: dict[str, int] = field(default_factory=dict)  # by HTTP status ("none": no answer)
    paused_seconds: float = 0.0
    late: list[float] = field(default_factory=list)  # since the last report: behind schedule
    latency: list[float] = field(default_factory=list)  # since the last report: per renewal

    def report(self, elapsed: float) -> dict[str, Any]:
        """The counters so far, and lateness and latency since the last report (then reset)."""
        out = {k: v for k, v in asdict(self).items() if k not in ("late", "latency")}
        out["seconds"] = elapsed
        out["late_ms"] = report.summary_ms(self.late) if self.late else None
        out["latency_ms"] = report.summary_ms(self.latency) if self.latency else None
        self.late, self.latency = [], []
        return out


class Renewer:
    """The renewals of every agent's Lease, until stopped; `pause()` holds the schedule
    (each agent's next renewal then comes that much later: the idle window)."""

    def __init__(self, api: Api, agents: Sequence[StandIn], duration: int) -> None:
        self.api, self.agents, self.duration = api, agents, duration
        self.period = renew_seconds(duration)
        self.stats = RenewalStats()
        self.running = asyncio.Event()
        self.running.set()
        self._paused_at: float | None = None
        self._in_flight = asyncio.Semaphore(MAX_IN_FLIGHT)
        self._tasks: set[asyncio.Task[None]] = set()
        self.started = time.monotonic()

    def pause(self) -> None:
        if self._paused_at is None:
            self._paused_at = time.monotonic()
            self.running.clear()

    def resume(self) -> None:
        if self._paused_at is not None:
            self.stats.paused_seconds += time.monotonic() - self._paused_at
            self._paused_at = None
            self.running.set()

    async def run(self) -> None:
        j = 0
        while True:
            k, at = renewal_slot(j, len(self.agents), self.period)
            while True:
                await self.running.wait()
                due = self.started + self.stats.paused_seconds + at
                if (wait := due - time.monotonic()) > 0:
                    await asyncio.sleep(min(wait, 1.0))  # a pause meanwhile is seen within 1 s
                    continue
                if self.running.is_set():
                    break
            self.stats.late.append(time.monotonic() - due)
            await self._in_flight.acquire()
            task = asyncio.create_task(self.renew(self.agents[k]))
            self._tasks.add(task)
            task.add_done_callback(self._done)
            j += 1

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        self._in_flight.release()

    async def renew(self, agent: StandIn) -> None:
        """One renewal as webhook/agent/lease.py's LeaseRenewer.renew: update with the last
        written version; on a conflict read and retry, when absent create."""
        started = time.monotonic()
        path = f"{LEASES}/{agent.name}"
        try:
            for _ in range(CONFLICT_RETRIES):
                if not agent.lease_version:
                    current = await self.api.request("GET", path, headers=headers(agent.token),
                                                     ok=(200, 404))
                    if not isinstance(current, dict) or current.get("kind") != "Lease":
                        await self._create(agent)
                        return
                    agent.lease_version = current["metadata"]["resourceVersion"]
                try:
                    written = await self.api.request(
                        "PUT", f"{path}?fieldManager={FIELD_MANAGER}", self._body(agent),
                        headers=headers(agent.token))
                except ApiError as exc:
                    if exc.status == 409:
                        self.stats.conflicts += 1
                        agent.lease_version = ""
                        continue
                    if exc.status == 404:
                        await self._create(agent)
                        return
                    raise
                agent.lease_version = written["metadata"]["resourceVersion"]
                self.stats.writes += 1
                return
            raise ApiError(f"{CONFLICT_RETRIES} conflicts in a row", 409)
        except Exception as exc:
            status = str(exc.status) if isinstance(exc, ApiError) and exc.status else "none"
            self.stats.errors[status] = self.stats.errors.get(status, 0) + 1
            if sum(self.stats.errors.values()) <= 3:
                print(f"lease renewal {agent.name}: {exc!r}", file=sys.stderr, flush=True)
        finally:
            self.stats.latency.append(time.monotonic() - started)

    def _body(self, agent: StandIn) -> dict[str, Any]:
        acquired_at = parse_micro_time(agent.acquired or None)
        acquired = None if acquired_at is None else datetime.fromtimestamp(acquired_at, UTC)
        return lease_body(agent.name, AGENT_NAMESPACE, self.duration, now(),
                          node_uid=agent.uid, acquired=acquired,
                          resource_version=agent.lease_version or None)

    async def _create(self, agent: StandIn) -> None:
        agent.lease_version = ""
        written = await self.api.request("POST", f"{LEASES}?fieldManager={FIELD_MANAGER}",
                                         self._body(agent), headers=headers(agent.token))
        agent.lease_version = written["metadata"]["resourceVersion"]
        self.stats.recreated += 1
        self.stats.writes += 1


async def _serve(args: argparse.Namespace, agents: Sequence[StandIn]) -> None:
    """The renewer process: commands on stdin (pause, resume, stats, quit; each answered by
    one JSON line on stdout)."""
    api = Api(args.server, ssl.create_default_context(cafile=args.ca), limit=args.connections)
    renewer = Renewer(api, agents, args.duration)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def say(doc: Any) -> None:
        sys.stdout.write(orjson.dumps(doc).decode() + "\n")
        sys.stdout.flush()

    async def commands() -> None:
        while line := (await reader.readline()).decode().strip():
            if line == "pause":
                renewer.pause()
            elif line == "resume":
                renewer.resume()
            elif line == "quit":
                break
            say(renewer.stats.report(time.monotonic() - renewer.started) | {"command": line})
        stop.set()

    running = asyncio.create_task(renewer.run())
    reading = asyncio.create_task(commands())
    say({"ready": len(agents), "period": renewer.period,
         "rate": len(agents) / renewer.period})
    await stop.wait()
    running.cancel()
    reading.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await running
    if renewer._tasks:
        await asyncio.wait(renewer._tasks, timeout=10)
    say(renewer.stats.report(time.monotonic() - renewer.started) | {"command": "quit"})
    await api.close()


class RenewerProcess:
    """The renewer process, from the bench's side: started with the agents' tokens and
    Lease versions, driven over stdin, tracked by the cluster (cluster down stops it too)."""

    NAME = "standin-agents"

    def __init__(self, agents: Sequence[StandIn], server: str, ca: Path, duration: int,
                 root: Path, plane: Any = None) -> None:
        from webhook.devcluster.processes import Process, child_env, start_ticks

        state = root / "standin-agents.json"
        # Tokens: a throwaway cluster's, readable by this user alone all the same.
        fd = os.open(state, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as out:
            out.write(orjson.dumps([{"name": a.name, "uid": a.uid, "token": a.token,
                                     "lease_version": a.lease_version,
                                     "acquired": a.acquired} for a in agents]))
        argv = [sys.executable, "-m", "bench.controlplane.standin_renewer", "--server", server,
                "--ca", str(ca), "--agents", str(state), "--duration", str(duration)]
        self.log = root / "standin-agents.log"
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, cwd=Path(__file__).resolve().parents[2],
                                         env=child_env())
        self.plane = plane
        if plane is not None:
            plane.processes[self.NAME] = Process(self.NAME, self.proc.pid,
                                                 start_ticks(self.proc.pid) or -1,
                                                 tuple(argv), self.log)
            plane.save()
        self.ready = self._line()

    def _line(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the Lease renewer exited ({self.proc.poll()}); see {self.log}")
        doc: dict[str, Any] = orjson.loads(line)
        return doc

    def command(self, what: str) -> dict[str, Any]:
        """`pause`, `resume` or `stats`: the renewer's counters after it (blocking)."""
        assert self.proc.stdin is not None
        self.proc.stdin.write(what.encode() + b"\n")
        self.proc.stdin.flush()
        return self._line()

    def stop(self) -> dict[str, Any] | None:
        final = None
        with contextlib.suppress(Exception):
            final = self.command("quit")
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                stream.close()
        if self.plane is not None:
            self.plane.processes.pop(self.NAME, None)
            self.plane.save()
        return final


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.controlplane.standin_renewer",
                                description="the stand-in agents' Lease renewals (started by "
                                            "bench.controlplane; commands on stdin)")
    p.add_argument("--server", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--agents", required=True, help="JSON: name, uid, token, lease_version, "
                                                   "acquired per agent")
    p.add_argument("--duration", type=int, required=True, help="leaseDurationSeconds")
    p.add_argument("--connections", type=int, default=16)
    args = p.parse_args(argv)
    agents = [StandIn(a["name"], a["uid"], {}, {}, a["token"], a["lease_version"],
                      a["acquired"]) for a in orjson.loads(Path(args.agents).read_bytes())]
    asyncio.run(_serve(args, agents))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
