"""`layer-locality simulate` options: seed lists, held-out seeds, the realism switches."""

from __future__ import annotations

import argparse

import orjson
import pytest

from webhook.cli import main
from webhook.sim.command import parse_seeds


@pytest.mark.parametrize(("text", "seeds"), [
    ("1", (1,)), ("1-5", (1, 2, 3, 4, 5)), ("6-10", (6, 7, 8, 9, 10)), ("3,1,2", (3, 1, 2)),
    ("1-3,8", (1, 2, 3, 8)), ("2,2,1-2", (2, 1)),
])
def test_parse_seeds(text: str, seeds: tuple[int, ...]) -> None:
    assert parse_seeds(text) == seeds


@pytest.mark.parametrize("text", ["", "a", "5-1", "1-", "-3", "1,,2"])
def test_parse_seeds_rejects(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_seeds(text)


TINY = ["simulate", "--nodes", "4", "--hours", "0.2", "--rate", "30", "--output", "json"]


def test_tuning_and_held_out_seeds_are_reported_separately(capsys: pytest.CaptureFixture[str]
                                                           ) -> None:
    assert main([*TINY, "--policies", "stock,webhook,oracle", "--seeds", "1-2",
                 "--held-out", "3"], env={}) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert [(s["seed"], s["group"]) for s in doc["seeds"]] == [
        (1, "tuning"), (2, "tuning"), (3, "held-out")]
    assert doc["summary"]["tuning"]["seeds"] == [1, 2]
    assert doc["summary"]["held-out"]["seeds"] == [3]
    held = {p["policy"]: p for p in doc["summary"]["held-out"]["policies"]}
    [seed3] = [s for s in doc["seeds"] if s["seed"] == 3]
    hook3 = next(p for p in seed3["policies"] if p["policy"] == "webhook")
    # one held-out seed: its summary is that seed's figures
    assert held["webhook"]["reductionVsStock"]["mean"] == hook3["reductionVsStock"]
    assert held["webhook"]["maxHeat"] == hook3["maxPodsOfOneWorkloadPerNode"]
    assert doc["meta"]["bursts"] is True and doc["meta"]["view"]["watch_delay"] == 1.0


def test_realism_switches_reach_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*TINY, "--policies", "webhook", "--no-bursts", "--watch-delay", "0.25",
                 "--registry-delay", "0"], env={}) == 0
    meta = orjson.loads(capsys.readouterr().out)["meta"]
    assert meta["bursts"] is False
    assert meta["view"]["watch_delay"] == 0.25 and meta["view"]["registry_delay"] == 0.0


@pytest.mark.parametrize("args", [["--seeds", "1-3", "--held-out", "3"],
                                  ["--watch-delay", "-1"]])
def test_bad_combinations_are_refused(args: list[str], capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    assert main([*TINY, "--policies", "stock", *args], env={}) == 2
    assert "layer-locality: error:" in capsys.readouterr().err
