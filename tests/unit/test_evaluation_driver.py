"""The evaluation's one driver (webhook/evaluation/driver.py) with a backend that records what it
is asked: every scenario, repeat, mode and side in order, a failed run recorded and the rest
run, and the report written once. No cluster."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace
from pathlib import Path

import orjson
import pytest

from webhook.devcluster.processes import ClusterError
from webhook.evaluation.driver import Extra, Ledger, RunPlan, drive, finish
from webhook.evaluation.measure import RunMetrics
from webhook.evaluation.report import EvalRun
from webhook.evaluation.scenario import ScenarioConfig, generate
from webhook.serving.wiring import demo_catalog

CONFIG = ScenarioConfig(kind="bursts", seed=3, nodes=4, deployments=1, scale_ups=0, updates=0,
                        deletes=0, burst=(2, 2))


@dataclass
class Recording:
    sides: tuple[str, ...]
    fail: set[int] = field(default_factory=set)
    asked: list[RunPlan] = field(default_factory=list)

    def run(self, plan: RunPlan) -> tuple[EvalRun, str]:
        self.asked.append(plan)
        if plan.index in self.fail:
            raise ClusterError("the cluster did not start")
        metrics = RunMetrics(pods=2, bytes_pulled=100 * plan.index, no_pull=0, pull_mean=1.0,
                             pull_p50=1.0, pull_p95=1.0, heat=1, balance=0.0, unscheduled=0,
                             patched=2 if plan.mode == "webhook" else 0)
        return EvalRun(plan.scenario.kind + plan.side, plan.scenario.seed, plan.repeat,
                       plan.name, metrics, None, 1.0, True, 0), "ok"


def test_every_run_in_order_and_a_failed_one_recorded() -> None:
    scenarios = [generate(replace(CONFIG, seed=seed), demo_catalog().images())
                 for seed in (3, 4)]
    backend = Recording(sides=("real", "stand-in"), fail={3})
    outcome = drive(scenarios, 2, ("connection", "one"), backend)
    asked = [(p.scenario.seed, p.repeat, p.name, p.side) for p in backend.asked]
    per_repeat = [(name, side) for name in ("stock", "webhook", "webhook-one")
                  for side in ("real", "stand-in")]
    assert asked == [(seed, repeat, name, side) for seed in (3, 4) for repeat in (0, 1)
                     for name, side in per_repeat]
    assert [p.index for p in backend.asked] == list(range(1, 25))
    assert len(outcome.runs) == 23 and len(outcome.failed) == 1
    assert outcome.failed[0] == {"scenario": "bursts", "seed": 3, "repeat": 0,
                                 "mode": "webhook", "side": "real",
                                 "error": "the cluster did not start"}


def test_the_report_is_written_once_with_the_backends_additions(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    scenario = generate(CONFIG, demo_catalog().images())
    outcome = drive([scenario], 1, ("connection",), Recording(sides=("",)))
    args = argparse.Namespace(json_file=tmp_path / "eval.json", plot=None, output="table")
    code = finish(args, outcome, {"repeats": 1}, 0.0,
                  lambda runs: Extra({"added": len(runs)}, table="\nadded table\n"))
    doc = orjson.loads((tmp_path / "eval.json").read_bytes())
    assert code == 0 and doc["added"] == 2 and len(doc["runs"]) == 2
    assert capsys.readouterr().out.endswith("added table\n")
    assert finish(args, Ledger(), {}, 0.0) == 1  # nothing ran
