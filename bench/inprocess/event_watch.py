"""`python -m bench.inprocess.event_watch [--events N]`: what the kubelet `Pulled` event watch
costs.

In process, no network: N watch lines as the API server streams them (a kubelet Event of
realistic size, managedFields included) go through what the events reflector does per line
(`orjson.loads`, `Reflector._dispatch`) and the telemetry recorder, which matches each to a
pod and updates the Prometheus metrics. Measures process CPU time per event and the memory
retained per event still in the cluster (the reflector's key and the recorder's dedup entry),
then projects both for the assumed rates in docs/monitoring.md. Also times a first bind.
"""

from __future__ import annotations

import argparse
import gc
import time
import tracemalloc
import zlib
from typing import Any

import jsonpatch
import orjson
from prometheus_client import CollectorRegistry

from webhook.core.decide import decide
from webhook.core.index import LayerIndex
from webhook.core.layers import ImageLayers, Layer, Platform, PlatformLayers
from webhook.core.nodes import NodeInfo
from webhook.core.scoring import ScoringPolicy
from webhook.inventory.podstate import uid_key
from webhook.inventory.reflector import Reflector
from webhook.serving.metrics import TelemetryMetrics
from webhook.telemetry.recorder import Telemetry, TelemetrySettings

PODS = 20_000
MESSAGES = (
    'Successfully pulled image "registry.example.com/team/app-{i}:v3" in 4.215s '
    '(9.87s including waiting). Image size: 148325112 bytes.',
    'Container image "docker.io/library/python:3.12-slim" already present on machine and '
    "can be accessed by the pod",
)


def event_line(i: int) -> bytes:
    pod = i % PODS
    obj: dict[str, Any] = {
        "kind": "Event", "apiVersion": "v1",
        "metadata": {
            "name": f"web-7d4b9c-{pod:05d}.17f2a9c3b1d{i:08x}", "namespace": "shop",
            "uid": f"6f1d52a4-0c5e-4c43-9d2a-{i:012x}", "resourceVersion": str(10_000_000 + i),
            "creationTimestamp": "2025-06-01T10:00:00Z",
            "managedFields": [{"manager": "kubelet", "operation": "Update", "apiVersion": "v1",
                               "time": "2025-06-01T10:00:00Z", "fieldsType": "FieldsV1",
                               "fieldsV1": {"f:count": {}, "f:firstTimestamp": {},
                                            "f:involvedObject": {}, "f:lastTimestamp": {},
                                            "f:message": {}, "f:reason": {},
                                            "f:reportingComponent": {},
                                            "f:reportingInstance": {}, "f:source": {
                                                "f:component": {}, "f:host": {}},
                                            "f:type": {}}}]},
        "involvedObject": {"kind": "Pod", "namespace": "shop", "name": f"web-7d4b9c-{pod:05d}",
                           "uid": f"3b0e3c58-5f7e-4c2e-9a57-{pod:012x}", "apiVersion": "v1",
                           "resourceVersion": "9876543", "fieldPath": "spec.containers{app}"},
        "reason": "Pulled", "message": MESSAGES[i % 2].format(i=i % 500),
        "source": {"component": "kubelet", "host": f"node-{i % 5000:04d}"},
        "firstTimestamp": "2025-06-01T10:00:00Z", "lastTimestamp": "2025-06-01T10:00:00Z",
        "count": 1, "type": "Normal", "eventTime": None, "reportingComponent": "kubelet",
        "reportingInstance": f"node-{i % 5000:04d}",
    }
    return orjson.dumps({"type": "ADDED", "object": obj})


def watching(events: int) -> Reflector:
    """An events reflector feeding a recorder that knows the pods (half of them patched)."""
    telemetry = Telemetry(TelemetryMetrics(CollectorRegistry()), LayerIndex(), lambda _: None,
                          settings=TelemetrySettings(max_events=events + 1))
    for pod in range(PODS):
        annotations = {"layer-locality.io/decision": "{}"} if pod % 2 else {}
        telemetry.pod(f"3b0e3c58-5f7e-4c2e-9a57-{pod:012x}",
                      {"metadata": {"annotations": annotations}}, "node")
    telemetry.pods_listed()
    telemetry.events_listed()
    return Reflector("events", lambda **_: None, uid_key, telemetry.event,
                     held=telemetry.event_keys)


