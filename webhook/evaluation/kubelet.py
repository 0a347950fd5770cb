"""A kubelet stand-in for the fake nodes of the local cluster: the part of the kubelet that
placement depends on, played against the real API server.

When the scheduler binds a pod to one of its nodes it
- "pulls" the images (pulls.py: the layers the node lacks, serially per node, on a scaled
  clock), posting `Pulling` and `Pulled` events in the kubelet's own wording, so the webhook's
  outcome telemetry reads them unchanged;
- then sets the pod Running and Ready through the status subresource (Deployments roll);
- reports the node's images in `node.status.images` at the status updates (every
  `status_period` nominal seconds, as `nodeStatusUpdateFrequency`) once its image list has
  caught up with them (pulls.py), largest first, at most 50;
- finishes a graceful deletion at once (no containers to stop), as a kubelet does once they
  have exited.
Each pod's pulls are recorded (`starts`) for the evaluation; nothing here decides placement.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import logging
import secrets
import time
from collections.abc import Callable, Collection, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from webhook.evaluation.pulls import ImagePull, PullModel, pulled_message
from webhook.inventory.podstate import uid_key
from webhook.inventory.reflector import DELETED, Reflector
from webhook.inventory.reflector_terms import ReflectorSettings

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class PodStart:
    """One pod's start on a node; times are nominal seconds since the stand-in started."""

    namespace: str
    name: str
    uid: str
    node: str
    owner: str | None  # the controller's kind/name (ReplicaSet/web-5d8f...), None for bare pods
    bound: float
    ready: float
    pulls: tuple[ImagePull, ...]

    @property
    def bytes(self) -> int:
        return sum(p.bytes for p in self.pulls)

    @property
    def pull_seconds(self) -> float:
        """Bind -> every image on the node (0 when all were there)."""
        return self.ready - self.bound


def controller_of(metadata: Mapping[str, Any]) -> str | None:
    for ref in metadata.get("ownerReferences") or ():
        if ref.get("controller"):
            return f"{ref.get('kind')}/{ref.get('name')}"
    return None


