"""Fake Nodes: Node objects that the real scheduler can place pods on, with no kubelet behind
them (as Kubernetes' scheduler_perf does).

A node is created from a NodeList item (the demo inventory or a test's) with its status in the
same POST (Ready, capacity, allocatable, nodeInfo, images: the API server keeps a new Node's
status), then the `node.kubernetes.io/not-ready:NoSchedule` taint that the TaintNodesByCondition
admission plugin puts on every new Node is removed with one PATCH setting the item's own taints,
since no node lifecycle controller will (it is disabled: with no heartbeat it would taint every
node unreachable). Nodes are made concurrently (CONCURRENCY requests in flight, aiohttp with the
given client's credentials): 5,000 nodes of 50 images take seconds, not minutes.

NodeList files are read with orjson, or libyaml (yaml.CSafeLoader) when they are YAML: PyYAML's
pure-Python loader takes minutes and gigabytes for a 5,000-node list."""

from __future__ import annotations

import asyncio
import datetime as dt
import ssl
import sys
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

import orjson
import yaml

from webhook.devcluster.processes import ClusterError
from webhook.yaml_document import one_document

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
DEFAULT_CAPACITY = {"cpu": "8", "memory": "32Gi", "pods": "110", "ephemeral-storage": "100Gi"}
# The labels the scheduler and the default spreading read; a node that lacks one gets it.
REQUIRED_LABELS = ("kubernetes.io/hostname", "kubernetes.io/os", "kubernetes.io/arch",
                   "topology.kubernetes.io/zone")
KUBELET_VERSION = "v1.37.2"
# Requests in flight while creating nodes: on 2 cores the API server and etcd are the limit
# well before this (docs/local-cluster.md has the measurements).
CONCURRENCY = 24
REQUEST_TIMEOUT = 60.0
# A list at least this long gets a progress line every PROGRESS_SECONDS and its timings.
BIG_LIST = 500
PROGRESS_SECONDS = 1.0


def node_body(item: Mapping[str, Any]) -> dict[str, Any]:
    """What POST /api/v1/nodes takes: metadata (name, labels, annotations) and spec."""
    meta = item.get("metadata") or {}
    name = meta["name"]
    labels = dict(meta.get("labels") or {})
    info = (item.get("status") or {}).get("nodeInfo") or {}
    labels.setdefault("kubernetes.io/hostname", name)
    labels.setdefault("kubernetes.io/os", info.get("operatingSystem", "linux"))
    labels.setdefault("kubernetes.io/arch", info.get("architecture", "amd64"))
    labels.setdefault("topology.kubernetes.io/zone", "local-a")
    body: dict[str, Any] = {"apiVersion": "v1", "kind": "Node",
                            "metadata": {"name": name, "labels": labels}}
    if meta.get("annotations"):
        body["metadata"]["annotations"] = dict(meta["annotations"])
    spec = {k: v for k, v in (item.get("spec") or {}).items()
            if k in ("taints", "unschedulable", "podCIDR")}
    if spec:
        body["spec"] = spec
    return body


def node_status(item: Mapping[str, Any], now: dt.datetime | None = None) -> dict[str, Any]:
    """The status a kubelet would report: the item's own fields, defaults for what it lacks,
    and a fresh Ready condition."""
    now = now or dt.datetime.now(dt.UTC)
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    given = dict(item.get("status") or {})
    labels = (item.get("metadata") or {}).get("labels") or {}
    capacity = {**DEFAULT_CAPACITY, **(given.get("capacity") or {})}
    allocatable = {**capacity, **(given.get("allocatable") or {})}
    info = {
        "machineID": "", "systemUUID": "", "bootID": "", "kernelVersion": "",
        "osImage": "fake node (layer-locality devcluster)",
        "containerRuntimeVersion": "containerd://fake", "kubeletVersion": KUBELET_VERSION,
        "kubeProxyVersion": "",
        "operatingSystem": labels.get("kubernetes.io/os", "linux"),
        "architecture": labels.get("kubernetes.io/arch", "amd64"),
        **(given.get("nodeInfo") or {}),
    }
    conditions = [
        {"type": kind, "status": "False", "reason": f"KubeletHas{reason}",
         "lastHeartbeatTime": stamp, "lastTransitionTime": stamp}
        for kind, reason in (("MemoryPressure", "SufficientMemory"),
                             ("DiskPressure", "NoDiskPressure"), ("PIDPressure", "SufficientPID"))
    ]
    conditions.append({"type": "Ready", "status": "True", "reason": "KubeletReady",
                       "message": "fake node: no kubelet, status set by layer-locality",
                       "lastHeartbeatTime": stamp, "lastTransitionTime": stamp})
    status: dict[str, Any] = {
        "capacity": capacity, "allocatable": allocatable, "nodeInfo": info,
        "conditions": conditions,
        "addresses": [{"type": "Hostname",
                       "address": labels.get("kubernetes.io/hostname",
                                             (item.get("metadata") or {})["name"])}],
        "images": list(given.get("images") or []),
    }
    return status


