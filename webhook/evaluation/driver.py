"""One evaluation driver for both kinds of nodes: every planned scenario, repeat and mode (stock,
then opted in once per split of the reviews) on each side of a backend, one fresh cluster per
run, measured, then reported once (report.py). A backend runs one run: fake nodes with the
kubelet stand-in (`StandInBackend`, run.py) or real kubelets and containerd with the stand-in
beside them (realcommand.RealBackend, realrun.py). command.py parses the options and picks the
backend.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol

import orjson

from webhook.config import ConfigError
from webhook.devcluster.processes import ClusterError
from webhook.evaluation import render, report
from webhook.evaluation.balancer import Split
from webhook.evaluation.pulls import PullSettings
from webhook.evaluation.report import EvalRun
from webhook.evaluation.run import Mode, RunRecord, RunSettings, run_once
from webhook.evaluation.scenario import Scenario
from webhook.registry.catalog import StaticCatalog
from webhook.value_parsers import parse_size


def settings(args: argparse.Namespace) -> RunSettings:
    """The run settings the options give; ConfigError for a bad value."""
    if args.repeats < 1:
        raise ConfigError("--repeats must be >= 1")
    if args.clock_scale <= 0:
        raise ConfigError("--clock-scale must be > 0")
    if args.nodes is not None and args.nodes < 1:
        raise ConfigError("--nodes must be >= 1")
    try:
        bandwidth = float(parse_size(args.bandwidth))
    except ValueError as exc:
        raise ConfigError(f"--bandwidth: {exc}") from exc
    if bandwidth <= 0:
        raise ConfigError("--bandwidth must be > 0")
    if args.webhook_replicas < 1:
        raise ConfigError("--webhook-replicas must be >= 1")
    return RunSettings(pulls=PullSettings(bandwidth=bandwidth, clock_scale=args.clock_scale),
                       webhook_args=tuple(args.webhook_args),
                       webhook_replicas=args.webhook_replicas, keep=args.keep)


def scenarios(args: argparse.Namespace, catalog: StaticCatalog) -> list[Scenario]:
    """The fake-node evaluation's generated scenarios, kind by kind, seed by seed."""
    from webhook.evaluation.scenario import PRESETS, generate

    out = []
    for kind in args.scenarios:
        for seed in args.seeds:
            config = replace(PRESETS[kind], seed=seed)
            if args.nodes is not None:
                config = replace(config, nodes=args.nodes)
            out.append(generate(config, catalog.images()))
    return out


@dataclass(frozen=True, slots=True)
class RunPlan:
    """One run to make: what the backend is told."""

    scenario: Scenario
    repeat: int
    mode: Mode
    split: Split
    side: str  # the backend's side ("" when it has one)
    index: int  # 1-based, over the whole evaluation

    @property
    def name(self) -> str:
        """The mode as reported: stock, or the opted-in split's (`webhook`, `webhook-one`)."""
        return report.SPLIT_MODES[self.split] if self.mode == "webhook" else self.mode


class Backend(Protocol):
    """Runs one planned run on a fresh cluster: the measured run and a line saying how it
    went; ClusterError when the cluster failed (the run is reported as failed)."""

    sides: tuple[str, ...]

    def run(self, plan: RunPlan) -> tuple[EvalRun, str]: ...


@dataclass
class Ledger:
    """What an evaluation has run so far: the measured runs and the failed ones."""

    runs: list[EvalRun] = field(default_factory=list)
    failed: list[dict[str, Any]] = field(default_factory=list)


def drive(planned: Sequence[Scenario], repeats: int, splits: Sequence[Split],
          backend: Backend, outcome: Ledger | None = None) -> Ledger:
    """Every run, in order: per scenario and repeat, stock then each split opted in, each on
    every side of the backend. A failed run is recorded and the evaluation goes on."""
    outcome = outcome or Ledger()
    # A terminated evaluation stops the cluster it runs (the backends' finally), as Ctrl-C
    # does: every process it started is detached and would outlive it.
    signal.signal(signal.SIGTERM, _interrupt)
    variants: list[tuple[Mode, Split]] = [("stock", "connection")]
    variants += [("webhook", split) for split in splits]
    total = len(planned) * repeats * len(variants) * len(backend.sides)
    index = 0
    for scenario in planned:
        for repeat in range(repeats):
            for mode, split in variants:
                for side in backend.sides:
                    index += 1
                    plan = RunPlan(scenario, repeat, mode, split, side, index)
                    label = " ".join(part for part in (
                        f"{scenario.kind} seed {scenario.seed}", plan.name, side,
                        f"repeat {repeat + 1}/{repeats}") if part)
                    print(f"evaluate: [{index}/{total}] {label}: starting", file=sys.stderr)
                    try:
                        run, said = backend.run(plan)
                    except ClusterError as exc:
                        print(f"evaluate: {label}: failed: {exc}", file=sys.stderr)
                        outcome.failed.append({
                            "scenario": scenario.kind, "seed": scenario.seed, "repeat": repeat,
                            "mode": plan.name, **({"side": side} if side else {}),
                            "error": str(exc)})
                        continue
                    outcome.runs.append(run)
                    print(f"evaluate: {label}: {said}", file=sys.stderr)
    return outcome


