"""Stand-in node agents for bench.controlplane: one per fake node, writing what
webhook/agent writes, with the agent's ServiceAccount through a token bound to its node
(TokenRequest), so the component's ValidatingAdmissionPolicies judge every write as they
judge a real agent's.

- Layer labels (webhook/agent/labels.py): at set-up each Node gets `node_layer_labels` of
  the layers of its images (one JSON merge patch of its own keys, no read); in the
  label-churn window nodes gain a new image's layers (`churn_plan`) and patch again.
- Leases (webhook/agent/lease.py): created at set-up with `lease_body`, owned by the Node,
  then renewed every `renew_seconds(duration)` by an update carrying the last written
  resourceVersion (a 409 re-reads, a 404 creates). The renewals run in a process of their
  own for the whole run (`python -m bench.standin_agents`, driven over stdin by
  `RenewerProcess`), spread evenly: renewal j renews agent j mod n at j * period / n.
- The NodeLayers heartbeats of agents before Leases (a GET and a PUT of the whole object per
  node every resync), for the `--legacy-heartbeats` window.

The renewals share one connection pool where real agents hold a connection each: the API
server's cost per request is the same, its idle connections are not modelled."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import random
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from bench import report
from bench.cp_api import Api, ApiError
from webhook.core.layerlabels import LabelRule, label_changes, node_layer_labels
from webhook.core.layers import ImageLayers, Platform
from webhook.inventory.agentlease import (
    AGENT_NAMESPACE,
    LEASE_API_VERSION,
    lease_body,
    renew_seconds,
)

AGENT_ACCOUNT = "layer-locality-agent"  # manifests/components/node-agent/serviceaccount.yaml
FIELD_MANAGER = "layer-locality-agent"  # webhook/agent/kube.py's
USER_AGENT = "layer-locality-agent (bench stand-in)"
MERGE_PATCH = "application/merge-patch+json"
LEASES = f"/apis/{LEASE_API_VERSION}/namespaces/{AGENT_NAMESPACE}/leases"
TOKEN_SECONDS = 24 * 3600  # the whole run at 5,000 nodes, with room
CONFLICT_RETRIES = 3  # webhook/agent/lease.py's
MAX_IN_FLIGHT = 256  # a stalled API server delays renewals instead of piling them up
AMD64 = Platform.of("linux", "amd64")
RULE = LabelRule()  # the agent's defaults (labelMinMiB 16, maxLabels 64)


@dataclass
class StandIn:
    """One node's agent: who it is, what its node holds, what it last wrote."""

    name: str
    uid: str
    layers: dict[str, int]  # digest -> size: its containerd's layers (the node's images')
    labels: dict[str, str]  # the Node's labels as the API server last answered
    token: str = ""
    lease_version: str = ""  # resourceVersion of its last Lease write
    acquired: str = ""  # the Lease's acquireTime (MicroTime)


def image_layers(images: Sequence[ImageLayers]) -> dict[str, int]:
    """Every distinct layer of `images` (digest -> size), as the agent's pass collects them."""
    out: dict[str, int] = {}
    for image in images:
        manifest = image.for_platform(AMD64)
        if manifest is not None:
            out.update((layer.digest, layer.size) for layer in manifest.layers)
    return out


def stand_ins(items: Sequence[Mapping[str, Any]], uids: Mapping[str, str],
              by_ref: Mapping[str, ImageLayers]) -> list[StandIn]:
    """An agent per node item; its layers are those of the images in the node's status
    (`names[1]` is the tag the bench's catalog knows)."""
    out = []
    for item in items:
        name = item["metadata"]["name"]
        images = [by_ref[image["names"][1]] for image in item["status"]["images"]]
        out.append(StandIn(name, uids[name], image_layers(images),
                           dict(item["metadata"].get("labels") or {})))
    return out


