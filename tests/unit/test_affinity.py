"""Patches for every pod shape: only adds, existing affinity kept, result valid."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest

from tests.helpers import apply_patch, pod, preferred_terms, validate_pod
from webhook.core.affinity import PREFERRED, PreferredTerm, affinity_patch, escape_pointer
from webhook.core.pods import DECISION_ANNOTATION

TERMS = [PreferredTerm(60, ("node-b", "node-a")), PreferredTerm(40, ())]
DECISION = orjson.dumps({"v": 1}).decode()
EXISTING_PREFERRED = {
    "weight": 7,
    "preference": {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
}
REQUIRED = {
    "nodeSelectorTerms": [
        {"matchExpressions": [{"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}
    ]
}
POD_AFFINITY = {
    "podAntiAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {
                "weight": 10,
                "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {"app": "web"}},
                    "topologyKey": "kubernetes.io/hostname",
                },
            }
        ]
    }
}

SHAPES: dict[str, dict[str, Any]] = {
    "no affinity": {},
    "affinity null": {"affinity": None},
    "pod anti-affinity only": {"affinity": POD_AFFINITY},
    "node affinity, required only": {"affinity": {"nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": REQUIRED}}},
    "preferred list exists": {"affinity": {"nodeAffinity": {PREFERRED: [EXISTING_PREFERRED]}}},
    "preferred list empty": {"affinity": {"nodeAffinity": {PREFERRED: []}}},
    # JSON null is absence: `add` over it loses nothing
    "nodeAffinity null": {"affinity": {"nodeAffinity": None}},
    "preferred null": {"affinity": {**POD_AFFINITY, "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": REQUIRED, PREFERRED: None}}},
    "everything": {"affinity": {**POD_AFFINITY, "nodeAffinity": {
        "requiredDuringSchedulingIgnoredDuringExecution": REQUIRED,
        PREFERRED: [EXISTING_PREFERRED]}}},
}
METADATA = {
    "no annotations": {},
    "annotations": {"annotations": {"team": "a", "x/y": "z"}},
    "annotations null": {"annotations": None},
}


@pytest.mark.parametrize("meta", METADATA.values(), ids=list(METADATA))
@pytest.mark.parametrize("shape", SHAPES.values(), ids=list(SHAPES))
def test_patch_appends_and_keeps_everything(shape: dict[str, Any], meta: dict[str, Any]) -> None:
    original = pod(["nginx"], spec=copy.deepcopy(shape), metadata=copy.deepcopy(meta))
    before = copy.deepcopy(original)
    ops = affinity_patch(original, TERMS, DECISION)
    assert original == before, "building a patch must not touch the pod"
    assert {op["op"] for op in ops} == {"add"}
    patched = apply_patch(original, ops)
    validate_pod(patched)

    old_terms = preferred_terms(original)
    new_terms = preferred_terms(patched)
    assert new_terms[: len(old_terms)] == old_terms
    assert new_terms[len(old_terms):] == [t.to_object() for t in TERMS]
    old_affinity = original["spec"].get("affinity") or {}
    for key, value in old_affinity.items():
        if key != "nodeAffinity":
            assert patched["spec"]["affinity"][key] == value
    required = (old_affinity.get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution")
    if required:
        assert patched["spec"]["affinity"]["nodeAffinity"][
            "requiredDuringSchedulingIgnoredDuringExecution"] == required
    annotations = patched["metadata"]["annotations"]
    assert annotations[DECISION_ANNOTATION] == DECISION
    for key, value in (original["metadata"].get("annotations") or {}).items():
        assert annotations[key] == value


def test_no_terms_only_annotates() -> None:
    ops = affinity_patch(pod(["nginx"]), [], DECISION)
    assert ops == [{"op": "add", "path": "/metadata/annotations",
                    "value": {DECISION_ANNOTATION: DECISION}}]


def test_terms_use_hostname_label_and_baseline_exists() -> None:
    assert TERMS[0].to_object() == {"weight": 60, "preference": {"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["node-b", "node-a"]}]}}
    assert TERMS[1].to_object()["preference"]["matchExpressions"] == [
        {"key": "kubernetes.io/hostname", "operator": "Exists"}]


@pytest.mark.parametrize(("token", "escaped"), [("a/b", "a~1b"), ("a~b", "a~0b"), ("~/", "~0~1")])
def test_escape_pointer(token: str, escaped: str) -> None:
    assert escape_pointer(token) == escaped


def test_null_metadata_gets_a_whole_object() -> None:
    obj = pod(["nginx"])
    obj["metadata"] = None
    ops = affinity_patch(obj, [], DECISION)
    assert ops == [{"op": "add", "path": "/metadata",
                    "value": {"annotations": {DECISION_ANNOTATION: DECISION}}}]