@dataclass(frozen=True, slots=True)
class Extra:
    """What a backend adds to the report: JSON entries, plots, a table."""

    doc: Mapping[str, Any] = field(default_factory=dict)
    plot: Callable[[Path], list[Path]] = lambda directory: []
    table: str = ""


def finish(args: argparse.Namespace, outcome: Ledger, meta: dict[str, Any], started: float,
           extra: Callable[[list[EvalRun]], Extra] = lambda runs: Extra()) -> int:
    """Report the evaluation as asked (table or JSON on stdout, --json, --plot); the exit
    code: 1 when a run failed or none ran."""
    runs, failed = outcome.runs, outcome.failed
    meta["wallSeconds"] = time.perf_counter() - started
    summaries = report.summarize(runs)
    doc = report.document(runs, summaries, meta, failed)
    added = extra(runs)
    doc.update(added.doc)
    if args.json_file:
        args.json_file.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n")
        print(f"evaluate: wrote {args.json_file}", file=sys.stderr)
    if args.plot:
        for path in [*render.plot(runs, summaries, args.plot), *added.plot(args.plot)]:
            print(f"evaluate: wrote {path}", file=sys.stderr)
    if args.output == "json":
        sys.stdout.write(orjson.dumps(doc, option=orjson.OPT_INDENT_2).decode() + "\n")
    else:
        sys.stdout.write(render.table(summaries, meta, failed) + added.table)
    return 1 if failed or not runs else 0


def one_run(record: RunRecord, scenario: Scenario, catalog: StaticCatalog,
            run_settings: RunSettings, simulate: bool, mode: str | None = None,
            split: str = "connection") -> EvalRun:
    """A finished run's metrics, per-pod pull times and (when asked) the simulator's replay
    (its webhook replicas review the pods the run's replicas did, the rest split as `split`)."""
    from webhook.evaluation.measure import measure, simulated

    return EvalRun(
        scenario=record.scenario, seed=record.seed, repeat=record.repeat,
        mode=mode or record.mode, metrics=measure(record, scenario),
        simulated=simulated(record, scenario, catalog, run_settings.pulls,
                            webhook_replicas=run_settings.webhook_replicas,
                            routing=split) if simulate else None,
        wall_seconds=record.wall_seconds, settled=record.settled,
        write_errors=record.write_errors,
        pull_seconds=tuple(start.pull_seconds for start in record.starts),
        split=record.split, reviews=tuple(record.webhook_reviews),
        connections=tuple(record.webhook_connections),
        per_connection=tuple(record.reviews_per_connection))


def write_trace(directory: Path, record: RunRecord, scenario: Scenario,
                run_settings: RunSettings, mode: str) -> None:
    """The run's observed trace, named by its mode (a split's: `webhook-one`), so the runs of
    several splits do not overwrite one another."""
    from webhook.evaluation.measure import observed_trace
    from webhook.sim.workload import trace_document

    directory.mkdir(parents=True, exist_ok=True)
    name = f"{record.scenario}-seed{record.seed}-{mode}-{record.repeat + 1}.json"
    (directory / name).write_bytes(orjson.dumps(trace_document(
        observed_trace(record, scenario, run_settings.pulls))))


def pulled_line(run: EvalRun) -> str:
    """The start of every run's line: its time and bytes."""
    return f"{run.wall_seconds:.0f} s, {render.size(run.metrics.bytes_pulled)} pulled"


@dataclass
class StandInBackend:
    """Fake nodes and the kubelet stand-in on a fresh local control plane (run.py)."""

    bin_dir: Path
    catalog: StaticCatalog
    run_settings: RunSettings
    simulate: bool
    traces: Path | None = None
    sides: tuple[str, ...] = ("",)

    def run(self, plan: RunPlan) -> tuple[EvalRun, str]:
        run_settings = replace(self.run_settings, split=plan.split)
        record = asyncio.run(run_once(self.bin_dir, plan.scenario, self.catalog, plan.mode,
                                      plan.repeat, run_settings))
        run = one_run(record, plan.scenario, self.catalog, self.run_settings, self.simulate,
                      plan.name, plan.split)
        if self.traces:
            write_trace(self.traces, record, plan.scenario, self.run_settings, plan.name)
        return run, (
            f"{pulled_line(run)}, {run.metrics.pods} pods started"
            + ("" if run.settled else ", NOT SETTLED")
            + (f", {run.write_errors} write errors" if run.write_errors else "")
            + (f", reviews per replica {'/'.join(map(str, run.reviews))} over "
               f"connections carrying {'/'.join(map(str, run.per_connection))}"
               if run.reviews else ""))


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt
