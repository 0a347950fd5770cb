"""A stand-in for the Kubernetes API server, for the live-inventory tests and the benchmarks
(it lives in the test kit, tests/kit/, which the benchmarks import too).

Why it still exists beside the real control plane (hack/kube, `make cluster`, the tests marked
`controlplane`): it produces on demand what a real kube-apiserver cannot be made to do in a
test — a `410 Gone` at a chosen moment, a watch stream dropped or closed at once, a slow or
huge list (the 5,000-node benchmarks), a NodeLayers CRD that is absent — and it starts in
milliseconds for the benchmarks. Everything the API server itself decides (admission chain,
selectors and matchConditions, dry run, RBAC, the CRD schema, the ValidatingAdmissionPolicy,
real binds by kube-scheduler, watches across restarts) is tested on the real one.

This aiohttp server on 127.0.0.1 speaks the subset of the list/watch protocol the inventory
uses: JSON lists with `resourceVersion` and
`limit`/`continue` pagination; chunked watch streams of ADDED/MODIFIED/DELETED/BOOKMARK/ERROR
events replayed from an event log after the requested resourceVersion; `410 Gone` (as an ERROR
event) for a version older than the last compaction; and faults on demand (dropped streams,
empty streams, error statuses such as an HTTP 410 for an expired `continue` token).
The real `kubernetes` client talks to it through a generated kubeconfig with a bearer token.
Resources: nodes, pods (a list honours `fieldSelector=spec.nodeName!=`), and core/v1 events
(list and watch honour `fieldSelector=reason=X`, as the outcome telemetry asks for `Pulled`),
and the cluster-scoped custom resource `nodelayers` (layer-locality.io/v1alpha1): list, watch,
get, create (POST) and replace (PUT, optimistic concurrency on resourceVersion: 409 on a
mismatch), as the node agent and the webhook use it. `crd_installed = False` answers 404 on
every nodelayers path, as an API server without the CRD does.
"""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import orjson
import yaml
from aiohttp import web

TOKEN = "fake-apiserver-token"
Obj = dict[str, Any]
RESOURCES = ("nodes", "pods", "events", "nodelayers")
KINDS = {"nodes": "Node", "pods": "Pod", "events": "Event", "nodelayers": "NodeLayers"}
CUSTOM = {"nodelayers": "layer-locality.io/v1alpha1"}  # resource -> group/version


