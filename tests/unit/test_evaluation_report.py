"""`layer-locality evaluate` aggregation (webhook/evaluation/report.py) on synthetic runs whose
figures are computed here by hand."""

from __future__ import annotations

import math
from pathlib import Path

import orjson
import pytest

from webhook.evaluation.measure import RunMetrics, Simulated
from webhook.evaluation.render import plot, table
from webhook.evaluation.report import EvalRun, document, share_of_oracle, summarize

GiB = 1 << 30
# (repeat, real bytes GiB, real heat, sim bytes of its own mode GiB, sim heat, oracle GiB)
STOCK = [(0, 100, 2, 105, 2, 40), (1, 120, 2, 115, 2, 42), (2, 110, 2, 112, 2, 38)]
HOOK = [(0, 60, 3, 70, 3, 41), (1, 50, 4, 60, 4, 39), (2, 70, 5, 75, 4, 40)]


def metrics(nbytes: int, heat: int, pods: int = 300) -> RunMetrics:
    return RunMetrics(pods=pods, bytes_pulled=nbytes, no_pull=10, pull_mean=5.0, pull_p50=4.0,
                      pull_p95=9.0, heat=heat, balance=3.0, unscheduled=0, patched=0)


def runs(simulate: bool = True, scenario: str = "bursts") -> list[EvalRun]:
    out = []
    for mode, rows in (("stock", STOCK), ("webhook", HOOK)):
        for repeat, real, real_heat, sim, sim_heat, oracle in rows:
            # every replay runs all three policies; the other mode's figures (made up here)
            # are not the agreement's: a run is compared with its own mode's replay
            other = "webhook" if mode == "stock" else "stock"
            simulated = Simulated({mode: sim * GiB, other: 999 * GiB, "oracle": oracle * GiB},
                                  {mode: sim_heat, other: 9, "oracle": 3}) if simulate else None
            out.append(EvalRun(scenario, 1, repeat, mode, metrics(real * GiB, real_heat),
                               simulated, 60.0 + repeat, True, 0, (0.0, 2.0, 4.0 + repeat)))
    return out


def test_means_and_spread_per_mode() -> None:
    [s] = summarize(runs())
    stock = s.modes["stock"].metrics["bytes_pulled"]
    assert (stock.n, stock.mean, stock.low, stock.high) == (3, 110 * GiB, 100 * GiB, 120 * GiB)
    assert stock.stdev == pytest.approx(10 * GiB)  # deviations -10, +10, 0: sqrt(200 / 2)
    hook_heat = s.modes["webhook"].metrics["heat"]
    assert (hook_heat.mean, hook_heat.low, hook_heat.high) == (4.0, 3.0, 5.0)
    assert hook_heat.stdev == pytest.approx(1.0)
    assert s.modes["stock"].metrics["heat"].stdev == 0.0
    assert s.modes["webhook"].wall_seconds.mean == 61.0
    assert s.repeats == 3 and s.seeds == (1,)


def test_share_of_the_oracle() -> None:
    [s] = summarize(runs())
    # oracle: mean of the six replays' oracle bytes = 240 / 6 = 40 GiB
    assert s.oracle_bytes == pytest.approx(40 * GiB)
    # (110 - 60) / (110 - 40)
    assert s.share_of_oracle == pytest.approx(50 / 70)
    assert s.reduction == pytest.approx(1 - 60 / 110)
    # per repeat pair: the pair's oracle is the mean of its two replays
    pairs = [40 / (100 - 40.5), 70 / (120 - 40.5), 40 / (110 - 39)]
    mean = sum(pairs) / 3
    sd = math.sqrt(sum((x - mean) ** 2 for x in pairs) / 2)
    assert s.pair_shares is not None
    assert s.pair_shares.n == 3
    assert s.pair_shares.mean == pytest.approx(mean)
    assert s.pair_shares.low == pytest.approx(min(pairs))
    assert s.pair_shares.high == pytest.approx(max(pairs))
    assert s.pair_shares.stdev == pytest.approx(sd)


