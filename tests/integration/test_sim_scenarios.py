"""End-to-end simulator runs: the seed scenario, determinism, the webhook's real code path, the
trace format and `layer-locality simulate`. Small workloads only (the suite stays fast)."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.helpers import image, require, validate_pod
from webhook.cli import main
from webhook.core.layers import Platform
from webhook.core.pods import DECISION_ANNOTATION
from webhook.registry.catalog import StaticCatalog
from webhook.serving.wiring import demo_catalog
from webhook.sim.creation import admission_object, created_object
from webhook.sim.engine import SimConfig, book_for, compare, run
from webhook.sim.policies import WebhookPolicy
from webhook.sim.scheduler import PodView
from webhook.sim.view import ViewConfig
from webhook.sim.watch import SimWatch
from webhook.sim.workload import (
    NodeSpec,
    PodSpec,
    Trace,
    WorkloadConfig,
    generate,
    load_trace,
    trace_document,
)
from webhook.sim.world import World

MiB = 1 << 20
AMD64 = Platform.parse("linux/amd64")
IMG1 = image("docker.io/library/img1:1", {AMD64: [("L1", 100 * MiB), ("L2", 50 * MiB),
                                                   ("L3", 10 * MiB)]})
IMG2 = image("docker.io/library/img2:1", {AMD64: [("L1", 100 * MiB), ("L2", 50 * MiB),
                                                   ("L4", 10 * MiB)]})
IMG1_BYTES = 160 * MiB
IMG2_BYTES = 160 * MiB
SMALL = WorkloadConfig(seed=7, nodes=8, hours=0.5, workloads_per_hour=60)


def seed_trace() -> Trace:
    """Img1 = L1,L2,L3; Img2 = L1,L2,L4; pods request a whole node. P1 and P2 land on two
    nodes, P2 ends, then P1' (Img1) arrives while P1 still runs."""
    nodes = tuple(NodeSpec(name=f"N{i}", cpu_milli=4000) for i in (1, 2, 3))

    def pod(name: str, ref: str, arrival: float, duration: float) -> PodSpec:
        return PodSpec(name=name, workload=name, kind="Pod", arrival=arrival, images=(ref,),
                       duration=duration, cpu_milli=4000)

    pods = (pod("P1", IMG1.ref, 0, 100_000), pod("P2", IMG2.ref, 1, 60),
            pod("P1-again", IMG1.ref, 1000, 60))
    return Trace(nodes=nodes, pods=pods, images=(IMG1, IMG2))


@pytest.mark.parametrize("policy", ["webhook", "plugin", "oracle", "greedy"])
def test_seed_scenario_layer_aware_policies_reuse_the_img2_node(policy: str) -> None:
    for seed in range(5):
        result = run(seed_trace(), policy, StaticCatalog(), SimConfig(seed=seed))
        where = result.placements
        assert len({where["P1"], where["P2"]}) == 2
        assert where["P1-again"] == where["P2"], (seed, where)
        # P1 and P2 pull their whole image onto empty nodes; P1-again only lacks L3.
        assert result.bytes_pulled == IMG1_BYTES + IMG2_BYTES + 10 * MiB


def test_seed_scenario_stock_cannot_tell_the_nodes_apart() -> None:
    picks = set()
    for seed in range(10):
        result = run(seed_trace(), "stock", StaticCatalog(), SimConfig(seed=seed))
        others = {"N1", "N2", "N3"} - {result.placements["P1"]}
        assert result.placements["P1-again"] in others
        picks.add(result.placements["P1-again"] == result.placements["P2"])
    assert picks == {True, False}  # a coin flip: ImageLocality sees no Img1 there


