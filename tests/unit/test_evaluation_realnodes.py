"""The evaluation on real nodes, its pure parts: images rebuilt with the data set's sizes and
sharing (realimages.py), the scenario as real nodes run it, registry bytes attributed to pods
and the kubelets' events read into the measure's input (realrun.py), and the stand-in compared
with real runs (standin.py)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from webhook.core.layers import ImageLayers, Layer, Platform, PlatformLayers
from webhook.devcluster.realnodes import oci
from webhook.devcluster.realnodes.bringup import ZONES
from webhook.evaluation import realimages, standin
from webhook.evaluation.attribution import PodTimes, attribute_bytes, starts_from
from webhook.evaluation.kubelet import PodStart
from webhook.evaluation.measure import RunMetrics
from webhook.evaluation.pulls import ImagePull
from webhook.evaluation.realcommand import check_options, per_scenario_apps
from webhook.evaluation.realrun import RealExtras, record_document, record_from
from webhook.evaluation.realscenario import (
    images_used,
    preset,
    realize,
    scenario_document,
    scenario_from,
)
from webhook.evaluation.report import EvalRun
from webhook.evaluation.run import PodSeen, RunRecord
from webhook.evaluation.scenario import generate
from webhook.registry.catalog import StaticCatalog
from webhook.serving.wiring import demo_catalog

AMD64 = Platform.parse("linux/amd64")
HOST = "198.18.0.1:5000"
PAUSE = oci.files_layer({"/pause": (b"\x7fELF pause stand-in", 0o755)})


def image(ref: str, *layers: tuple[str, int]) -> ImageLayers:
    digest = "sha256:" + f"{abs(hash(ref)):064x}"[-64:]
    return ImageLayers(ref=ref, digest=digest, platforms={AMD64: PlatformLayers(
        digest=digest, layers=tuple(Layer(d, s) for d, s in layers))})


BASE = ("sha256:" + "1" * 64, 30_000)
DEPS = ("sha256:" + "2" * 64, 20_000)
CODE_A = ("sha256:" + "3" * 64, 5_000)
CODE_B = ("sha256:" + "4" * 64, 7_000)


@pytest.mark.parametrize(("ref", "expected"), [
    ("docker.io/library/python:3.11", ("library/python", "3.11")),
    ("python:3.11", ("library/python", "3.11")),
    ("python", ("library/python", "latest")),
    ("registry.example.com/team/burst-00:v2", ("team/burst-00", "v2")),
    ("localhost/app:1", ("library/app", "1")),
    ("host:5000/a/b/C:x", ("a/b/c", "x")),
    ("team/app:v1", ("team/app", "v1")),
])
def test_repository_and_tag(ref: str, expected: tuple[str, str]) -> None:
    assert realimages.repository_and_tag(ref) == expected


def test_a_reference_by_digest_is_refused() -> None:
    with pytest.raises(ValueError, match="by digest"):
        realimages.repository_and_tag("python@sha256:" + "0" * 64)


def test_built_images_keep_sizes_and_exact_sharing(tmp_path: Path) -> None:
    app_a = image("registry.example.com/team/a:v1", BASE, DEPS, CODE_A)
    app_b = image("registry.example.com/team/b:v1", BASE, DEPS, CODE_B)
    base = image("docker.io/library/debian:12", BASE)
    built = realimages.build([app_a, app_b, base], 1.0, PAUSE,
                             realimages.LayerCache(tmp_path))
    a, b, d = (built[i.ref] for i in (app_a, app_b, base))
    # The pause layer first, then one built layer per data-set layer, sizes kept (+-200 B).
    assert [x.digest for x in a.layers][:1] == [PAUSE.digest]
    assert [x.source_size for x in a.layers[1:]] == [30_000, 20_000, 5_000]
    assert all(abs(x.size - x.source_size) <= 200 for x in a.layers[1:])
    # Shared data-set layers are the same blobs; the others differ.
    assert a.layers[1:3] == b.layers[1:3] and a.layers[1] == d.layers[1]
    assert a.layers[3].digest != b.layers[3].digest
    # The blobs on disk hash to their digests, and an image reads back whole.
    pushed = a.oci_image(tmp_path / "blobs")
    assert [x.digest for x in pushed.layers] == [x.digest for x in a.layers]
    assert a.config_digest() == pushed.config_digest
    assert a.manifest_digest() == pushed.digest


def test_scaled_images_tell_the_webhook_the_data_sets_sizes(tmp_path: Path) -> None:
    app = image("registry.example.com/team/a:v1", BASE, DEPS)
    built = realimages.build([app], 0.25, PAUSE, realimages.LayerCache(tmp_path))
    layers = built[app.ref].layers[1:]
    assert all(abs(x.size - s // 4) <= 200 for x, s in zip(layers, (30_000, 20_000), strict=True))
    (catalog,) = realimages.webhook_catalog(built, HOST)
    assert catalog.ref == f"{HOST}/team/a:v1"
    manifest = catalog.for_platform(AMD64)
    assert manifest is not None
    assert [(x.digest, x.size) for x in manifest.layers] == \
        [(PAUSE.digest, PAUSE.size), (layers[0].digest, 30_000), (layers[1].digest, 20_000)]
    assert catalog.digest == built[app.ref].manifest_digest()
    # The document round-trips.
    again = realimages.from_document(json.loads(json.dumps(realimages.document(built))))
    assert again == built


def test_a_cached_layer_is_not_generated_again(tmp_path: Path) -> None:
    cache = realimages.LayerCache(tmp_path)
    first = cache.filler("label", 4096)
    blob = tmp_path / "blobs" / first[0].removeprefix("sha256:")
    blob.write_bytes(b"tampered")  # a cache hit reads the index, not the blob's content
    assert cache.filler("label", 4096) == first
    blob.unlink()  # a missing blob is made again
    assert cache.filler("label", 4096) == first and blob.read_bytes() != b"tampered"


def test_two_sources_cannot_share_a_repository_and_tag(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="would both be"):
        realimages.build([image("docker.io/library/x:1", BASE), image("quay.io/library/x:1",
                                                                       DEPS)],
                         1.0, PAUSE, realimages.LayerCache(tmp_path))


def test_scale_out_of_range_is_refused(tmp_path: Path) -> None:
    for scale in (0.0, 1.5):
        with pytest.raises(ValueError, match="scale"):
            realimages.build([], scale, PAUSE, realimages.LayerCache(tmp_path))


def test_realize_names_real_nodes_registry_images_and_scaled_requests(tmp_path: Path) -> None:
    official = demo_catalog()
    scenario = generate(dataclasses.replace(preset("bursts", 4), seed=3), official.images())
    full = {i.ref: i for i in [*official.images(), *scenario.images]}
    built = realimages.build([full[r] for r in sorted(images_used(scenario))], 0.001, PAUSE,
                             realimages.LayerCache(tmp_path))
    real = realize(scenario, built, HOST, [], 2000, 1 << 34, 0.125)
    assert [n.name for n in real.nodes] == ["node-1", "node-2", "node-3", "node-4"]
    assert [n.zone for n in real.nodes] == [ZONES[(i - 1) % 3] for i in range(1, 5)]
    assert all(n.cpu_milli == 2000 for n in real.nodes)
    for before, after in zip(scenario.nodes, real.nodes, strict=True):
        assert after.images == tuple(built[r].ref(HOST) for r in before.images)
    for action, done in zip(scenario.actions, real.actions, strict=True):
        assert (done.op, done.at, done.deployment, done.replicas) == \
            (action.op, action.at, action.deployment, action.replicas)
        assert done.image == (built[action.image].ref(HOST) if action.image else "")
        assert done.cpu_milli == round(action.cpu_milli / 8)


def test_real_presets_keep_deployments_smaller_than_the_cluster() -> None:
    bursts = preset("bursts", 6)
    assert bursts.burst[1] < 6 and bursts.nodes == 6
    assert preset("steady", 6).max_replicas < 6


def test_the_scenario_round_trips_through_json(tmp_path: Path) -> None:
    official = demo_catalog()
    scenario = generate(dataclasses.replace(preset("steady", 3), seed=2), official.images())
    assert scenario.images  # app images, as ImageLayers
    again = scenario_from(json.loads(json.dumps(scenario_document(scenario))))
    assert again == scenario


def test_a_blob_counts_for_the_first_pod_bound_on_its_node() -> None:
    pods = [("b", "n1", 2.0, {"x", "y"}), ("a", "n1", 1.0, {"x"}), ("c", "n2", 1.5, {"x"}),
            ("d", "n2", 3.0, {"z"})]
    fetched = {"n1": [("x", 100), ("y", 50)], "n2": [("x", 100), ("q", 7)]}
    # a: first on n1 with x; b: only y is left; c: n2's x; d: nothing of z was fetched
    assert attribute_bytes(pods, fetched) == {"a": 100, "b": 50, "c": 100, "d": 0}


def test_a_blob_fetched_twice_counts_twice() -> None:
    assert attribute_bytes([("a", "n1", 0.0, {"x"})], {"n1": [("x", 10), ("x", 10)]}) == \
        {"a": 20}


def _event(uid: str, message: str) -> dict[str, object]:
    return {"reason": "Pulled", "involvedObject": {"kind": "Pod", "uid": uid},
            "message": message, "count": 1}


def test_starts_read_the_kubelets_events_and_the_registry() -> None:
    img = f"{HOST}/library/python:3.11"
    pods = {u: PodSeen(u, f"p{u}", "ReplicaSet/web-1", 0.0, 10, 1 << 20, (img,))
            for u in ("1", "2", "3", "4")}
    pods["3"].gone = 7.0
    times = {"1": PodTimes("n1", 1.0, 6.0), "2": PodTimes("n1", 2.0, 3.0),
             "3": PodTimes("n2", 1.0, None),  # deleted at 7 s before it ran
             "4": PodTimes("", None, None)}  # never bound: no start
    events: list[dict[str, object]] = [
        _event("1", f'Successfully pulled image "{img}" in 4.2s (4.5s including waiting). '
                    "Image size: 123 bytes."),
        _event("2", f'Container image "{img}" already present on machine'),
        {"reason": "Scheduled", "involvedObject": {"kind": "Pod", "uid": "1"}, "message": ""},
    ]
    starts, running = starts_from(pods, times, events, {img: {"x", "y"}},
                                  {"n1": [("x", 1000), ("y", 24)], "n2": [("x", 1000)]})
    assert [(s.uid, s.node, s.bound, s.bytes) for s in starts] == \
        [("1", "n1", 1.0, 1024), ("3", "n2", 1.0, 1000), ("2", "n1", 2.0, 0)]
    assert [(p.present, p.pull_seconds) for p in starts[0].pulls] == [(False, 4.5)]
    assert starts[0].pull_seconds == pytest.approx(4.5)
    assert [(p.present, p.pull_seconds) for p in starts[1].pulls] == [(False, 6.0)]
    assert [(p.present, p.pull_seconds) for p in starts[2].pulls] == [(True, 0.0)]
    assert running == {"1": 5.0, "2": 1.0}


def test_the_record_round_trips_through_json() -> None:
    record = RunRecord("webhook", "bursts", 2, 1, 1.0)
    record.pods["u"] = PodSeen("u", "p", "ReplicaSet/x", 1.5, 10, 20, ("a", "b"),
                               {"by": "r1"}, 9.0)
    record.starts.append(PodStart("ns", "p", "u", "n1", "ReplicaSet/x", 2.0, 3.0, (
        ImagePull("a", False, 10, 1, 2.0, 2.0, 3.0),)))
    record.ends["u"] = 9.0
    record.webhook_reviews = [3, 4]
    extras = RealExtras({"n1": 10}, {"n1": 1}, {"u": 1.0}, 2.0, 3.0)
    assert record_from(json.loads(json.dumps(record_document(record, extras)))) == \
        (record, extras)


def _run(scenario: str, mode: str, nbytes: int, heat: int, no_pull: int,
         per_node: tuple[tuple[str, int, int], ...]) -> EvalRun:
    metrics = RunMetrics(pods=10, bytes_pulled=nbytes, no_pull=no_pull, pull_mean=0.0,
                         pull_p50=0.0, pull_p95=0.0, heat=heat, balance=0.0, unscheduled=0,
                         patched=0)
    return EvalRun(scenario, 1, 0, mode, metrics, None, 1.0, True, 0, per_node=per_node)


def test_the_stand_in_is_compared_per_scenario_and_mode() -> None:
    runs = [
        _run("bursts", "stock", 1000, 4, 5, (("n1", 600, 3), ("n2", 400, 1))),
        _run("bursts", "stock", 1200, 4, 5, (("n1", 600, 3), ("n2", 600, 3))),
        _run("bursts (stand-in)", "stock", 1050, 5, 6, (("n1", 1050, 2),)),
        _run("bursts", "webhook", 500, 3, 8, ()),  # no stand-in run of this mode
    ]
    (c,) = standin.compare(runs, " (stand-in)")
    assert (c.scenario, c.mode, c.runs) == ("bursts", "stock", (2, 1))
    rows = {r.measure: r for r in c.rows}
    assert (rows["bytes"].real, rows["bytes"].stand_in) == (1100, 1050)
    assert rows["bytes"].agrees  # -4.5 %
    assert rows["heat"].relative == pytest.approx(0.25) and not rows["heat"].agrees
    assert rows["downloading pods per node"].real == pytest.approx(2.5)
    assert rows["pods that pulled nothing"].stand_in == pytest.approx(0.6)
    assert "DIFFERS" in standin.table([c]) and standin.comparison_doc(c)["rows"][1]["agrees"] \
        is False


@pytest.mark.parametrize(("real", "stand_in", "relative", "agrees"), [
    (0.0, 0.0, 0.0, True), (0.0, 1.0, None, False), (10.0, 11.0, 0.1, True),
    (10.0, 8.9, -0.11, False)])
def test_a_rows_relative_difference(real: float, stand_in: float, relative: float | None,
                                    agrees: bool) -> None:
    row = standin.Row("heat", real, stand_in)
    assert row.relative == (None if relative is None else pytest.approx(relative))
    assert row.agrees is agrees


def test_each_scenario_names_its_own_app_images() -> None:
    official = demo_catalog()
    one, two = (per_scenario_apps(generate(dataclasses.replace(preset("bursts", 6), seed=s),
                                           official.images())) for s in (1, 2))
    apps_one, apps_two = {i.ref for i in one.images}, {i.ref for i in two.images}
    assert apps_one and not apps_one & apps_two
    assert all("/bursts1-" in r for r in apps_one)
    official_refs = {i.ref for i in official.images()}
    for action in one.actions:  # every image an action names is official or its own app
        assert not action.image or action.image in apps_one | official_refs
    # Apps of the same original name in the two seeds differ in content: in one catalog
    # (what a run of both seeds builds from) each keeps its own digest and layers.
    both = StaticCatalog([*one.images, *two.images])
    assert sorted(i.ref for i in both.images()) == sorted(apps_one | apps_two)
    digests = [i.digest for i in (*one.images, *two.images)]
    assert len(set(digests)) == len(digests)


@pytest.mark.parametrize(("argv", "error"), [
    (["--real-nodes", "3", "--nodes", "5"], "--nodes: not with --real-nodes"),
    (["--real-nodes", "3", "--clock-scale", "5"], "--clock-scale: not with --real-nodes"),
    (["--stand-in"], "--stand-in: only with --real-nodes"),
    (["--scale", "0.5"], "--scale: only with --real-nodes"),
])
def test_options_of_the_other_kind_of_evaluation_are_refused(argv: list[str],
                                                             error: str) -> None:
    import argparse

    from webhook.config import ConfigError
    from webhook.evaluation import command

    parser = argparse.ArgumentParser()
    command.add_parser(parser.add_subparsers())
    args = parser.parse_args(["evaluate", *argv])
    with pytest.raises(ConfigError, match=error):
        check_options(args)
    check_options(parser.parse_args(["evaluate"]))  # the defaults pass
    check_options(parser.parse_args(["evaluate", "--real-nodes", "2", "--stand-in"]))


def test_real_runs_read_back_from_an_evaluations_json(tmp_path: Path) -> None:
    from webhook.config import ConfigError
    from webhook.evaluation.realcommand import recorded_runs
    from webhook.evaluation.report import document, run_doc, run_from_doc, summarize

    run = dataclasses.replace(
        _run("bursts", "webhook", 500, 3, 8, (("node-1", 400, 2), ("node-2", 100, 1))),
        running_seconds=(1.5, 2.0), registry_bytes=501, cpu_busy=0.4, reviews=(3, 4))
    assert run_from_doc(json.loads(json.dumps(run_doc(run)))) == run
    runs = [run, dataclasses.replace(run, seed=2), dataclasses.replace(run, repeat=1)]
    path = tmp_path / "real.json"
    path.write_text(json.dumps(document(runs, summarize(runs), {"realNodes": 6})))
    official = demo_catalog()
    planned = [generate(dataclasses.replace(preset("bursts", 6), seed=1), official.images())]
    assert recorded_runs(path, planned, 1) == [run]  # seed 1, first repeat only
    assert len(recorded_runs(path, planned, 2)) == 2
    steady = generate(dataclasses.replace(preset("steady", 6), seed=1), official.images())
    with pytest.raises(ConfigError, match="no real runs of steady seed 1"):
        recorded_runs(path, [*planned, steady], 1)
    path.write_text(json.dumps(document(runs, summarize(runs), {})))
    with pytest.raises(ConfigError, match="not the JSON of a real-node evaluation"):
        recorded_runs(path, planned, 1)