class FakeApiServer:
    def __init__(self) -> None:
        self.objects: dict[str, dict[str, Obj]] = {r: {} for r in RESOURCES}
        self.log: list[tuple[int, str, str, Obj]] = []  # rv, resource, type, object
        self.version = 100
        self.compacted = 0
        self.list_calls: dict[str, int] = dict.fromkeys(RESOURCES, 0)
        self.watch_calls: dict[str, int] = dict.fromkeys(RESOURCES, 0)
        self.unauthorised = 0
        self.queries: dict[str, list[dict[str, str]]] = {r: [] for r in RESOURCES}  # per request
        self._faults: dict[tuple[str, str], list[int]] = {}  # (resource, verb) -> statuses
        self.close_watches_at_once = False  # fault: every watch ends with no event
        self.crd_installed = True  # False: every nodelayers path answers 404
        # The service proxy's answers: "NS/SERVICE/PATH" -> (status, text).
        self.proxied: dict[str, tuple[int, str]] = {}
        self.writes: dict[str, list[tuple[str, str]]] = {r: [] for r in RESOURCES}  # verb, name
        # (resource, queue, field selector); b"": end, None: drop
        self._streams: list[tuple[str, asyncio.Queue[bytes | None], str]] = []
        self.port = 0
        self._runner: web.AppRunner | None = None
        self.custom: dict[str, dict[str, Obj]] = {}  # plural -> name -> object
        self._custom_types: list[tuple[str, str, str]] = []

    # -- control, used by tests ---------------------------------------------------------

    def put(self, resource: str, obj: Obj) -> None:
        name = _name(resource, obj)
        kind = "MODIFIED" if name in self.objects[resource] else "ADDED"
        self._record(resource, kind, obj)

    def delete(self, resource: str, name: str) -> None:
        obj = self.objects[resource].get(name)
        if obj is not None:
            self._record(resource, "DELETED", obj)

    def compact(self) -> None:
        """Forget history: watches from an older resourceVersion now get 410 Gone."""
        self.compacted = self.version

    def send_gone(self, resource: str) -> None:
        status = {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                  "message": "too old resource version", "reason": "Expired", "code": 410}
        self._send(resource, {"type": "ERROR", "object": status})
        for r, queue, _ in self._streams:
            if r == resource:
                queue.put_nowait(b"")  # the API server ends a watch after an ERROR event

    def bookmark(self, resource: str) -> None:
        self.version += 1
        self._send(resource, {"type": "BOOKMARK", "object": {
            "kind": KINDS[resource], "apiVersion": CUSTOM.get(resource, "v1"),
            "metadata": {"resourceVersion": str(self.version)}}})

    def drop_streams(self) -> None:
        """End every open watch stream abruptly, as a network fault or apiserver restart."""
        for _, queue, _ in self._streams:
            queue.put_nowait(None)

    def fail(self, resource: str, verb: str, status: int, times: int = 1) -> None:
        """Answer the next `times` requests of `verb` for `resource` ("list": any list page,
        "continue": a list page after the first, "watch"; "get", "create", "replace") with
        an error Status of HTTP `status`, as the API server does (410 for an expired
        `continue` token, 500 or 503 when it is unwell)."""
        self._faults.setdefault((resource, verb), []).extend([status] * times)

    def heal(self, resource: str, verb: str) -> None:
        """Drop the faults still queued for `verb` on `resource`: it answers normally again."""
        self._faults.pop((resource, verb), None)

    def watch_versions(self, resource: str) -> list[str]:
        """The resourceVersion each watch request of `resource` resumed from, in order."""
        return [q.get("resourceVersion", "") for q in self.queries[resource]
                if q.get("watch") in ("true", "1")]

    def watchers(self, resource: str) -> int:
        return sum(1 for r, _, _ in self._streams if r == resource)

    def kubeconfig(self, path: Path) -> Path:
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "fake", "cluster": {"server": f"http://127.0.0.1:{self.port}"}}],
            "users": [{"name": "tester", "user": {"token": TOKEN}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "tester"}}],
            "current-context": "fake",
        }))
        return path

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        app = web.Application()
        for resource in RESOURCES:
            if resource in CUSTOM:
                base = f"/apis/{CUSTOM[resource]}/{resource}"
                app.router.add_get(base, self._handle(resource))
                app.router.add_post(base, self._write(resource, "create"))
                app.router.add_get(base + "/{name}", self._write(resource, "get"))
                app.router.add_put(base + "/{name}", self._write(resource, "replace"))
            else:
                app.router.add_get(f"/api/v1/{resource}", self._handle(resource))
        self._add_custom_routes(app)
        app.router.add_get("/api/v1/namespaces/{namespace}/services/{service}/proxy/{path:.*}",
                           self._service_proxy)
        self.add_routes(app)
        self._runner = web.AppRunner(app, shutdown_timeout=0.1)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = self._runner.addresses[0][1]

    def add_routes(self, app: web.Application) -> None:
        """Subclasses (tests/kit/apiserver_process.py) add their own control routes here."""

    async def _service_proxy(self, request: web.Request) -> web.Response:
        """The service proxy: what `self.proxied["NS/SERVICE/PATH"]` says the Service's pod
        answers (status, text), else the real API server's 503 Status for a Service with no
        endpoints."""
        key = "/".join(request.match_info[k] for k in ("namespace", "service", "path"))
        answer = self.proxied.get(key)
        if answer is None:
            return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                      "message": "no endpoints available for service",
                                      "reason": "ServiceUnavailable", "code": 503}, status=503)
        status, text = answer
        return web.Response(status=status, text=text)

    async def stop(self) -> None:
        self.drop_streams()
        if self._runner is not None:
            await self._runner.cleanup()

    # -- cluster-scoped custom objects (get, create, replace): the node agent publishes ----

    def serve_custom(self, group: str, version: str, plural: str) -> None:
        """Before start(): serve /apis/GROUP/VERSION/PLURAL[/NAME] (no list or watch).
        Objects land in `self.custom[plural]`; `fail(plural, "create"|"replace", status)`
        injects errors; a PUT with a stale resourceVersion gets 409 as from the real one."""
        if plural in CUSTOM:
            # Already served in full (list, watch, get, create, replace): share its store, so
            # `self.custom[plural]` shows what was written either way.
            self.custom[plural] = self.objects[plural]
            return
        self._custom_types.append((group, version, plural))
        self.custom.setdefault(plural, {})

    def _add_custom_routes(self, app: web.Application) -> None:
        for group, version, plural in self._custom_types:
            base = f"/apis/{group}/{version}/{plural}"
            app.router.add_post(base, self._custom(plural))
            app.router.add_route("*", base + "/{name}", self._custom(plural))

    def _custom(self, plural: str) -> Any:
        async def handler(request: web.Request) -> web.Response:
            store, name = self.custom[plural], request.match_info.get("name", "")
            def status(code: int, why: str) -> web.Response:
                return web.json_response({"kind": "Status", "apiVersion": "v1", "code": code,
                                          "status": "Failure", "message": why}, status=code)
            if request.method == "GET":
                return web.json_response(store[name]) if name in store else status(404, "nf")
            verb = "create" if request.method == "POST" else "replace"
            fault = self._fault(plural, verb)
            if fault is not None:
                return status(fault, f"injected fault {fault}")
            obj = orjson.loads(await request.read())
            name = obj["metadata"]["name"]
            current = store.get(name)
            if verb == "create" and current is not None:
                return status(409, "already exists")
            if verb == "replace" and (current is None or obj["metadata"].get(
                    "resourceVersion") != current["metadata"]["resourceVersion"]):
                return status(409 if current else 404, "conflict")
            self.version += 1
            obj["metadata"]["resourceVersion"] = str(self.version)
            store[name] = obj
            return web.json_response(obj, status=201 if verb == "create" else 200)

        return handler

    # -- protocol ----------------------------------------------------------------------------

    def _record(self, resource: str, kind: str, obj: Obj) -> None:
        self.version += 1
        obj = copy.deepcopy(obj)
        obj.setdefault("metadata", {})["resourceVersion"] = str(self.version)
        name = _name(resource, obj)
        if kind == "DELETED":
            self.objects[resource].pop(name, None)
        else:
            self.objects[resource][name] = obj
        self.log.append((self.version, resource, kind, obj))
        self._send(resource, {"type": kind, "object": obj})

    def _send(self, resource: str, event: Obj) -> None:
        line = orjson.dumps(event) + b"\n"
        for r, queue, selector in self._streams:
            if r == resource and (event["type"] in ("BOOKMARK", "ERROR")
                                  or _selected(resource, event.get("object") or {}, selector)):
                queue.put_nowait(line)

    def _handle(self, resource: str) -> Any:
        async def handler(request: web.Request) -> web.StreamResponse:
            if request.headers.get("Authorization") != f"Bearer {TOKEN}":
                self.unauthorised += 1
                return web.json_response({"kind": "Status", "code": 401}, status=401)
            self.queries[resource].append(dict(request.query))
            watch = request.query.get("watch") in ("true", "1")
            (self.watch_calls if watch else self.list_calls)[resource] += 1
            if resource in CUSTOM and not self.crd_installed:
                return _not_found(resource)
            status = self._fault(resource, "watch" if watch else (
                "continue" if request.query.get("continue") else "list"))
            if status is not None:
                return web.json_response({"kind": "Status", "apiVersion": "v1",
                                          "status": "Failure", "code": status,
                                          "message": f"injected fault {status}"}, status=status)
            if watch:
                return await self._watch(request, resource)
            return self._list(request, resource)

        return handler

    def _write(self, resource: str, verb: str) -> Any:
        """get / create / replace of one object (the custom resource only)."""

        async def handler(request: web.Request) -> web.Response:
            if request.headers.get("Authorization") != f"Bearer {TOKEN}":
                self.unauthorised += 1
                return web.json_response({"kind": "Status", "code": 401}, status=401)
            if not self.crd_installed:
                return _not_found(resource)
            name = request.match_info.get("name", "")
            status = self._fault(resource, verb)
            if status is not None:
                return _status(status, f"injected fault {status}")
            current = self.objects[resource].get(name)
            if verb == "get":
                return (web.json_response(current) if current is not None
                        else _status(404, f'{resource} "{name}" not found', "NotFound"))
            body = await request.json()
            name = name or str((body.get("metadata") or {}).get("name") or "")
            self.writes[resource].append((verb, name))
            current = self.objects[resource].get(name)
            if verb == "create" and current is not None:
                return _status(409, f'{resource} "{name}" already exists', "AlreadyExists")
            if verb == "replace":
                if current is None:
                    return _status(404, f'{resource} "{name}" not found', "NotFound")
                sent = (body.get("metadata") or {}).get("resourceVersion")
                if sent != current["metadata"]["resourceVersion"]:
                    return _status(409, "the object has been modified", "Conflict")
            self.put(resource, body)
            return web.json_response(self.objects[resource][name],
                                     status=201 if verb == "create" else 200)

        return handler

    def _fault(self, resource: str, verb: str) -> int | None:
        for name in (verb, "list") if verb == "continue" else (verb,):
            pending = self._faults.get((resource, name))
            if pending:
                return pending.pop(0)
        return None

    def _list(self, request: web.Request, resource: str) -> web.Response:
        items = sorted(self.objects[resource].values(), key=lambda o: _name(resource, o))
        selector = request.query.get("fieldSelector", "")
        if resource == "pods" and selector == "spec.nodeName!=":
            items = [o for o in items if (o.get("spec") or {}).get("nodeName")]
        items = [o for o in items if _selected(resource, o, selector)]
        offset = int(request.query.get("continue") or 0)
        limit = int(request.query.get("limit") or 0) or len(items)
        page = items[offset: offset + limit]
        more = offset + limit < len(items)
        return web.json_response({
            "kind": f"{KINDS[resource]}List", "apiVersion": CUSTOM.get(resource, "v1"),
            # remainingItemCount as kube-apiserver gives it (no selector: it is exact)
            "metadata": {"resourceVersion": str(self.version),
                         **({"continue": str(offset + limit),
                             "remainingItemCount": len(items) - offset - limit}
                            if more else {})},
            "items": page,
        })

    async def _watch(self, request: web.Request, resource: str) -> web.StreamResponse:
        since = int(request.query.get("resourceVersion") or 0)
        response = web.StreamResponse()
        response.content_type = "application/json"
        response.enable_chunked_encoding()
        await response.prepare(request)
        if self.close_watches_at_once:
            return response
        if since < self.compacted:
            status = {"kind": "Status", "code": 410, "reason": "Expired",
                      "message": f"too old resource version: {since}"}
            await response.write(orjson.dumps({"type": "ERROR", "object": status}) + b"\n")
            return response
        queue: asyncio.Queue[bytes | None] = asyncio.Queue()
        selector = request.query.get("fieldSelector", "")
        for version, r, kind, obj in self.log:
            if r == resource and version > since and _selected(resource, obj, selector):
                queue.put_nowait(orjson.dumps({"type": kind, "object": obj}) + b"\n")
        entry = (resource, queue, selector)
        self._streams.append(entry)
        try:
            while line := await queue.get():
                await response.write(line)
        finally:
            self._streams.remove(entry)
        if line is None and request.transport is not None:
            # Dropped: close the connection without the terminating chunk, like a broken socket.
            request.transport.close()
        return response


def _status(code: int, message: str, reason: str = "") -> web.Response:
    return web.json_response({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                              "code": code, "reason": reason, "message": message}, status=code)


def _not_found(resource: str) -> web.Response:
    """What an API server without the CRD answers (no such resource type)."""
    return _status(404, "the server could not find the requested resource", "NotFound")


def _selected(resource: str, obj: Obj, selector: str) -> bool:
    """Whether an Event matches `reason=X` (the one events selector the webhook sends); other
    resources and selectors pass (a pod list filters on its own, pod watches are unfiltered)."""
    if resource != "events" or not selector.startswith("reason="):
        return True
    return bool(obj.get("reason") == selector.removeprefix("reason="))


def _name(resource: str, obj: Obj) -> str:
    metadata = obj.get("metadata") or {}
    if resource in ("pods", "events"):
        return f"{metadata.get('namespace')}/{metadata.get('name')}"
    return str(metadata["name"])


async def running_fake() -> AsyncIterator[FakeApiServer]:
    server = FakeApiServer()
    await server.start()
    try:
        yield server
    finally:
        await server.stop()


async def eventually(condition: Callable[[], bool], what: str) -> None:
    """Wait for a state change a watch delivers; a bounded number of chances, no timing."""
    for _ in range(1000):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")