def run(events: int) -> dict[str, float]:
    lines = [event_line(i) for i in range(events)]
    reflector = watching(events)
    gc.collect()
    started = time.process_time()
    for line in lines:
        reflector._dispatch(orjson.loads(line))
    cpu = time.process_time() - started
    reflector = watching(events)  # again, under tracemalloc (which slows it down)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for line in lines:
        reflector._dispatch(orjson.loads(line))
    gc.collect()
    retained = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    line_bytes = sum(map(len, lines)) / len(lines)
    return {"events": events, "line_bytes": line_bytes, "cpu_us_per_event": cpu / events * 1e6,
            "retained_bytes_per_event": retained / events}


def first_bind_us(binds: int = 20_000, nodes: int = 300) -> float:
    """CPU per first bind: a 12-layer application image and a sidecar sharing 5 of its layers,
    patched by the real decision code against `nodes` nodes (a third hold each image), the
    100 hostnames of the patch then classified and the node's overlap summed."""
    amd64 = Platform.of("linux", "amd64")
    layers = tuple(Layer(f"sha256:{i:064x}", 20 << 20) for i in range(12))

    def image(ref: str, parts: tuple[Layer, ...]) -> ImageLayers:
        key = zlib.crc32(ref.encode())
        return ImageLayers(ref, f"sha256:{key:064x}",
                           {amd64: PlatformLayers(f"sha256:{key + 1:064x}", parts)})

    app = image("registry.example.com/team/app:v3", layers)
    side = image("docker.io/library/python:3.12-slim", (*layers[:5], Layer("sha256:" + "f" * 64,
                                                                         5 << 20)))
    index = LayerIndex()
    for n in range(nodes):
        held = app if n % 3 == 0 else side if n % 3 == 1 else None
        index.upsert(NodeInfo(f"node-{n}", f"node-{n}", amd64, False, (), ()),
                     {layer.digest for layer in held.platforms[amd64].layers} if held else ())
    obj: dict[str, Any] = {"metadata": {"name": "web", "annotations": {}}, "spec": {
        "containers": [{"name": "app", "image": app.ref}, {"name": "py", "image": side.ref}]}}
    decision = decide(obj, [app, side], index, ScoringPolicy(), salt="s", token="t")
    obj = jsonpatch.apply_patch(obj, list(decision.patch))
    known = {app.ref: app, side.ref: side}
    telemetry = Telemetry(TelemetryMetrics(CollectorRegistry()), index, known.get)
    telemetry.pods_listed()
    started = time.process_time()
    for i in range(binds):
        telemetry.bound(f"pod-{i}", obj, f"node-{i % nodes}")
    return (time.process_time() - started) / binds * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.inprocess.event_watch",
                                     description=__doc__)
    parser.add_argument("--events", type=int, default=100_000)
    args = parser.parse_args()
    result = run(args.events)
    result["cpu_us_per_first_bind"] = first_bind_us()
    for name, value in result.items():
        print(f"{name:>26}: {value:,.2f}")
    for rate in (7, 40, 200):  # events/s: services, high churn, burst (docs/monitoring.md)
        alive = rate * 3600  # events the API server keeps at once (--event-ttl 1h)
        print(f"{rate:>4} events/s: {rate * result['cpu_us_per_event'] / 1e4:.2f}% of a core, "
              f"{rate * result['line_bytes'] / 1024:.0f} KiB/s from the API server, "
              f"{alive * result['retained_bytes_per_event'] / 2**20:.1f} MiB for the "
              f"{alive:,} events of one hour")


if __name__ == "__main__":
    main()
