"""Stand-in node agents for bench.controlplane: one per fake node, writing what
webhook/agent writes, with the agent's ServiceAccount through a token bound to its node
(TokenRequest), so the component's ValidatingAdmissionPolicies judge every write as they
judge a real agent's.

- Layer labels (webhook/agent/labels.py): at set-up each Node gets `node_layer_labels` of
  the layers of its images (one JSON merge patch of its own keys, no read); in the
  label-churn window nodes gain a new image's layers (`churn_plan`) and patch again.
- Leases (webhook/agent/lease.py): created at set-up with `lease_body`, owned by the Node,
  then renewed every `renew_seconds(duration)` by an update carrying the last written
  resourceVersion (a 409 re-reads, a 404 creates): standin_renewer.py, a process of
  its own for the whole run.
- The NodeLayers heartbeats of agents before Leases (a GET and a PUT of the whole object per
  node every resync), for the `--legacy-heartbeats` window."""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

from bench.controlplane.apiclient import Api
from webhook.agent.kube import FIELD_MANAGER
from webhook.core.layerlabels import LabelRule, label_changes, node_layer_labels
from webhook.core.layers import ImageLayers, Platform
from webhook.inventory.agentlease import (
    AGENT_NAMESPACE,
    LEASE_API_VERSION,
    lease_body,
)

AGENT_ACCOUNT = "layer-locality-agent"  # manifests/components/node-agent/serviceaccount.yaml
USER_AGENT = "layer-locality-agent (bench stand-in)"
MERGE_PATCH = "application/merge-patch+json"
LEASES = f"/apis/{LEASE_API_VERSION}/namespaces/{AGENT_NAMESPACE}/leases"
TOKEN_SECONDS = 24 * 3600  # the whole run at 5,000 nodes, with room
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


def now() -> datetime:
    return datetime.now(UTC)


async def create_leases(agent_api: Api, agents: Sequence[StandIn], duration: int) -> None:
    """Each agent's Lease, created as webhook/agent/lease.py creates it (owned by the Node)."""
    async def one(agent: StandIn) -> None:
        written = await agent_api.request(
            "POST", f"{LEASES}?fieldManager={FIELD_MANAGER}",
            lease_body(agent.name, AGENT_NAMESPACE, duration, now(), node_uid=agent.uid),
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
                spec=dict(obj["spec"], heartbeat=now().strftime("%Y-%m-%dT%H:%M:%SZ")))
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