def test_seed_scenario_webhook_patch_is_valid_and_prefers_the_img2_node() -> None:
    trace = seed_trace()
    book = book_for(trace, StaticCatalog())
    world = World(trace.nodes, book)
    world.bind(trace.pods[0], None, "N1", 0.0)
    run2, _ = world.bind(trace.pods[1], None, "N2", 1.0)
    world.finish(run2, None, 61.0)
    world.report("N2", IMG2.ref)
    # The webhook starts now: its initial node list shows Img2 on N2; every image is known.
    policy = WebhookPolicy(world, SimWatch(), 0, SimConfig().scoring,
                           view=ViewConfig(registry_delay=0.0))
    try:
        spec = trace.pods[2]
        admitted = admission_object(spec)
        patched = policy.admit(admitted, 1000.0)
        assert policy.patched == 1
        assert patched is not admitted and "affinity" not in admitted["spec"]
        validate_pod(patched)
        assert DECISION_ANNOTATION in patched["metadata"]["annotations"]
        result = policy.schedule(PodView.of(created_object(patched, spec)), 1000.0)
        assert result.node == "N2"
        assert result.scores["N2"] > result.scores["N3"]
    finally:
        policy.close()


def test_generated_workload_is_deterministic_and_round_trips() -> None:
    base = demo_catalog()
    one = generate(SMALL, base.images())
    two = generate(SMALL, base.images())
    assert trace_document(one) == trace_document(two)
    assert one.pods and one.images
    again = load_trace(orjson.loads(orjson.dumps(trace_document(one))))
    assert trace_document(again) == trace_document(one)
    assert trace_document(generate(WorkloadConfig(seed=8, nodes=8, hours=0.5),
                                   base.images())) != trace_document(one)


def test_compare_is_deterministic_and_every_pod_is_accounted() -> None:
    base = demo_catalog()
    trace = generate(SMALL, base.images())
    policies = ["stock", "webhook", "plugin", "oracle", "greedy"]
    first = compare(trace, base, policies, SimConfig(seed=3))
    second = compare(trace, base, policies, SimConfig(seed=3))
    for name in policies:
        a, b = first[name], second[name]
        assert a.placements == b.placements
        assert a.bytes_pulled == b.bytes_pulled
        assert a.scheduled + a.unscheduled == len(trace.pods)
        assert len(a.pull_times) == a.scheduled
        assert 0 <= a.bytes_pulled <= a.bytes_needed
    assert first["webhook"].patched > 0
    # Knowing exactly what is on every node, greedy never pulls more than a cold placement.
    assert first["greedy"].bytes_pulled <= first["stock"].bytes_pulled


def test_webhook_patched_pods_validate() -> None:
    """Controller pods as admission sees them (generateName, no name or uid), patched by the
    real review path: the result passes the schema and the API server's affinity rules."""
    base = demo_catalog()
    trace = generate(SMALL, base.images())
    world = World(trace.nodes, book_for(trace, base))
    policy = WebhookPolicy(world, SimWatch(), 0, SimConfig().scoring,
                           view=ViewConfig(registry_delay=0.0))
    kinds = set()
    try:
        for spec in trace.pods[:60]:
            admitted = admission_object(spec)
            before = policy.patched
            patched = policy.admit(admitted, spec.arrival)
            if policy.patched > before:
                kinds.add(spec.kind)
                assert "name" not in patched["metadata"] and "uid" not in patched["metadata"]
                validate_pod(patched)
    finally:
        policy.close()
    # nodes start with popular images preloaded, so some of the first pods must be patched
    assert kinds == {"Deployment", "Job"}


def test_simulate_command_json_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                         ) -> None:
    require("matplotlib", "matplotlib draws the --plot PNGs")
    trace_file = tmp_path / "trace.json"
    code = main(["simulate", "--nodes", "6", "--hours", "0.3", "--rate", "40",
                 "--output", "json", "--plot", str(tmp_path), "--write-trace", str(trace_file)],
                env={})
    assert code == 0
    doc = orjson.loads(capsys.readouterr().out)
    [seed] = doc["seeds"]
    assert [p["policy"] for p in seed["policies"]] == ["stock", "webhook", "plugin", "oracle",
                                                       "greedy"]
    assert seed["policies"][0]["reductionVsStock"] == 0
    for name in ("sim-bytes-over-time.png", "sim-pull-time-cdf.png"):
        png = tmp_path / name
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert png.stat().st_size < 200_000
    code = main(["simulate", "--trace", str(trace_file), "--policies", "stock,webhook"], env={})
    assert code == 0
    assert "webhook" in capsys.readouterr().out


def test_simulate_rejects_unknown_policy(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["simulate", "--policies", "nope", "--nodes", "3", "--hours", "0.1"], env={}) == 2
    assert "unknown policies" in capsys.readouterr().err
