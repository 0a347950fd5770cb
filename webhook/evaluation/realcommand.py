"""`layer-locality evaluate --real-nodes N`: the evaluation's scenarios on real kubelets and
containerd (realrun.py), stock and opted in, each run on a fresh cluster; with `--stand-in`,
the same scenarios with the kubelet stand-in on fake nodes of the same names, images and
bandwidth, reported side by side (standin.py), so the stand-in's model is checked against
what real pulls did."""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from webhook.config import ConfigError
from webhook.core.layers import ImageLayers
from webhook.devcluster.processes import ClusterError
from webhook.evaluation import render, report, standin
from webhook.evaluation.driver import (
    Extra,
    Ledger,
    RunPlan,
    drive,
    finish,
    one_run,
    pulled_line,
    settings,
    write_trace,
)
from webhook.evaluation.kubelet import PodStart
from webhook.evaluation.machine import machine_cpu_milli, machine_memory
from webhook.evaluation.pulls import PullSettings
from webhook.evaluation.realimages import (
    BuiltImage,
    LayerCache,
    build,
    document,
    webhook_catalog,
)
from webhook.evaluation.realrun import RealExtras, RealSettings, run_real_once
from webhook.evaluation.realscenario import images_used, preset, realize
from webhook.evaluation.report import EvalRun
from webhook.evaluation.run import RunRecord, RunSettings, check_binaries, run_once
from webhook.evaluation.scenario import Scenario, generate
from webhook.registry.catalog import StaticCatalog, catalog_document
from webhook.sim.workload import renamed

STAND_IN = " (stand-in)"  # the stand-in's runs are reported as scenario "<kind> (stand-in)"


# Options of the fake-node evaluation that real nodes do not use (their clock is the wall's,
# their bandwidth the throttle's, their node count --real-nodes), with their defaults.
FAKE_ONLY = {"nodes": None, "clock_scale": 20.0, "bandwidth": "20MiB"}
REAL_ONLY = {"scale": 1.0, "stand_in": False, "holdout_report": None, "real_runs": None}


def check_options(args: argparse.Namespace) -> None:
    """Refuse options that the chosen kind of evaluation would silently ignore."""
    def flag(name: str) -> str:
        return "--" + name.replace("_", "-")

    if args.real_nodes:
        given = [flag(k) for k, v in FAKE_ONLY.items() if getattr(args, k) != v]
        if given:
            raise ConfigError(f"{', '.join(given)}: not with --real-nodes (real nodes pull "
                              "on the wall clock through --registry-bandwidth)")
        if args.real_runs is not None and not args.stand_in:
            raise ConfigError("--real-runs: only with --stand-in (it runs the stand-in "
                              "beside real runs recorded earlier)")
    else:
        given = [flag(k) for k, v in REAL_ONLY.items() if getattr(args, k) != v]
        if given:
            raise ConfigError(f"{', '.join(given)}: only with --real-nodes N")


def real_settings(args: argparse.Namespace) -> RealSettings:
    from webhook.devcluster.realnodes.network import MAX_NODES

    if not 1 <= args.real_nodes <= MAX_NODES:
        raise ConfigError(f"--real-nodes must be within 1..{MAX_NODES}")
    if not 0 < args.scale <= 1:
        raise ConfigError("--scale must be within (0, 1]")
    if os.geteuid() != 0:
        raise ConfigError("--real-nodes needs root (network namespaces, mounts, cgroups, "
                          "containerd)")
    return RealSettings(nodes=args.real_nodes, bandwidth=float(args.registry_bandwidth),
                        scale=args.scale)


def per_scenario_apps(scenario: Scenario) -> Scenario:
    """The scenario with its app images named by its kind and seed: two seeds generate the
    same app names with other bases and sizes, which one registry (and one catalog) must not
    confuse."""
    apps = {i.ref for i in scenario.images}
    prefix = f"{scenario.kind}{scenario.seed}-"

    def rename(ref: str) -> str:
        if ref not in apps:
            return ref
        head, _, name = ref.rpartition("/")
        return f"{head}/{prefix}{name}"

    # The digests too: they derive from the name, and a catalog keeps one image per digest
    # (two seeds' evaluations in one run built only one of them, and realize() failed).
    return dataclasses.replace(
        scenario,
        images=tuple(renamed(i, rename(i.ref)) for i in scenario.images),
        actions=tuple(dataclasses.replace(a, image=rename(a.image)) for a in scenario.actions))


def per_node(starts: Sequence[PodStart], scale: float) -> tuple[tuple[str, int, int], ...]:
    """(node, bytes at the data set's sizes, pods that downloaded something) per node."""
    out: dict[str, list[int]] = {}
    for s in starts:
        row = out.setdefault(s.node, [0, 0])
        row[0] += s.bytes
        row[1] += 1 if s.bytes > 0 else 0
    return tuple((n, round(b / scale), p) for n, (b, p) in sorted(out.items()))


def _unscaled(run: EvalRun, record: RunRecord, scale: float,
              extras: RealExtras | None) -> EvalRun:
    """The run at the data set's sizes; on real nodes, bytes are the registry's count (the
    per-pod attribution leaves out blobs no started pod needed: a pod deleted while pulling)."""
    served = sum(extras.registry_bytes.values()) if extras else run.metrics.bytes_pulled
    metrics = dataclasses.replace(run.metrics, bytes_pulled=round(served / scale))
    return dataclasses.replace(
        run, metrics=metrics, per_node=per_node(record.starts, scale),
        running_seconds=tuple(extras.running.values()) if extras else (),
        registry_bytes=round(sum(extras.registry_bytes.values())) if extras else None,
        cpu_busy=extras.cpu_busy if extras else None)


def evaluate_real(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    import logging

    from webhook.devcluster.binaries import kube_bin_dir, kube_version, node_bin_dir
    from webhook.devcluster.realnodes import oci
    from webhook.devcluster.realnodes.network import registry_host
    from webhook.serving.wiring import demo_catalog

    check_options(args)
    run_settings = settings(args)
    real = real_settings(args)
    try:
        kube_bin = args.bin_dir or kube_bin_dir(env)
        check_binaries(kube_bin)
        node_bin = node_bin_dir(env)
        if not (kube_bin / "kubelet").is_file():
            raise ClusterError(f"{kube_bin} has no kubelet: rebuild with hack/kube/build.sh")
    except ClusterError as exc:
        raise ConfigError(str(exc)) from exc
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s %(message)s")
    official = demo_catalog()
    planned: list[Scenario] = []
    for kind in args.scenarios:
        for seed in args.seeds:
            config = dataclasses.replace(preset(kind, real.nodes), seed=seed)
            scenario = per_scenario_apps(generate(config, official.images()))
            planned.append(scenario)
    full = StaticCatalog(official.images())
    for scenario in planned:
        for image in scenario.images:
            full.add(image)
    wanted = sorted(set().union(*(images_used(s) for s in planned)))
    sources = [i for i in full.images() if i.ref in wanted]
    work = Path(tempfile.mkdtemp(prefix="eval-real-", dir=run_settings.work_dir))
    cache = LayerCache(_cache_dir(env) / "eval-layers")
    started = time.perf_counter()
    print(f"evaluate: building {len(sources)} images (scale {real.scale:g}; cached in "
          f"{cache.root})", file=sys.stderr)
    pause = oci.pause_image(node_bin / "pause").layers[0]
    built = build(sources, real.scale, pause, cache)
    host = registry_host()
    catalog_images = webhook_catalog(built, host)
    images_file, catalog_file = work / "images.json", work / "catalog.json"
    images_file.write_text(json.dumps(document(built)))
    catalog_file.write_text(json.dumps(catalog_document(catalog_images)))
    print(f"evaluate: images ready in {time.perf_counter() - started:.0f} s", file=sys.stderr)
    stand_in_pulls = PullSettings(bandwidth=real.bandwidth / real.scale, clock_scale=1.0,
                                  layer_overhead=standin.LAYER_OVERHEAD)
    real_run_settings = dataclasses.replace(run_settings, pulls=stand_in_pulls,
                                            settle_timeout=300.0)
    meta: dict[str, Any] = {
        "kubernetesVersion": kube_version() or kube_bin.parent.name.split("-")[0],
        "realNodes": real.nodes, "registryBandwidth": real.bandwidth, "scale": real.scale,
        "requestScale": real.request_scale, "repeats": args.repeats,
        "seeds": list(args.seeds), "scenarios": list(args.scenarios), "nodes": real.nodes,
        "webhookArgs": list(run_settings.webhook_args), "simulated": args.simulate,
        "webhookReplicas": run_settings.webhook_replicas, "splits": list(args.splits),
        "standIn": args.stand_in, "clockScale": 1.0, "bandwidth": real.bandwidth / real.scale,
        "machineCpuMilli": machine_cpu_milli(),
    }
    outcome = Ledger()
    sides: tuple[str, ...] = ("real", *(("stand-in",) if args.stand_in else ()))
    if args.real_runs is not None:
        outcome.runs += recorded_runs(args.real_runs, planned, args.repeats)
        meta["realRunsFrom"] = {"file": str(args.real_runs),
                                "meta": json.loads(args.real_runs.read_text())["meta"]}
        sides = ("stand-in",)
    backend = RealBackend(sides, kube_bin, node_bin, real, real_run_settings, work, cache.blobs,
                          built, host, catalog_images, images_file, catalog_file, args)
    try:
        drive(planned, args.repeats, args.splits, backend, outcome)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)

    def stand_in_beside(runs: list[EvalRun]) -> Extra:
        comparisons = standin.compare(runs, STAND_IN)
        return Extra({"standIn": [standin.comparison_doc(c) for c in comparisons]},
                     lambda directory: standin.plot(comparisons, directory),
                     standin.table(comparisons))

    return finish(args, outcome, meta, started, stand_in_beside)


