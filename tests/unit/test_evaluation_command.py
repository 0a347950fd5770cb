"""`layer-locality evaluate` options and refusals (webhook/evaluation/command.py). No cluster is
started: every refusal comes before the first run."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

import pytest

from webhook.cli import _parser, main
from webhook.devcluster.binaries import kube_bin_dir, kube_version
from webhook.devcluster.processes import ClusterError
from webhook.evaluation import command
from webhook.evaluation.balancer import SPLITS
from webhook.evaluation.command import parse_scenarios, parse_splits
from webhook.evaluation.driver import scenarios, settings
from webhook.serving.wiring import demo_catalog

MiB = 1 << 20


def parse(*argv: str) -> argparse.Namespace:
    return _parser().parse_args(["evaluate", *argv])


def test_defaults() -> None:
    args = parse()
    assert args.run is command.main
    assert args.scenarios == ("steady", "bursts")
    assert args.seeds == (1,)
    assert args.repeats == 5
    assert args.bin_dir is None and args.nodes is None
    assert (args.clock_scale, args.bandwidth) == (20.0, "20MiB")
    assert (args.output, args.json_file, args.plot) == ("table", None, None)
    assert args.simulate is True and args.webhook_args == []
    assert args.splits == ("connection",)  # by connection, as a Service splits them
    run = settings(args)
    assert run.pulls.bandwidth == 20 * MiB and run.pulls.clock_scale == 20.0
    assert run.webhook_args == ()


def test_options_reach_the_settings() -> None:
    args = parse("--scenarios", "bursts", "--seeds", "2-3,7", "--repeats", "2",
                 "--clock-scale", "40", "--bandwidth", "50MiB", "--nodes", "12",
                 "--no-simulate", "--output", "json", "--json", "out.json", "--plot", "p",
                 "--bin-dir", "/opt/kube", "--webhook-arg=--spread-step",
                 "--webhook-arg", "2")
    assert args.scenarios == ("bursts",) and args.seeds == (2, 3, 7) and args.repeats == 2
    assert args.simulate is False and args.json_file == Path("out.json")
    assert args.plot == Path("p") and args.bin_dir == Path("/opt/kube")
    run = settings(args)
    assert run.pulls.bandwidth == 50 * MiB and run.pulls.clock_scale == 40.0
    assert run.webhook_args == ("--spread-step", "2")


def test_each_seed_is_its_own_scenario() -> None:
    args = parse("--scenarios", "bursts,steady", "--seeds", "1-2", "--nodes", "7")
    planned = scenarios(args, demo_catalog())
    assert [(s.kind, s.seed) for s in planned] == [("bursts", 1), ("bursts", 2),
                                                   ("steady", 1), ("steady", 2)]
    assert all(len(s.nodes) == 7 for s in planned)
    assert planned[0].actions != planned[1].actions


@pytest.mark.parametrize(("text", "expected"), [
    ("steady", ("steady",)), ("bursts,steady", ("bursts", "steady")),
    ("steady, steady", ("steady",)),
])
def test_parse_scenarios(text: str, expected: tuple[str, ...]) -> None:
    assert parse_scenarios(text) == expected


@pytest.mark.parametrize("text", ["", "burst", "steady,", "steady,other"])
def test_parse_scenarios_rejects(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError):
        parse_scenarios(text)


def test_parse_splits() -> None:
    assert parse_splits("one,even, one") == ("one", "even")
    assert parse_splits(",".join(SPLITS)) == SPLITS  # the balancer's, every one
    for bad in ("", "one,", "round-robin"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_splits(bad)
    assert parse("--splits", "even,connection").splits == ("even", "connection")


@pytest.mark.parametrize(("argv", "message"), [
    (["--repeats", "0"], "--repeats must be >= 1"),
    (["--clock-scale", "0"], "--clock-scale must be > 0"),
    (["--nodes", "0"], "--nodes must be >= 1"),
    (["--bandwidth", "fast"], "--bandwidth"),
])
def test_bad_values_are_refused_before_any_run(argv: list[str], message: str,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["evaluate", "--bin-dir", "/nonexistent", *argv], env={}) == 2
    err = capsys.readouterr().err
    assert "layer-locality: error:" in err and message in err


def test_missing_binaries_are_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                      ) -> None:
    (tmp_path / "etcd").write_text("")
    assert main(["evaluate", "--bin-dir", str(tmp_path), "--scenarios", "bursts"],
                env={}) == 2
    err = capsys.readouterr().err
    assert "lacks kube-apiserver" in err and "etcd," not in err


def test_bad_arguments_exit_through_argparse(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["evaluate", "--scenarios", "rush"], env={})
    assert exc.value.code == 2
    assert "invalid scenarios 'rush'" in capsys.readouterr().err


def test_a_missing_sim_extra_gives_the_install_hint(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def missing(*_: object) -> int:
        raise ModuleNotFoundError("No module named 'jsonpatch'", name="jsonpatch")

    monkeypatch.setattr(command, "evaluate", missing)
    assert main(["evaluate"], env={}) == 2
    err = capsys.readouterr().err
    assert "'sim' extra" in err and "missing module: jsonpatch" in err


def test_another_missing_module_is_not_hidden(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(*_: object) -> int:
        raise ModuleNotFoundError("No module named 'nothere'", name="nothere")

    monkeypatch.setattr(command, "evaluate", missing)
    with pytest.raises(ModuleNotFoundError):
        main(["evaluate"], env={})


# ---- devcluster/binaries.py ------------------------------------------------------------------

def test_the_environment_names_the_binaries(tmp_path: Path) -> None:
    assert kube_bin_dir({"LAYER_LOCALITY_KUBE_BIN": "/opt/kube/bin"}, root=tmp_path) \
        == Path("/opt/kube/bin")


def _script(root: Path, body: str) -> None:
    script = root / "hack" / "kube" / "build.sh"
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\n" + body)
    os.chmod(script, 0o755)


def test_else_the_build_script_prints_them(tmp_path: Path) -> None:
    _script(tmp_path, "echo building >&2\necho /cache/kube/v1.37.2-abc/bin\n")
    assert kube_bin_dir({}, root=tmp_path) == Path("/cache/kube/v1.37.2-abc/bin")


def test_a_failed_build_says_why(tmp_path: Path) -> None:
    _script(tmp_path, "echo 'no Go toolchain' >&2\nexit 127\n")
    with pytest.raises(ClusterError, match="no Go toolchain"):
        kube_bin_dir({}, root=tmp_path)


def test_outside_a_checkout_the_directory_must_be_named(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="LAYER_LOCALITY_KUBE_BIN"):
        kube_bin_dir({}, root=tmp_path)


def test_kube_version(tmp_path: Path) -> None:
    assert (kube_version() or "").startswith("v1.")  # the pin in hack/kube/go.mod
    (tmp_path / "hack" / "kube").mkdir(parents=True)
    (tmp_path / "hack" / "kube" / "go.mod").write_text(
        "module x\n\nrequire (\n\tk8s.io/api v0.40.1\n\tk8s.io/kubernetes v1.40.1\n)\n")
    assert kube_version(tmp_path) == "v1.40.1"
    assert kube_version(tmp_path / "elsewhere") is None


def test_each_splits_trace_is_written_under_its_own_name(tmp_path: Path) -> None:
    """--write-traces with several splits: the opted-in runs of one repeat are told apart by
    their mode (`webhook`, `webhook-one`), not written over one another."""
    from webhook.evaluation.driver import write_trace
    from webhook.evaluation.run import RunRecord

    planned = scenarios(parse("--scenarios", "bursts", "--nodes", "3"), demo_catalog())
    run_settings = settings(parse())
    record = RunRecord("webhook", "bursts", 1, 0, 20.0)
    for mode in ("webhook", "webhook-one", "webhook-even"):
        write_trace(tmp_path, record, planned[0], run_settings, mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "bursts-seed1-webhook-1.json", "bursts-seed1-webhook-even-1.json",
        "bursts-seed1-webhook-one-1.json"]