def headers(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", "User-Agent": USER_AGENT}


async def agent_tokens(api: Api, names: Sequence[str], seconds: int = TOKEN_SECONDS,
                       ) -> list[str]:
    """A token of the agent's ServiceAccount bound to each node (TokenRequest)."""
    tokens: list[str] = []
    for k in range(0, len(names), 32):
        answers = await asyncio.gather(*(api.request(
            "POST", f"/api/v1/namespaces/{AGENT_NAMESPACE}/serviceaccounts/{AGENT_ACCOUNT}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": seconds, "boundObjectRef": {
                 "kind": "Node", "apiVersion": "v1", "name": name}}})
            for name in names[k:k + 32]))
        tokens += [a["status"]["token"] for a in answers]
    return tokens


async def _each(agents: Sequence[StandIn], work: Any, concurrency: int = 32) -> None:
    queue = iter(agents)

    async def worker() -> None:
        for agent in queue:
            await work(agent)

    await asyncio.gather(*(worker() for _ in range(concurrency)))


async def patch_labels(agent_api: Api, agent: StandIn, changes: Mapping[str, str | None],
                       ) -> int:
    """One merge patch of the node's labels (webhook/agent/kube.py's); the labels answered
    are the agent's from then on. Returns the patch's size in bytes."""
    body = {"metadata": {"labels": dict(changes)}}
    node = await agent_api.request(
        "PATCH", f"/api/v1/nodes/{agent.name}?fieldManager={FIELD_MANAGER}", body,
        content_type=MERGE_PATCH, headers=headers(agent.token))
    agent.labels = dict(node["metadata"].get("labels") or {})
    return len(orjson.dumps(body))


async def label_all(agent_api: Api, agents: Sequence[StandIn],
                    rule: LabelRule = RULE) -> dict[str, Any]:
    """Each agent's first pass: its node's layer labels as the rule gives them."""
    sizes: list[int] = []

    async def one(agent: StandIn) -> None:
        changes = label_changes(agent.labels, node_layer_labels(agent.layers, rule))
        if changes:
            sizes.append(await patch_labels(agent_api, agent, changes))

    await _each(agents, one)
    return {"patches": len(sizes), "patch_bytes_mean": sum(sizes) / max(len(sizes), 1),
            "labels_mean": sum(sum(1 for k in a.labels if k.startswith("layer-locality.io/"))
                               for a in agents) / max(len(agents), 1)}


def _now() -> datetime:
    return datetime.now(UTC)


async def create_leases(agent_api: Api, agents: Sequence[StandIn], duration: int) -> None:
    """Each agent's Lease, created as webhook/agent/lease.py creates it (owned by the Node)."""
    async def one(agent: StandIn) -> None:
        now = _now()
        written = await agent_api.request(
            "POST", f"{LEASES}?fieldManager={FIELD_MANAGER}",
            lease_body(agent.name, AGENT_NAMESPACE, duration, now, node_uid=agent.uid),
            headers=headers(agent.token))
        agent.lease_version = written["metadata"]["resourceVersion"]
        agent.acquired = written["spec"]["acquireTime"]

    await _each(agents, one)


# -- label churn -------------------------------------------------------------------------------

def churn_step(layers: Mapping[str, int], labels: Mapping[str, str], image: ImageLayers,
               rule: LabelRule = RULE) -> tuple[dict[str, int], dict[str, str | None]]:
    """A node holding `layers` pulls `image`: its layers after, and the label patch the agent
    sends (empty: its labels do not change: no new layer large enough, or all below the
    node's `max_labels` largest)."""
    after = dict(layers)
    after.update(image_layers([image]))
    return after, label_changes(labels, node_layer_labels(after, rule))


def churn_plan(agents: Sequence[StandIn], images: Sequence[ImageLayers], count: int,
               seed: int = 5, rule: LabelRule = RULE, tries: int = 20,
               ) -> list[tuple[int, ImageLayers]]:
    """`count` label changes: distinct nodes in a seeded order, each pulling an image that
    changes its labels (one that does not would cost no write: it is not a churn event)."""
    rng = random.Random(seed)
    order = list(range(len(agents)))
    rng.shuffle(order)
    plan: list[tuple[int, ImageLayers]] = []
    for k in order:
        if len(plan) >= count:
            break
        for _ in range(tries):
            image = images[rng.randrange(len(images))]
            if churn_step(agents[k].layers, agents[k].labels, image, rule)[1]:
                plan.append((k, image))
                break
    return plan