@dataclass
class RealBackend:
    """One run on real nodes (realrun.run_real_once), or with the stand-in on fake nodes of
    the same names, images and bandwidth; each scenario realized once, at its first run."""

    sides: tuple[str, ...]
    kube_bin: Path
    node_bin: Path
    real: RealSettings
    run_settings: RunSettings
    work: Path
    blobs: Path
    built: Mapping[str, BuiltImage]
    host: str
    catalog_images: Sequence[ImageLayers]
    images_file: Path
    catalog_file: Path
    args: argparse.Namespace
    realized: dict[tuple[str, int], Scenario] = field(default_factory=dict)

    def run(self, plan: RunPlan) -> tuple[EvalRun, str]:
        scenario = plan.scenario
        key = (scenario.kind, scenario.seed)
        if key not in self.realized:
            self.realized[key] = realize(scenario, self.built, self.host, self.catalog_images,
                                         machine_cpu_milli(), machine_memory(),
                                         self.real.request_scale)
        realized = self.realized[key]
        settings_now = dataclasses.replace(self.run_settings, split=plan.split)
        extras = None
        run_dir = self.work / f"run-{plan.index}"
        empty = StaticCatalog()
        holdout = self.args.holdout_report
        try:
            if plan.side == "real":
                record, extras = run_real_once(
                    self.kube_bin, self.node_bin, realized, self.images_file, self.blobs,
                    self.catalog_file, plan.mode, plan.repeat, settings_now, self.real,
                    run_dir, report_dir=holdout / (
                        f"{scenario.kind}-seed{scenario.seed}-{plan.name}-{plan.repeat + 1}")
                    if holdout else None)
            else:
                record = asyncio.run(run_once(self.kube_bin, realized, empty, plan.mode,
                                              plan.repeat, settings_now))
        finally:
            if not self.args.keep:  # a run's images and node stores: gigabytes
                shutil.rmtree(run_dir, ignore_errors=True)
        run = one_run(record, realized, empty, settings_now, self.args.simulate, plan.name,
                      plan.split)
        run = _unscaled(run, record, self.real.scale if plan.side == "real" else 1.0, extras)
        if plan.side != "real":
            run = dataclasses.replace(run, scenario=run.scenario + STAND_IN)
        if self.args.write_traces:
            write_trace(self.args.write_traces, record, realized, settings_now,
                        f"{plan.name}-{plan.side}")
        return run, (
            pulled_line(run)
            + (f" ({render.size(run.registry_bytes)} at the registry)"
               if run.registry_bytes is not None else "")
            + f", {run.metrics.pods} pods started, heat {run.metrics.heat}"
            + (f", CPU {run.cpu_busy:.0%} busy" if run.cpu_busy is not None else "")
            + (f"; {sum(extras.registry_blobs.values())} blob GETs, images pushed in "
               f"{extras.push_seconds:.0f} s, nodes warmed in {extras.warm_seconds:.0f} s"
               if extras is not None else "")
            + ("" if run.settled else ", NOT SETTLED"))


def recorded_runs(path: Path, planned: Sequence[Scenario], repeats: int) -> list[EvalRun]:
    """The real-node runs of an earlier evaluation's JSON that match the scenarios planned
    (kind and seed) and the repeats asked for; ConfigError when one is missing."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise ConfigError(f"--real-runs {path}: {exc}") from exc
    if not doc.get("meta", {}).get("realNodes"):
        raise ConfigError(f"--real-runs {path}: not the JSON of a real-node evaluation")
    wanted = {(s.kind, s.seed) for s in planned}
    runs = [report.run_from_doc(r) for r in doc["runs"]
            if (r["scenario"], r["seed"]) in wanted and r["repeat"] < repeats]
    have = {(r.scenario, r.seed) for r in runs}
    if have != wanted:
        missing = ", ".join(f"{k} seed {s}" for k, s in sorted(wanted - have))
        raise ConfigError(f"--real-runs {path} has no real runs of {missing}")
    return runs


def _cache_dir(env: Mapping[str, str]) -> Path:
    root = env.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(root) / "layer-locality"
