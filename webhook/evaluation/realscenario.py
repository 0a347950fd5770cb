"""The evaluation's scenarios as real nodes run them: the preset sizes, the scenario realized on
the cluster's node names and registry, and its JSON for the run inside the namespace."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from webhook.evaluation.realimages import BuiltImage
from webhook.evaluation.scenario import Action, Scenario, ScenarioConfig


def preset(kind: str, nodes: int) -> ScenarioConfig:
    """The real-node scenarios: the evaluation's kinds at a size a 2-core machine runs as real
    pods (5-8 pods a node on 6 nodes), with the data set's images and its Zipf popularity.
    Deployments stay smaller than the node count, as they are on the 30-node scenarios:
    where every Deployment needs every node, every node needs every image and no placement
    can save a byte."""
    if kind == "steady":
        return ScenarioConfig(kind="steady", nodes=nodes, deployments=10, mean_replicas=3.0,
                              max_replicas=max(2, nodes - 1), pod_gap=1.0)
    return ScenarioConfig(kind="bursts", nodes=nodes, deployments=6,
                          burst=(2, max(2, nodes - 2)), scale_ups=3, updates=2, deletes=1,
                          op_gap=5.0)


def realize(scenario: Scenario, built: Mapping[str, BuiltImage], host: str,
            catalog_images: Sequence[Any], cpu_milli: int, memory: int,
            request_scale: float) -> Scenario:
    """The scenario as real nodes run it: nodes named as the cluster names them (node-1...),
    with this machine's capacity; every image by its reference in the cluster's registry; the
    pods' requests scaled (a 2-core node holds what an 8-core one would at 1/8 of the requests,
    close to the 30-node scenario's fill); the images the webhook knows (`catalog_images`)."""
    def ref(source: str) -> str:
        return built[source].ref(host) if source else source

    from webhook.devcluster.realnodes.bringup import ZONES, node_names

    names = node_names(len(scenario.nodes))
    nodes = tuple(dataclasses.replace(
        spec, name=names[i], zone=ZONES[i % len(ZONES)], cpu_milli=cpu_milli,
        memory=memory, images=tuple(ref(r) for r in spec.images))
        for i, spec in enumerate(scenario.nodes))
    actions = tuple(dataclasses.replace(
        a, image=ref(a.image), cpu_milli=max(1, round(a.cpu_milli * request_scale)),
        memory=max(1 << 20, round(a.memory * request_scale))) for a in scenario.actions)
    return Scenario(scenario.kind, scenario.seed, nodes, actions, tuple(catalog_images))


def images_used(scenario: Scenario) -> set[str]:
    """Every image reference the scenario names (its nodes' initial images included)."""
    return {r for n in scenario.nodes for r in n.images} | \
        {a.image for a in scenario.actions if a.image}


def scenario_document(scenario: Scenario) -> dict[str, Any]:
    """The scenario as JSON, for the run inside the namespace (nodes without taints)."""
    from webhook.registry.catalog import catalog_document

    if any(n.taints for n in scenario.nodes):
        raise ValueError("real-node scenarios have no taints")
    return {"kind": scenario.kind, "seed": scenario.seed,
            "nodes": [{**dataclasses.asdict(n), "labels": dict(n.labels)}
                      for n in scenario.nodes],
            "actions": [dataclasses.asdict(a) for a in scenario.actions],
            "images": catalog_document(scenario.images)["images"]}


def scenario_from(doc: Mapping[str, Any]) -> Scenario:
    from webhook.registry.catalog import parse_catalog
    from webhook.sim.workload import NodeSpec

    nodes = tuple(NodeSpec(**{**n, "taints": (), "images": tuple(n["images"])})
                  for n in doc["nodes"])
    return Scenario(doc["kind"], int(doc["seed"]), nodes,
                    tuple(Action(**a) for a in doc["actions"]),
                    tuple(parse_catalog({"images": doc["images"]})))