def test_heat_relative_to_stock_and_the_oracles() -> None:
    [s] = summarize(runs())
    assert s.heat_vs_stock == pytest.approx(4 / 2)
    assert s.oracle_heat == 3.0


def test_simulator_agreement_and_bars() -> None:
    [s] = summarize(runs())
    got = {a.what: a for a in s.agreement}
    assert list(got) == ["stock bytes", "webhook bytes", "stock heat", "webhook heat"]
    # stock bytes: sim (105 + 115 + 112) / 3 vs real 110
    assert got["stock bytes"].relative == pytest.approx((332 / 3 - 110) / 110)
    assert got["stock bytes"].met  # +0.6 % within 5 %
    # webhook bytes: sim 205 / 3 vs 60: +13.9 %, over the 10 % bar
    assert got["webhook bytes"].relative == pytest.approx((205 / 3 - 60) / 60)
    assert got["webhook bytes"].bar == 0.10 and not got["webhook bytes"].met
    assert got["stock heat"].relative == 0.0 and got["stock heat"].met
    assert got["webhook heat"].relative == pytest.approx((11 / 3 - 4) / 4)
    assert not got["webhook heat"].met  # -8.3 % over 5 %


def test_without_replays_no_oracle_and_no_agreement() -> None:
    [s] = summarize(runs(simulate=False))
    assert s.oracle_bytes is None and s.share_of_oracle is None and s.pair_shares is None
    assert s.agreement == ()
    assert s.reduction == pytest.approx(1 - 60 / 110)
    assert "-45.5% bytes; - of the oracle\n" in table([s])


def test_share_is_undefined_when_the_oracle_saves_nothing() -> None:
    assert share_of_oracle(100.0, 80.0, 100.0) is None
    assert share_of_oracle(100.0, 80.0, 120.0) is None
    assert share_of_oracle(100.0, 80.0, 60.0) == pytest.approx(0.5)


def test_scenarios_are_summarised_apart() -> None:
    both = runs(scenario="steady") + runs(scenario="bursts")[:3]  # bursts: stock runs only
    steady, bursts = summarize(both)
    assert (steady.scenario, bursts.scenario) == ("steady", "bursts")
    assert set(bursts.modes) == {"stock"} and bursts.share_of_oracle is None
    assert steady.share_of_oracle == pytest.approx(50 / 70)


def test_table_fits_100_columns_and_says_met_or_missed() -> None:
    meta = {"kubernetesVersion": "v1.37.2", "nodes": 12, "clockScale": 20.0,
            "bandwidth": 20 << 20, "repeats": 3, "webhookArgs": ["--spread-step", "2"],
            "wallSeconds": 360.0}
    text = table(summarize(runs()), meta, [{"scenario": "bursts", "seed": 1, "mode": "stock",
                                            "repeat": 3, "error": "boom"}])
    assert max(len(line) for line in text.splitlines()) <= 100
    assert "v1.37.2" in text and "--spread-step 2" in text
    assert "71% of the oracle (repeat pairs 56%..88%" in text  # 50 / 70
    lines = {line.split()[0] + " " + line.split()[1]: line for line in text.splitlines()
             if line.startswith("    ") and "bar" in line}
    assert lines["stock bytes"].endswith("met")
    assert lines["webhook bytes"].endswith("MISSED")
    assert "1 run(s) failed: bursts seed 1 stock repeat 4" in text


def test_document_holds_every_run_and_the_summary() -> None:
    all_runs = runs()
    doc = orjson.loads(orjson.dumps(document(all_runs, summarize(all_runs), {"repeats": 3})))
    assert doc["meta"] == {"repeats": 3}
    assert len(doc["runs"]) == 6
    first = doc["runs"][0]
    assert first["metrics"]["bytes_pulled"] == 100 * GiB
    assert first["simulated"]["bytesPulled"]["oracle"] == 40 * GiB
    assert first["pullSeconds"] == [0.0, 2.0, 4.0]
    assert (first["settled"], first["writeErrors"], first["wallSeconds"]) == (True, 0, 60.0)
    [summary] = doc["summary"]
    assert summary["shareOfOracle"] == pytest.approx(50 / 70)
    assert summary["modes"]["stock"]["metrics"]["bytes_pulled"]["max"] == 120 * GiB
    assert [a["met"] for a in summary["simulatorAgreement"]] == [True, False, True, False]