def pod_images(spec: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(container name, image) in the order the kubelet ensures them: init containers first."""
    return [(str(c.get("name")), str(c.get("image")))
            for key in ("initContainers", "containers") for c in spec.get(key) or ()
            if c.get("image")]


def _stamp(now: dt.datetime | None = None) -> str:
    return (now or dt.datetime.now(dt.UTC)).strftime("%Y-%m-%dT%H:%M:%SZ")


class KubeletStandIn:
    """Runs `model` for `nodes` against the API server (`core`: a CoreV1Api); `run()` until
    cancelled."""

    def __init__(self, core: Any, model: PullModel, nodes: Collection[str], *,
                 status_period: float = 10.0, events: bool = True,
                 clock: Callable[[], float] = time.monotonic, writers: int = 4) -> None:
        self._core = core
        self.model = model
        self._nodes = frozenset(nodes)
        self._status_period = status_period
        self._events = events
        self._clock = clock
        self._t0 = clock()
        self._seen: dict[str, tuple[str, list[str]]] = {}  # uid -> (node, images)
        self._dirty: set[str] = set()
        self._pool = ThreadPoolExecutor(max_workers=writers, thread_name_prefix="kubelet")
        self._pending: set[asyncio.Future[Any]] = set()
        self._busy = 0  # pods whose pulls are not over
        self.starts: list[PodStart] = []
        self.ends: dict[str, float] = {}  # uid -> nominal time the pod was gone
        self.errors = 0

    # ---- the clock ---------------------------------------------------------------------------
    def now(self) -> float:
        """Nominal seconds since the start."""
        return (self._clock() - self._t0) * self.model.settings.clock_scale

    def _wall_delay(self, nominal_at: float) -> float:
        return max(0.0, (nominal_at - self.now()) / self.model.settings.clock_scale)

    @property
    def idle(self) -> bool:
        """No pull running or queued, no write in flight, no node status to report."""
        return self._busy == 0 and not self._pending and not self._dirty

    # ---- running -----------------------------------------------------------------------------
    async def run(self) -> None:
        reflector = Reflector(
            "pods (kubelet stand-in)",
            lambda **kw: self._core.list_pod_for_all_namespaces(
                field_selector="spec.nodeName!=", **kw),
            uid_key, self._pod_event, settings=ReflectorSettings(backoff_max=2.0))
        status = asyncio.create_task(self._status_loop())
        try:
            await reflector.run()
        finally:
            status.cancel()
            await asyncio.gather(status, return_exceptions=True)
            await self.flush()
            self._pool.shutdown(wait=True)

    async def flush(self) -> None:
        """Report every dirty node now and wait for the writes in flight."""
        await self._report_nodes()
        while self._pending:
            await asyncio.gather(*list(self._pending), return_exceptions=True)

    async def _status_loop(self) -> None:
        period = self._status_period / self.model.settings.clock_scale
        while True:
            await asyncio.sleep(period)
            await self._report_nodes()

    async def _report_nodes(self) -> None:
        dirty, self._dirty = self._dirty, set()
        now = self.now()
        for name in sorted(dirty):
            self._write(self._core.patch_node_status, name,
                        {"status": {"images": self.model.status_images(name, now)}})
            if self.model.behind(name, now):  # its image list has not caught up yet
                self._dirty.add(name)

    # ---- pods --------------------------------------------------------------------------------
    def _pod_event(self, kind: str, uid: str, obj: Mapping[str, Any] | None) -> None:
        if kind == DELETED or obj is None:
            self._gone(uid)
            return
        metadata = obj.get("metadata") or {}
        spec = obj.get("spec") or {}
        node = spec.get("nodeName")
        if node not in self._nodes:
            return
        if metadata.get("deletionTimestamp"):
            self._delete(metadata)
            return
        if uid in self._seen:
            return
        images = pod_images(spec)
        self._seen[uid] = (node, [image for _, image in images])
        phase = (obj.get("status") or {}).get("phase")
        if phase in ("Running", "Succeeded", "Failed"):
            return  # started before this stand-in (a relist): nothing to pull
        now = self.now()
        pulls = self.model.bind(node, [image for _, image in images], now)
        start = PodStart(str(metadata.get("namespace")), str(metadata.get("name")), uid, node,
                         controller_of(metadata), now, max([now, *(p.end for p in pulls)]),
                         tuple(pulls))
        self._busy += 1
        asyncio.get_running_loop().create_task(self._start(obj, start, images))

    async def _start(self, obj: Mapping[str, Any], start: PodStart,
                     containers: list[tuple[str, str]]) -> None:
        try:
            for (container, _), pull in zip(containers, start.pulls, strict=True):
                if not pull.known:
                    log.warning("kubelet stand-in: image %s of pod %s/%s is not in the "
                                "catalog: counted as present", pull.ref, start.namespace,
                                start.name)
                if not pull.present and pull.known:
                    await asyncio.sleep(self._wall_delay(pull.start))
                    self._event(obj, container, start.node, "Pulling",
                                f'Pulling image "{pull.ref}"')
                await asyncio.sleep(self._wall_delay(pull.end))
                self._event(obj, container, start.node, "Pulled", pulled_message(pull))
                if pull.bytes or not pull.present:
                    self._dirty.add(start.node)
            await asyncio.sleep(self._wall_delay(start.ready))
            self._write(self._core.patch_namespaced_pod_status, start.name, start.namespace,
                        {"status": _running_status(obj, start.node)})
            self.starts.append(start)
        finally:
            self._busy -= 1

    def _delete(self, metadata: Mapping[str, Any]) -> None:
        uid = str(metadata.get("uid"))
        if uid in self.ends:
            return
        self.ends[uid] = self.now()
        self._write(self._core.delete_namespaced_pod, metadata.get("name"),
                    metadata.get("namespace"),
                    body={"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})

    def _gone(self, uid: str) -> None:
        self.ends.setdefault(uid, self.now())
        seen = self._seen.pop(uid, None)
        if seen is not None:
            self.model.release(seen[0], seen[1], self.now())

    def _event(self, obj: Mapping[str, Any], container: str, node: str, reason: str,
               message: str) -> None:
        if not self._events:
            return
        metadata = obj.get("metadata") or {}
        stamp = _stamp()
        body = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": f"{metadata.get('name')}.{secrets.token_hex(8)}",
                         "namespace": metadata.get("namespace")},
            "involvedObject": {"apiVersion": "v1", "kind": "Pod", "name": metadata.get("name"),
                               "namespace": metadata.get("namespace"),
                               "uid": metadata.get("uid"),
                               "fieldPath": f"spec.containers{{{container}}}"},
            "reason": reason, "message": message, "type": "Normal",
            "source": {"component": "kubelet", "host": node},
            "firstTimestamp": stamp, "lastTimestamp": stamp, "count": 1,
            "reportingComponent": "kubelet", "reportingInstance": node,
        }
        self._write(self._core.create_namespaced_event, metadata.get("namespace"), body)

    # ---- writes ------------------------------------------------------------------------------
    def _write(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        """A write in the thread pool; failures are logged and counted (a pod deleted while
        it pulled answers 404: expected)."""
        def go() -> None:
            try:
                call(*args, _preload_content=False, **kwargs)
            except Exception as exc:  # the run goes on; the count is reported
                status = getattr(exc, "status", None)
                if status != 404:
                    self.errors += 1
                    log.warning("kubelet stand-in: %s failed: %s", call.__name__, exc)

        future = asyncio.get_running_loop().run_in_executor(self._pool, go)
        self._pending.add(future)
        future.add_done_callback(self._pending.discard)


def _running_status(obj: Mapping[str, Any], node: str) -> dict[str, Any]:
    stamp = _stamp()
    spec = obj.get("spec") or {}
    conditions = [{"type": kind, "status": "True", "lastTransitionTime": stamp}
                  for kind in ("PodReadyToStartContainers", "Initialized", "ContainersReady",
                               "Ready", "PodScheduled")]
    containers = [
        {"name": c.get("name"), "image": c.get("image"), "imageID": "", "ready": True,
         "started": True, "restartCount": 0,
         "containerID": f"containerd://{secrets.token_hex(32)}",
         "state": {"running": {"startedAt": stamp}}}
        for c in spec.get("containers") or ()
    ]
    return {"phase": "Running", "startTime": stamp, "hostIP": "127.0.0.1",
            "hostIPs": [{"ip": "127.0.0.1"}], "conditions": conditions,
            "containerStatuses": containers}
