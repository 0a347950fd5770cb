"""One evaluation run on REAL nodes: kubelets and containerd v2 on this machine
(webhook/devcluster/realnodes), pulling the scenario's images (realimages.py) from the
cluster's registry through a per-node throttle, so a pull takes real seconds that depend on
bytes. What the run records is read from the real things: bytes from the registry's own log
(blob GETs per node), pull times from the kubelets' `Pulled` events, binds and Running from
the pods as the API server shows them.

Two processes. `run_real_once` (the evaluation, on the host) makes the cluster's network and
mount namespace (a holder process), then runs realchild.py inside it (nsenter),
which starts the cluster, pushes the images, warms the nodes with the scenario's initial
images, replays the scenario and writes the run's record as JSON; the parent reads it and
takes down whatever the child left. Real nodes need the whole process in the namespace (the
cluster's /run and the kubelets' mounts), which the evaluation's own process is not."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
import signal
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.devcluster.processes import ClusterError, Process, stop
from webhook.evaluation.kubelet import PodStart
from webhook.evaluation.machine import busy_share, cpu_times
from webhook.evaluation.pulls import ImagePull
from webhook.evaluation.realscenario import scenario_document
from webhook.evaluation.run import Mode, PodSeen, RunRecord, RunSettings
from webhook.evaluation.scenario import Scenario

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class RealSettings:
    """What a run on real nodes adds to RunSettings."""

    nodes: int = 4
    bandwidth: float = 32 * (1 << 20)  # bytes per wall second, per node, at the registry
    scale: float = 1.0  # layer sizes built = the data set's x scale
    request_scale: float = 0.125  # pods' CPU and memory requests x this (see realize)


@dataclass(slots=True)
class RealExtras:
    """Per run, what only real nodes tell: read from the registry and the kubelets."""

    registry_bytes: dict[str, int] = field(default_factory=dict)  # node -> blob bytes
    registry_blobs: dict[str, int] = field(default_factory=dict)  # node -> blob GETs
    running: dict[str, float] = field(default_factory=dict)  # pod uid -> bind -> Running, s
    warm_seconds: float = 0.0
    push_seconds: float = 0.0
    cpu_busy: float = 0.0  # the machine's CPU busy share, cluster start to teardown (0..1)


# ---- the record as JSON (child -> parent) -----------------------------------------------------

def record_document(record: RunRecord, extras: RealExtras) -> dict[str, Any]:
    return {"record": dataclasses.asdict(record), "extras": dataclasses.asdict(extras)}


def record_from(doc: Mapping[str, Any]) -> tuple[RunRecord, RealExtras]:
    raw = dict(doc["record"])
    pods = {uid: PodSeen(**{**p, "images": tuple(p["images"])}) for uid, p in raw["pods"].items()}
    starts = [PodStart(**{**s, "pulls": tuple(ImagePull(**p) for p in s["pulls"])})
              for s in raw["starts"]]
    record = RunRecord(**{**raw, "pods": pods, "starts": starts})
    return record, RealExtras(**doc["extras"])


# ---- the parent: a namespace, the child in it, everything down after ---------------------------

def run_real_once(kube_bin: Path, node_bin: Path, scenario: Scenario, images: Path,
                  blobs: Path, catalog: Path, mode: Mode, repeat: int, settings: RunSettings,
                  real: RealSettings, work: Path,
                  report_dir: Path | None = None) -> tuple[RunRecord, RealExtras]:
    """A fresh cluster of real nodes for one run of `scenario` (as `realize` made it: real
    node names, registry references); everything it started is stopped, and the namespaces
    gone, before this returns (or raises ClusterError). `images` is realimages' document of
    the built images, `blobs` their blobs, `catalog` what the webhook serves; with
    `report_dir`, an opted-in run leaves there `layer-locality report` on each replica."""
    from webhook.devcluster.install import repo_root
    from webhook.devcluster.realnodes.namespaces import enter, start_holder

    if os.geteuid() != 0:
        raise ClusterError("real nodes need root (network namespaces, mounts, cgroups)")
    root = work / "cluster"
    root.mkdir(parents=True, exist_ok=True)
    spec = work / "spec.json"
    out = work / "record.json"
    spec.write_text(json.dumps({
        "root": str(root), "kube_bin": str(kube_bin), "node_bin": str(node_bin),
        "scenario": scenario_document(scenario), "images": str(images), "blobs": str(blobs),
        "catalog": str(catalog), "mode": mode, "repeat": repeat, "record": str(out),
        "settings": {"webhook_args": list(settings.webhook_args),
                     "webhook_replicas": settings.webhook_replicas, "split": settings.split,
                     "settle_timeout": settings.settle_timeout},
        "real": dataclasses.asdict(real),
        "report_dir": str(report_dir) if report_dir else "",
    }))
    cpu_before = cpu_times()
    holder = start_holder("netns", root / "logs" / "netns.log", net=True)
    argv = [*enter(holder, wd=repo_root()), sys.executable, "-m",
            "webhook.evaluation.realchild", str(spec), str(holder.pid)]
    code = None
    interrupted = False
    try:
        child = subprocess.Popen(argv)
        while code is None:
            try:
                code = child.wait()
            except KeyboardInterrupt:  # the child stops its cluster itself: wait for that
                if not interrupted:
                    interrupted = True
                    child.send_signal(signal.SIGINT)  # SIGTERM reaches only this process
    finally:
        # Whatever the child left: the cleanup is not interrupted half-way.
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM})
        try:
            _clean_up(root, holder)
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    if interrupted:
        raise KeyboardInterrupt
    if code != 0 or not out.exists():
        tail = ""
        log_file = work / "evaluation.log"
        if log_file.exists():
            tail = "\n".join(log_file.read_text(errors="replace").splitlines()[-20:])
        raise ClusterError(f"the run on real nodes failed (exit {code}); see {root}/logs\n{tail}")
    record, extras = record_from(json.loads(out.read_text()))
    extras.cpu_busy = busy_share(cpu_before, cpu_times())
    return record, extras


def _clean_up(root: Path, holder: Process) -> None:
    """After the child: the cluster's teardown if its state names this run's holder (it is
    idempotent), every process still in the namespace, then the holder; ClusterError if
    anything is left."""
    from webhook.devcluster.controlplane import ControlPlane
    from webhook.devcluster.realnodes.namespaces import namespace_id, processes_in
    from webhook.devcluster.realnodes.teardown import leftovers, teardown

    plane = ControlPlane.load(root)
    recorded = plane.processes.get("netns") if plane is not None else None
    ours = recorded is not None and \
        (recorded.pid, recorded.start_ticks) == (holder.pid, holder.start_ticks)
    problems = teardown(plane) if plane is not None and ours else []
    namespace = namespace_id(holder.pid, "net") if holder.alive() else None
    if namespace is not None:  # started before the state file named them
        for pid in processes_in(namespace, "net"):
            if pid != holder.pid:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
    stop(holder)
    left = leftovers(plane) if plane is not None and ours else None
    if problems or left:
        raise ClusterError(f"the run on real nodes left {problems or left} behind")