def test_plots_are_written(tmp_path: Path) -> None:
    all_runs = runs() + runs(scenario="steady")
    written = plot(all_runs, summarize(all_runs), tmp_path / "plots")
    assert [p.name for p in written] == ["eval-bytes.png", "eval-pull-times.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)


def split_runs() -> list[EvalRun]:
    """The runs above, plus the opted-in ones again under the `one` split (20 GiB more each),
    with the reviews per replica and the API-server connections the balancer counted."""
    out = runs()
    for r in [r for r in out if r.mode == "webhook"]:
        sim = r.simulated
        assert sim is not None
        out.append(EvalRun(r.scenario, r.seed, r.repeat, "webhook-one",
                           metrics(r.metrics.bytes_pulled + 20 * GiB, 3), sim, 60.0, True, 0,
                           split="one", reviews=(300, 0), per_connection=(290, 10)))
    return out


def test_every_split_is_judged_against_the_same_stock_runs_and_oracle() -> None:
    [s] = summarize(split_runs())
    by_mode = {x.mode: x for x in s.splits}
    assert list(by_mode) == ["webhook", "webhook-one"]
    assert by_mode["webhook"].share_of_oracle == pytest.approx(50 / 70)
    assert by_mode["webhook-one"].share_of_oracle == pytest.approx(30 / 70)  # (110 - 80) / 70
    assert by_mode["webhook-one"].reduction == pytest.approx(1 - 80 / 110)
    assert by_mode["webhook-one"].heat.high == 3
    assert by_mode["webhook-one"].reviews == ((300, 0),) * 3
    assert by_mode["webhook-one"].connections == (2, 2, 2)
    # The replay of a `one` run is compared with the simulator's webhook policy.
    got = {a.what: a for a in s.agreement}
    assert got["webhook-one bytes"].relative == pytest.approx((205 / 3 - 80) / 80)
    text = table([s])
    assert "webhook-one" in text and "300/0 (2 conn.)" in text and "43% of the oracle" in text
    assert max(len(line) for line in text.splitlines()) <= 100
    doc = orjson.loads(orjson.dumps(document(split_runs(), [s])))
    assert doc["summary"][0]["splits"]["webhook-one"]["reviewsPerReplica"] == [[300, 0]] * 3
    assert doc["runs"][-1]["reviewsPerConnection"] == [290, 10]


def test_bind_to_running_percentiles_pool_every_pod_of_a_mode() -> None:
    """Real nodes: p50 and p95 of bind -> Running over every pod of every run of a mode
    (nearest rank), in the table and the document; none where no run measured it."""
    from dataclasses import replace

    with_running = [replace(r, running_seconds=tuple(float(x + 10 * (r.mode == "webhook"))
                                                     for x in range(1 + r.repeat, 21, 3)))
                    for r in runs()]
    [s] = summarize(with_running)
    pooled = sorted(x for r in with_running if r.mode == "stock" for x in r.running_seconds)
    assert s.modes["stock"].running == (pooled[len(pooled) // 2 - 1 + len(pooled) % 2],
                                        pooled[-(-len(pooled) * 95 // 100) - 1])
    assert s.modes["webhook"].running == (s.modes["stock"].running[0] + 10,
                                          s.modes["stock"].running[1] + 10)
    assert "bind -> Running s" in table([s])
    assert document(with_running, [s])["summary"][0]["modes"]["stock"]["runningSeconds"] == {
        "p50": s.modes["stock"].running[0], "p95": s.modes["stock"].running[1]}
    [plain] = summarize(runs())
    assert plain.modes["stock"].running is None and "bind -> Running" not in table([plain])