async def label_churn(agent_api: Api, agents: Sequence[StandIn],
                      plan: Sequence[tuple[int, ImageLayers]], rate: float, seconds: float = 0.0,
                      rule: LabelRule = RULE) -> dict[str, Any]:
    """The plan's patches, `rate` per second, evenly spaced, over at least `seconds` (a window
    at a low rate is as long as the others); each node's agent then holds the new layers and
    labels."""
    sizes: list[int] = []
    errors = 0
    started = time.monotonic()
    pending: list[asyncio.Task[None]] = []

    async def one(agent: StandIn, image: ImageLayers) -> None:
        nonlocal errors
        after, changes = churn_step(agent.layers, agent.labels, image, rule)
        try:
            sizes.append(await patch_labels(agent_api, agent, changes))
            agent.layers = after
        except Exception as exc:
            errors += 1
            if errors <= 2:
                print(f"label churn: {exc}", flush=True)

    for j, (k, image) in enumerate(plan):
        await asyncio.sleep(max(0.0, started + j / rate - time.monotonic()))
        pending.append(asyncio.create_task(one(agents[k], image)))
    await asyncio.gather(*pending)
    await asyncio.sleep(max(0.0, started + seconds - time.monotonic()))
    return {"label_patches": len(sizes), "label_patch_errors": errors,
            "label_patch_rate": rate,
            "label_patch_bytes_mean": sum(sizes) / max(len(sizes), 1)}


# -- the NodeLayers heartbeats of agents before Leases ------------------------------------------

async def legacy_heartbeats(agent_api: Api, path: str, objects: Sequence[dict[str, Any]],
                            tokens: Sequence[str], rate: float, seconds: float = 0.0,
                            ) -> dict[str, Any]:
    """Agents before Leases at steady state: each node's NodeLayers object rewritten once per
    resync period, spread evenly over time (`rate` per second, over at least `seconds`), as
    the agent's Publisher wrote it then (GET, then PUT with the read resourceVersion and a
    new heartbeat)."""
    written = errors = 0
    started = time.monotonic()
    pending: list[asyncio.Task[None]] = []

    async def publish(obj: dict[str, Any], bearer: str) -> None:
        nonlocal written, errors
        name = obj["metadata"]["name"]
        try:
            current = await agent_api.request("GET", f"{path}/{name}", headers=headers(bearer))
            body = dict(obj, metadata=dict(
                obj["metadata"], resourceVersion=current["metadata"]["resourceVersion"]),
                spec=dict(obj["spec"], heartbeat=_now().strftime("%Y-%m-%dT%H:%M:%SZ")))
            await agent_api.request("PUT", f"{path}/{name}", body, headers=headers(bearer))
            written += 1
        except Exception as exc:
            errors += 1
            if errors <= 2:
                print(f"agent stand-in: {exc}", flush=True)

    for k, (obj, bearer) in enumerate(zip(objects, tokens, strict=True)):
        await asyncio.sleep(max(0.0, started + k / rate - time.monotonic()))
        pending.append(asyncio.create_task(publish(obj, bearer)))
    await asyncio.gather(*pending)
    await asyncio.sleep(max(0.0, started + seconds - time.monotonic()))
    return {"agent_writes": written, "agent_errors": errors, "agent_rate": rate}


# -- Lease renewals (a process of their own) ----------------------------------------------------

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
        acquired = datetime.fromisoformat(agent.acquired.replace("Z", "+00:00")) \
            if agent.acquired else None
        return lease_body(agent.name, AGENT_NAMESPACE, self.duration, _now(),
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
        argv = [sys.executable, "-m", "bench.standin_agents", "--server", server, "--ca",
                str(ca), "--agents", str(state), "--duration", str(duration)]
        self.log = root / "standin-agents.log"
        with open(self.log, "ab") as err:
            self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                         stderr=err, cwd=Path(__file__).resolve().parent.parent,
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
    p = argparse.ArgumentParser(prog="python -m bench.standin_agents",
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
