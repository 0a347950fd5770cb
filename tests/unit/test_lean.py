"""Pod list pages decoded to the projection (webhook/inventory/lean.py) give every reader the
same answer as the whole page does."""

from __future__ import annotations

from typing import Any

import orjson

from tests.helpers import pod
from webhook.core.pods import DECISION_ANNOTATION, decision_id, pod_images, pod_owner
from webhook.inventory import lean
from webhook.inventory.podstate import BoundPods, uid_key
from webhook.telemetry.binds import decision_facts, webhook_terms

DECISION = orjson.dumps({"v": 1, "id": "d-1", "podBytes": 300, "meanBytes": 100,
                         "preferredNodes": 2, "top": [], "terms": 1}).decode()


def pods() -> list[dict[str, Any]]:
    full = pod(["app:1", "sidecar:2"], name="web-abc12", namespace="shop",
               init_images=["init:3"])
    full["metadata"].update(
        uid="uid-1", generateName="web-", resourceVersion="7", labels={"app": "web"},
        annotations={DECISION_ANNOTATION: DECISION, "other": "x"},
        ownerReferences=[{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web",
                          "uid": "owner-1", "controller": True}],
        managedFields=[{"manager": "kubelet", "fieldsV1": {"f:status": {}}}])
    full["spec"].update(nodeName="n1", tolerations=[{"operator": "Exists"}], affinity={
        "nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 40, "preference": {"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1", "n2"]}]}}]}})
    full["spec"]["containers"][0].update(env=[{"name": "A", "value": "1"}],
                                         resources={"requests": {"cpu": "1"}})
    full["status"] = {"phase": "Running", "podIP": "10.0.0.1", "containerStatuses": [
        {"name": "c0", "imageID": "app@sha256:00", "state": {"running": {}}}]}
    finished = pod(["job:1"], name="job-x")
    finished["metadata"]["uid"] = "uid-2"
    finished["spec"]["nodeName"] = "n2"
    finished["status"] = {"phase": "Succeeded"}
    bare = {"metadata": {"name": "bare", "namespace": "ns"}}  # no uid, spec or status
    unbound = pod(["app:1"], name="pending")
    return [full, finished, bare, unbound]


def readers(obj: Any) -> tuple[Any, ...]:
    facts = decision_facts(obj)
    return (uid_key(obj), BoundPods().of(obj), pod_images(obj), pod_owner(obj), decision_id(obj),
            facts, webhook_terms(obj, facts.terms if facts else None))


def test_every_reader_answers_the_same_on_the_projection() -> None:
    page = orjson.dumps({"kind": "PodList", "metadata": {"resourceVersion": "9",
                                                         "continue": "tok"},
                         "items": pods()})
    whole, projected = orjson.loads(page), lean.pod_list(page)
    assert projected["metadata"] == whole["metadata"]
    assert len(projected["items"]) == len(whole["items"])
    for full, lean_obj in zip(whole["items"], projected["items"], strict=True):
        assert readers(lean_obj) == readers(full)
    assert "managedFields" not in projected["items"][0]["metadata"]  # it did leave out
    assert "env" not in projected["items"][0]["spec"]["containers"][0]


def test_a_page_of_unexpected_shape_is_decoded_whole() -> None:
    odd = pod(["app:1"], name="odd")
    odd["spec"]["containers"] = "not a list"
    page = orjson.dumps({"metadata": {}, "items": [*pods(), odd]})
    assert lean.pod_list(page) == orjson.loads(page)


def test_nodes_read_the_same_from_the_projection() -> None:
    from tests.helpers import AMD64, image, node_object
    from webhook.core.layers import Platform
    from webhook.core.nodes import node_from_object

    app = image("registry.example.com/app:1", {AMD64: [("app", 1)]})
    plain = node_object("n1", [app])
    tainted = node_object("n2", [app], platform=Platform.of("linux", "arm64", "v8"),
                          hostname="host-2", unschedulable=True,
                          taints=[{"key": "k", "value": "v", "effect": "NoSchedule"},
                                  {"key": "soft", "effect": "PreferNoSchedule"}])
    tainted["status"].update(conditions=[{"type": "Ready", "status": "True"}],
                             capacity={"cpu": "4"}, addresses=[{"type": "Hostname"}])
    by_label = {"metadata": {"name": "n3", "labels": {"kubernetes.io/os": "windows",
                                                      "kubernetes.io/arch": "amd64"}}}
    page = orjson.dumps({"metadata": {"resourceVersion": "3"},
                         "items": [plain, tainted, by_label]})
    whole, projected = orjson.loads(page), lean.node_list(page)
    assert [node_from_object(n) for n in projected["items"]] == [
        node_from_object(n) for n in whole["items"]]
    assert "conditions" not in projected["items"][1]["status"]
