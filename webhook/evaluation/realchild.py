"""The run on real nodes, inside the cluster's namespace (realrun.py starts it there): start the
cluster, push the images, warm the nodes with the scenario's initial images, replay the
scenario until it settles and write the run's record as JSON for the parent.

    python -m webhook.evaluation.realchild SPEC.json HOLDER_PID
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from webhook.devcluster.processes import ClusterError, Process, start_ticks
from webhook.devcluster.realnodes.pinned import run_pinned
from webhook.evaluation.attribution import PodTimes, starts_from
from webhook.evaluation.realimages import BuiltImage, from_document
from webhook.evaluation.realrun import RealExtras, RealSettings, record_document
from webhook.evaluation.realscenario import images_used, scenario_from
from webhook.evaluation.run import (
    NAMESPACE,
    OPT_IN,
    Mode,
    RunRecord,
    RunSettings,
    _Observer,
    _replay,
    serving_webhooks,
    settle,
)
from webhook.evaluation.scenario import Scenario

log = logging.getLogger(__name__)
WARM_NAMESPACE = "warm"
STATUS_TIMEOUT = 120.0  # the kubelet lists images every 30 s and reports them every 10 s
READY_TIMEOUT = 300.0
# Before the holdout report is read: the replicas' watches see the last Running and Pulled.
REPORT_LINGER = 5.0


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def child_main(spec_path: Path, holder_pid: int) -> int:
    signal.signal(signal.SIGTERM, _interrupt)  # stops its cluster as Ctrl-C does
    spec = json.loads(spec_path.read_text())
    root = Path(spec["root"])
    # Beside the cluster's directory: `up` clears the cluster's logs/ as it starts.
    logging.basicConfig(level=logging.INFO, filename=str(root.parent / "evaluation.log"),
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    try:
        built = from_document(json.loads(Path(spec["images"]).read_text()))
        record, extras = asyncio.run(_child(spec, holder_pid, built))
    except BaseException:
        log.exception("the run on real nodes failed")
        return 1
    Path(spec["record"]).write_text(json.dumps(record_document(record, extras)))
    return 0


async def _child(spec: Mapping[str, Any], holder_pid: int,
                 built: Mapping[str, BuiltImage]) -> tuple[RunRecord, RealExtras]:
    from webhook.devcluster.cluster import up
    from webhook.devcluster.realnodes.network import registry_host
    from webhook.devcluster.realnodes.registry import blob_fetches, fetches_by_node
    from webhook.evaluation import realimages

    started = time.perf_counter()
    root = Path(spec["root"])
    real = RealSettings(**spec["real"])
    s = spec["settings"]
    settings = RunSettings(webhook_args=tuple(s["webhook_args"]),
                           webhook_replicas=int(s["webhook_replicas"]), split=s["split"],
                           settle_timeout=float(s["settle_timeout"]))
    host = registry_host()
    scenario = scenario_from(spec["scenario"])
    holder = Process("netns", holder_pid, start_ticks(holder_pid) or -1, (),
                     root / "logs" / "netns.log")
    mode: Mode = spec["mode"]
    record = RunRecord(mode, scenario.kind, scenario.seed, int(spec["repeat"]), 1.0)
    extras = RealExtras()
    cluster = await asyncio.to_thread(
        up, root, Path(spec["kube_bin"]), [], catalog=Path(spec["catalog"]),
        webhook_args=list(settings.webhook_args),
        start_webhook=settings.webhook_replicas <= 1, kubelets=real.nodes,
        node_bin=Path(spec["node_bin"]), netns_holder=holder,
        registry_bandwidth=real.bandwidth)
    try:
        t = time.perf_counter()
        used = images_used(scenario)
        await asyncio.to_thread(realimages.push_all,
                                [b for b in built.values() if b.ref(host) in used],
                                Path(spec["blobs"]), f"http://{host}")
        extras.push_seconds = time.perf_counter() - t
        from kubernetes import client

        api = cluster.api_client()
        core: Any = client.CoreV1Api(api)
        apps: Any = client.AppsV1Api(api)
        try:
            t = time.perf_counter()
            await warm(core, scenario)
            extras.warm_seconds = time.perf_counter() - t
            registry_log = cluster.plane.log("registry")
            mark = len(await asyncio.to_thread(_lines, registry_log))
            served: list[tuple[Sequence[str], Path]] = []
            settings = dataclasses.replace(
                settings, on_webhooks=lambda urls, ca: served.append((urls, ca)))
            async with serving_webhooks(cluster, settings, record):
                times = await replay(core, apps, scenario, mode, settings, record)
                if spec.get("report_dir") and mode == "webhook":
                    await asyncio.sleep(REPORT_LINGER)
                    urls, ca = served[0]
                    await asyncio.to_thread(holdout_reports, urls, ca,
                                            Path(spec["report_dir"]))
            events = (await asyncio.to_thread(core.list_namespaced_event, NAMESPACE,
                                              _preload_content=False)).data
            event_items = json.loads(events)["items"]
        finally:
            api.close()
        lines = (await asyncio.to_thread(_lines, registry_log))[mark:]
        fetched = fetches_by_node(blob_fetches("\n".join(lines)),
                                  {n.name: ip for n, ip in _node_ips(cluster)})
        # Layers only: a pull whose layers were all there still fetches the image's config
        # (a few KB), which is not a download in the stand-in's terms, nor in a user's.
        blobs_of = {b.ref(host): {x.digest for x in b.layers} for b in built.values()}
        record.starts, extras.running = starts_from(record.pods, times, event_items, blobs_of,
                                                    fetched)
        record.ends = {uid: p.gone for uid, p in record.pods.items() if p.gone is not None}
        extras.registry_bytes = {n: sum(s for _, s in f) for n, f in fetched.items()}
        extras.registry_blobs = {n: len(f) for n, f in fetched.items()}
        bound = {s.uid for s in record.starts}
        record.unscheduled = sum(1 for p in record.pods.values()
                                 if p.gone is None and p.uid not in bound)
    finally:
        await asyncio.to_thread(cluster.down)
    record.wall_seconds = time.perf_counter() - started
    return record, extras


def holdout_reports(urls: Sequence[str], ca: Path, out: Path) -> None:
    """`layer-locality report` on each webhook replica's /metrics, as a user runs it (table,
    JSON and plots), into `out`: the holdout's effect measured from the real kubelets' events
    the replica saw."""
    from webhook.devcluster.install import repo_root

    out.mkdir(parents=True, exist_ok=True)
    for i, url in enumerate(urls, start=1):
        base = [sys.executable, "-m", "webhook", "report", "--url", f"{url}/metrics",
                "--ca", str(ca)]
        for suffix, extra in (("txt", []), ("json", ["--output", "json"])):
            result = subprocess.run([*base, *extra, *(["--plot", str(out / f"plots-{i}"),
                                                       "--replace-plots"]
                                                      if suffix == "txt" else [])],
                                    capture_output=True, text=True, check=False,
                                    cwd=repo_root(), timeout=120)
            (out / f"report-replica-{i}.{suffix}").write_text(result.stdout + result.stderr)


def _lines(path: Path) -> list[str]:
    return path.read_text(errors="replace").splitlines()


def _node_ips(cluster: Any) -> list[tuple[Any, str]]:
    from webhook.devcluster.realnodes.bringup import recorded_nodes

    return [(n, n.ip) for n in recorded_nodes(cluster.plane)]


async def warm(core: Any, scenario: Scenario) -> None:
    """Every node holds its initial images (and the sandbox image), and its status lists them:
    a pod per (node, image) pinned there by nodeName, Running, then deleted. The registry bytes
    this costs are left out of the run's (the log is read from after it)."""
    from webhook.devcluster.realnodes.bringup import PAUSE_REPOSITORY, PAUSE_TAG
    from webhook.devcluster.realnodes.network import registry_host

    pods: dict[str, tuple[str, str]] = {}
    pause = f"{registry_host()}/{PAUSE_REPOSITORY}:{PAUSE_TAG}"
    for spec in scenario.nodes:
        # A node with no initial image still runs one pod: its sandbox image is then there,
        # as on any node that has run a pod, and not counted against the scenario.
        for k, image in enumerate(spec.images or (pause,)):
            pods[f"{spec.name}-{k}"] = (image, spec.name)
    await asyncio.to_thread(run_pinned, core, WARM_NAMESPACE, pods, READY_TIMEOUT,
                            "the nodes' initial images")
    deadline = time.monotonic() + STATUS_TIMEOUT
    wanted = {n.name: set(n.images) for n in scenario.nodes}
    while True:
        listed = {node.metadata.name: {name for image in node.status.images or ()
                                       for name in image.names or ()}
                  for node in (await asyncio.to_thread(core.list_node)).items}
        if all(refs <= listed.get(name, set()) for name, refs in wanted.items()):
            return
        if time.monotonic() > deadline:
            raise ClusterError(f"node status did not list the initial images within "
                               f"{STATUS_TIMEOUT:.0f} s")
        await asyncio.sleep(1.0)


async def replay(core: Any, apps: Any, scenario: Scenario, mode: Mode, settings: RunSettings,
                record: RunRecord) -> dict[str, PodTimes]:
    """The scenario replayed until it settles; each pod's bind and Running as the one pod
    watch (run._Observer) saw them."""
    t0 = time.monotonic()

    def clock() -> float:
        return time.monotonic() - t0

    observer = _Observer(core, clock, record)
    tasks = [asyncio.create_task(observer.reflector().run())]
    try:
        labels = OPT_IN if mode == "webhook" else {}
        await asyncio.to_thread(core.create_namespace,
                                {"metadata": {"name": NAMESPACE, "labels": labels}})
        await _replay(apps, scenario.actions)
        # The pods Running are the kubelets' word that their pulls are over.
        record.settled = await settle(apps, core, lambda: True, settings.settle_timeout)
        await asyncio.sleep(0.5)  # the last watch events
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {uid: PodTimes(p.node, p.bound, p.running) for uid, p in record.pods.items()}


if __name__ == "__main__":
    sys.exit(child_main(Path(sys.argv[1]), int(sys.argv[2])))