def without_not_ready(taints: Iterable[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    return [dict(t) for t in taints or () if t.get("key") != NOT_READY_TAINT]


# ---- reading a NodeList file ------------------------------------------------------------------

def read_node_list(path: Path) -> list[dict[str, Any]]:
    """The items of the NodeList in `path` (JSON or YAML); OSError if it cannot be read,
    ValueError with a one-line message naming `path` if it is not a NodeList."""
    return parse_node_list(path.read_bytes(), str(path))


def parse_node_list(data: bytes, source: str) -> list[dict[str, Any]]:
    """The items of a NodeList (`kubectl get nodes -o json|yaml` writes kind List, also
    taken); each must be a Node with a name, no name twice."""
    try:
        document: Any = orjson.loads(data)
    except orjson.JSONDecodeError:
        document = _yaml_document(data, source)
    return node_list_items(document, source)


def _yaml_document(data: bytes, source: str) -> Any:
    """The one YAML document of `data` (webhook.yaml_document.one_document); libyaml's loader when
    PyYAML has it (50 times faster than the pure-Python one)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return one_document(data, source, "NodeList", loader=loader)


def node_list_items(document: Any, source: str) -> list[dict[str, Any]]:
    expected = "expected a NodeList (kind NodeList or List, with items)"
    if document is None:
        raise ValueError(f"{source}: empty; {expected}")
    if not isinstance(document, dict):
        raise ValueError(f"{source}: not a NodeList but a {_json_type(document)}; {expected}")
    kind = document.get("kind")
    if kind == "Node":
        raise ValueError(f"{source}: one Node, not a NodeList; {expected}")
    if kind not in (None, "NodeList", "List"):
        raise ValueError(f"{source}: not a NodeList (kind {kind}); {expected}")
    if not isinstance(document.get("items"), list):
        raise ValueError(f"{source}: {f'a {kind}' if kind else 'an object'} with no list of "
                         f"items; {expected}")
    items: list[dict[str, Any]] = document["items"]
    seen: dict[str, int] = {}
    for i, item in enumerate(items):
        if not isinstance(item, dict) or item.get("kind", "Node") != "Node":
            what = (f"a {item.get('kind')}" if isinstance(item, dict)
                    else f"a {_json_type(item)}")
            raise ValueError(f"{source}: items[{i}] is {what}, not a Node")
        meta = item.get("metadata")
        name = meta.get("name") if isinstance(meta, dict) else None
        if not isinstance(name, str) or not name:
            raise ValueError(f"{source}: items[{i}] has no metadata.name")
        if name in seen:
            raise ValueError(f"{source}: node {name} twice (items[{seen[name]}] and "
                             f"items[{i}])")
        seen[name] = i
    return items


def _json_type(value: Any) -> str:
    return {list: "list", str: "string", int: "number", float: "number",
            bool: "boolean"}.get(type(value), type(value).__name__)


# ---- creating the nodes ----------------------------------------------------------------------

def create_nodes(core: Any, items: Iterable[Mapping[str, Any]], *,
                 concurrency: int = CONCURRENCY,
                 report: Callable[[str], None] | None = None) -> list[str]:
    """Create each node with its status, remove the not-ready taint; returns the names in the
    order of `items`. `core` is a kubernetes.client.CoreV1Api: its configuration (server,
    CA, client certificate or token) is what the requests use. `report` gets a progress line
    every second and the time taken, for lists of BIG_LIST nodes or more.

    ClusterError naming the node and the API server's message on the first failure; no new
    request starts after it (nodes already made stay: `cluster down` removes them with the
    rest)."""
    items = list(items)
    bodies = [node_body(item) for item in items]
    names: list[str] = [body["metadata"]["name"] for body in bodies]
    if not items:
        return names
    api = _Api.of(core)
    big = report is not None and len(items) >= BIG_LIST
    _run(_create_all(api, items, bodies, max(1, concurrency), report if big else None))
    return names


@dataclass(frozen=True)
class _Api:
    server: str
    context: ssl.SSLContext
    headers: Mapping[str, str]

    @classmethod
    def of(cls, core: Any) -> _Api:
        conf = core.api_client.configuration
        if getattr(conf, "refresh_api_key_hook", None) is not None:
            conf.refresh_api_key_hook(conf)
        if conf.verify_ssl:
            context = ssl.create_default_context(cafile=conf.ssl_ca_cert or None)
        else:
            context = ssl.create_default_context()
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        if conf.cert_file:
            context.load_cert_chain(conf.cert_file, conf.key_file or None)
        headers = {"Accept": "application/json"}
        token = conf.get_api_key_with_prefix("authorization")
        if token:
            headers["Authorization"] = token
        return cls(str(conf.host).rstrip("/"), context, headers)


class _Progress:
    def __init__(self, total: int) -> None:
        self.total = total
        self.done = 0
        self.started = time.monotonic()

    def line(self) -> str:
        seconds = time.monotonic() - self.started
        rate = self.done / seconds if seconds > 0 else 0.0
        return (f"fake nodes: {self.done}/{self.total} created in {seconds:.1f} s "
                f"({rate:.0f}/s)")


async def _create_all(api: _Api, items: Sequence[Mapping[str, Any]],
                      bodies: Sequence[dict[str, Any]], concurrency: int,
                      report: Callable[[str], None] | None) -> None:
    import aiohttp

    now = dt.datetime.now(dt.UTC)
    progress = _Progress(len(items))
    failures: list[BaseException] = []
    pending = iter(range(len(items)))
    connector = aiohttp.TCPConnector(limit=concurrency, ssl=api.context)
    timeout = aiohttp.ClientTimeout(total=REQUEST_TIMEOUT)

    async def worker(session: aiohttp.ClientSession) -> None:
        for i in pending:  # one iterator shared by every worker: each index taken once
            if failures:
                return
            try:
                await _create_one(session, api, items[i], bodies[i], now)
            except Exception as exc:
                failures.append(exc)
                return
            progress.done += 1

    async def tell() -> None:
        while True:
            await asyncio.sleep(PROGRESS_SECONDS)
            if report is not None:
                report(progress.line())

    async with aiohttp.ClientSession(connector=connector, timeout=timeout,
                                     headers=dict(api.headers)) as session:
        ticker = asyncio.create_task(tell())
        try:
            await asyncio.gather(*(worker(session) for _ in range(min(concurrency,
                                                                        len(items)))))
        finally:
            ticker.cancel()
    if failures:
        first = failures[0]
        if isinstance(first, ClusterError):
            raise first
        raise ClusterError(f"creating fake nodes failed: {type(first).__name__}: "
                           f"{first}") from first
    if report is not None:
        report(progress.line())


async def _create_one(session: Any, api: _Api, item: Mapping[str, Any], body: dict[str, Any],
                      now: dt.datetime) -> None:
    """POST the node with its status, then PATCH its taints to the item's own if the API server
    added the not-ready taint (TaintNodesByCondition does, on every create), without reading
    the node: the POST's answer shows the taints. Should a server not keep a new Node's status
    (v1.37 does: the node strategy's PrepareForCreate leaves it), it is written through the
    status subresource."""
    import aiohttp

    name = body["metadata"]["name"]
    status = node_status(item, now)
    try:
        created = await _request(session, "POST", f"{api.server}/api/v1/nodes",
                                 {**body, "status": status}, name, "create")
        path = f"{api.server}/api/v1/nodes/{quote(name, safe='')}"
        if not (created.get("status") or {}).get("conditions"):
            await _request(session, "PATCH", f"{path}/status", {"status": status}, name,
                           "write the status of")
        own = without_not_ready((body.get("spec") or {}).get("taints"))
        if ((created.get("spec") or {}).get("taints") or []) != own:
            # Node.spec.taints has no merge key: a merge patch replaces the whole list.
            await _request(session, "PATCH", path, {"spec": {"taints": own or None}}, name,
                           "remove the not-ready taint of")
    except (aiohttp.ClientError, TimeoutError) as exc:
        raise ClusterError(f"node {name}: no answer from the API server {api.server}: "
                           f"{type(exc).__name__}: {exc}") from exc


async def _request(session: Any, method: str, url: str, body: Mapping[str, Any], name: str,
                   what: str) -> dict[str, Any]:
    content_type = "application/json" if method == "POST" else "application/merge-patch+json"
    async with session.request(method, url, data=orjson.dumps(body),
                               headers={"Content-Type": content_type}) as response:
        data = await response.read()
        if response.status >= 300:
            raise ClusterError(f"could not {what} node {name}: HTTP {response.status}: "
                               f"{_message(data)}")
    answer: dict[str, Any] = orjson.loads(data)
    return answer


def _message(data: bytes) -> str:
    """The message of a Status the API server answers with, else the body's start."""
    try:
        status = orjson.loads(data)
    except orjson.JSONDecodeError:
        return data[:300].decode(errors="replace").strip() or "(no body)"
    if isinstance(status, dict) and status.get("message"):
        return str(status["message"])
    return data[:300].decode(errors="replace")


T = TypeVar("T")


def _run(coroutine: Coroutine[Any, Any, T]) -> T:
    """Run to the end here, or in a thread of its own when this thread runs an event loop."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coroutine)
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coroutine).result()


def stderr_report(line: str) -> None:
    print(line, file=sys.stderr, flush=True)
