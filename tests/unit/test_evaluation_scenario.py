"""Scenarios for the evaluation on the real scheduler (webhook/evaluation/scenario.py), generated
from the embedded catalog of real official images."""

from __future__ import annotations

from functools import cache

import pytest

from webhook.core.layers import Platform
from webhook.evaluation.scenario import Action, Scenario, ScenarioConfig, generate
from webhook.registry.catalog import StaticCatalog
from webhook.serving.wiring import demo_catalog

AMD64 = Platform.parse("linux/amd64")
SEEDS = (1, 2, 3, 7)


@cache
def official() -> StaticCatalog:
    return demo_catalog()


def scenario(kind: str, seed: int) -> Scenario:
    config = ScenarioConfig(kind="steady" if kind == "steady" else "bursts", seed=seed)
    return generate(config, official().images())


@pytest.mark.parametrize("kind", ["steady", "bursts"])
def test_the_same_seed_gives_the_same_scenario(kind: str) -> None:
    assert scenario(kind, 3) == scenario(kind, 3)
    assert scenario(kind, 3).actions != scenario(kind, 4).actions


def _replicas(actions: tuple[Action, ...]) -> list[tuple[Action, int]]:
    """Each create/scale with the replicas the Deployment had before (0 for a create);
    asserts every scale/update/delete names a Deployment that exists at that moment."""
    live: dict[str, int] = {}
    out = []
    for a in actions:
        if a.op == "create":
            assert a.deployment not in live, a
            out.append((a, 0))
            live[a.deployment] = a.replicas
        else:
            assert a.deployment in live, f"{a.op} of {a.deployment}, which does not exist"
            if a.op == "scale":
                out.append((a, live[a.deployment]))
                live[a.deployment] = a.replicas
            elif a.op == "delete":
                del live[a.deployment]
    return out


@pytest.mark.parametrize("seed", SEEDS)
def test_bursts_sizes_and_targets(seed: int) -> None:
    s = scenario("bursts", seed)
    low, high = ScenarioConfig().burst
    grown = _replicas(s.actions)
    assert grown
    for action, before in grown:
        assert low <= action.replicas - before <= high, action
    assert {a.op for a in s.actions} == {"create", "scale", "update", "delete"}
    assert [a.at for a in s.actions] == sorted(a.at for a in s.actions)


@pytest.mark.parametrize("seed", SEEDS)
def test_steady_adds_one_pod_per_action(seed: int) -> None:
    s = scenario("steady", seed)
    grown = _replicas(s.actions)
    assert len(grown) == len(s.actions)  # creations and scale-ups only
    for action, before in grown:
        assert action.replicas == before + 1, action
    assert len({a.deployment for a in s.actions}) == ScenarioConfig().deployments
    gaps = {round(b.at - a.at, 3) for a, b in zip(s.actions, s.actions[1:], strict=False)}
    assert gaps == {ScenarioConfig().pod_gap}


@pytest.mark.parametrize("kind", ["steady", "bursts"])
@pytest.mark.parametrize("seed", SEEDS)
def test_images_are_official_or_built_from_official_ones(kind: str, seed: int) -> None:
    s = scenario(kind, seed)
    refs = {i.ref: i for i in official().images()}
    apps = {i.ref: i for i in s.images}
    used = [a.image for a in s.actions if a.op in ("create", "update")]
    assert any(ref in refs for ref in used)
    for ref in used:
        if ref in refs:
            continue
        app = apps[ref]  # an app image: its base's real layers, then its own
        layers = app.for_platform(AMD64)
        assert layers is not None
        bases = [len(m.layers) for b in refs.values() if (m := b.for_platform(AMD64))
                 is not None and layers.layers[:len(m.layers)] == m.layers]
        assert bases, f"{ref} is not built FROM an official image"
        assert len(layers.layers) == max(bases) + 2  # dependencies and code
    for node in s.nodes:
        assert node.images and all(ref in refs for ref in node.images)


def test_node_count_and_zones_follow_the_config() -> None:
    s = generate(ScenarioConfig(kind="bursts", seed=1, nodes=7, zones=3), official().images())
    assert [n.name for n in s.nodes] == [f"node-{i:03d}" for i in range(7)]
    assert {n.zone for n in s.nodes} == {"zone-a", "zone-b", "zone-c"}
