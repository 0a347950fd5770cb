"""What the webhook reads from a Pod: skip rules, images, tolerations, key, owner; and that a
pod whose patched fields have unexpected types is skipped, never overwritten."""

from __future__ import annotations

import copy
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.helpers import AMD64, image, inventory, node_object, pod
from webhook.core.admission import Review
from webhook.core.affinity import PreferredTerm, affinity_patch
from webhook.core.pods import (
    DECISION_ANNOTATION,
    MIRROR_ANNOTATION,
    PREFERRED,
    SKIP_LABEL,
    PendingPlacement,
    decision_document,
    decision_id,
    pending_placement,
    pod_images,
    pod_key,
    pod_owner,
    pod_tolerations,
    skip_reason,
    unexpected_field,
)
from webhook.core.reasons import Reason, Result
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.registry.catalog import StaticCatalog
from webhook.serving.mutate import Mutator

DS_OWNER = {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u-ds",
            "controller": True}
RS_OWNER = {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "rs", "uid": "u-rs",
            "controller": True}


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({}, None),
        ({"spec": {"nodeName": "n1"}}, Reason.NODE_NAME_SET),
        ({"spec": {"nodeName": ""}}, None),  # empty: the scheduler still places it
        ({"metadata": {"ownerReferences": [DS_OWNER]}}, Reason.DAEMONSET),
        ({"metadata": {"ownerReferences": [RS_OWNER, {**DS_OWNER, "controller": False}]}},
         Reason.DAEMONSET),
        ({"metadata": {"ownerReferences": [RS_OWNER]}}, None),
        ({"metadata": {"annotations": {MIRROR_ANNOTATION: "hash"}}}, Reason.MIRROR_POD),
        ({"metadata": {"annotations": {MIRROR_ANNOTATION: ""}}}, Reason.MIRROR_POD),
        ({"metadata": {"labels": {SKIP_LABEL: "true"}}}, Reason.SKIP_LABEL),
        ({"metadata": {"labels": {SKIP_LABEL: "True"}}}, Reason.SKIP_LABEL),
        ({"metadata": {"labels": {SKIP_LABEL: "TRUE"}}}, Reason.SKIP_LABEL),
        ({"metadata": {"labels": {SKIP_LABEL: "false"}}}, None),
        ({"metadata": {"labels": {SKIP_LABEL: "yes"}}}, None),
        ({"metadata": {"labels": {SKIP_LABEL: ""}}}, None),
        ({"metadata": {"labels": {"other/skip": "true"}}}, None),
        ({"metadata": {"annotations": {DECISION_ANNOTATION: "{}"}}}, Reason.ALREADY_DECIDED),
        ({"metadata": {"annotations": {"layer-locality.io/other": "{}"}}}, None),
    ],
)
def test_skip_reason(change: dict[str, Any], expected: Reason | None) -> None:
    assert skip_reason(pod(["nginx"], **change)) is expected


# Defect 5: a field the patch would extend, present with another type. `add` on its path
# would replace what the user wrote, so the pod is skipped. (path named, pod builder)
def _with_spec(**spec: Any) -> dict[str, Any]:
    return pod(["nginx"], spec=spec)


def _with_node_affinity(value: Any) -> dict[str, Any]:
    return _with_spec(affinity={"nodeAffinity": value})


def _with_preferred(value: Any) -> dict[str, Any]:
    return _with_node_affinity({PREFERRED: value})


def _with_metadata(value: Any) -> dict[str, Any]:
    obj = pod(["nginx"])
    obj["metadata"] = value
    return obj


def _with_annotations(value: Any) -> dict[str, Any]:
    return pod(["nginx"], metadata={"annotations": value})


WRONG_TYPED: list[tuple[str, dict[str, Any]]] = [
    ("spec.affinity", _with_spec(affinity="node-a")),
    ("spec.affinity", _with_spec(affinity=7)),
    ("spec.affinity", _with_spec(affinity=[{"nodeAffinity": {}}])),
    ("spec.affinity", _with_spec(affinity=True)),
    ("spec.affinity.nodeAffinity", _with_node_affinity("x")),
    ("spec.affinity.nodeAffinity", _with_node_affinity([])),
    ("spec.affinity.nodeAffinity", _with_node_affinity(0)),
    (f"spec.affinity.nodeAffinity.{PREFERRED}", _with_preferred({"weight": 1})),
    (f"spec.affinity.nodeAffinity.{PREFERRED}", _with_preferred("x")),
    (f"spec.affinity.nodeAffinity.{PREFERRED}", _with_preferred(3)),
    ("metadata", _with_metadata("web")),
    ("metadata", _with_metadata(["web"])),
    ("metadata", _with_metadata(1)),
    ("metadata.annotations", _with_annotations("a=b")),
    ("metadata.annotations", _with_annotations([{"a": "b"}])),
    ("metadata.annotations", _with_annotations(0)),
]
WRONG_IDS = [f"{path.rsplit('.', 1)[-1]}-{i}" for i, (path, _) in enumerate(WRONG_TYPED)]


# null is how JSON spells "absent": `add` over it loses nothing.
NULL_IS_ABSENT = [
    _with_spec(affinity=None),
    _with_node_affinity(None),
    _with_preferred(None),
    _with_preferred([]),
    _with_metadata(None),
    _with_annotations(None),
]


@pytest.mark.parametrize(("path", "obj"), WRONG_TYPED, ids=WRONG_IDS)
def test_wrong_typed_field_is_skipped(path: str, obj: dict[str, Any]) -> None:
    assert unexpected_field(obj) == path
    assert skip_reason(obj) is Reason.UNEXPECTED_TYPE


@pytest.mark.parametrize("spec", ["nginx", [{"containers": []}], 0])
def test_a_spec_that_is_no_object_is_unexpected(spec: Any) -> None:
    obj = {**pod(["nginx"]), "spec": spec}
    assert unexpected_field(obj) == "spec"
    assert skip_reason(obj) is Reason.UNEXPECTED_TYPE


@pytest.mark.parametrize("obj", NULL_IS_ABSENT)
def test_null_counts_as_absent(obj: dict[str, Any]) -> None:
    assert unexpected_field(obj) is None
    assert skip_reason(obj) is None


_not_object = (st.text(max_size=5) | st.integers() | st.booleans()
               | st.floats(allow_nan=False) | st.lists(st.integers(), max_size=2))
_not_list = (st.text(max_size=5) | st.integers() | st.booleans()
             | st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


@given(_not_object, st.sampled_from(["affinity", "nodeAffinity", "metadata", "annotations"]))
def test_any_non_object_is_unexpected(value: Any, field: str) -> None:
    build = {"affinity": lambda v: _with_spec(affinity=v), "nodeAffinity": _with_node_affinity,
             "metadata": _with_metadata, "annotations": _with_annotations}[field]
    assert skip_reason(build(value)) is Reason.UNEXPECTED_TYPE


@given(_not_list)
def test_any_non_list_preferred_is_unexpected(value: Any) -> None:
    assert skip_reason(_with_preferred(value)) is Reason.UNEXPECTED_TYPE


BIG = image("registry.example.com/team/app:1", {AMD64: [("base", 200 * MiB), ("app", 50 * MiB)]})


def _mutator() -> Mutator:
    catalog = StaticCatalog([BIG])
    inv, _ = inventory([node_object("holder", [BIG]), node_object("empty")], catalog)
    return Mutator([catalog], inv, ScoringPolicy())


def _as_big_pod(obj: dict[str, Any]) -> dict[str, Any]:
    obj = copy.deepcopy(obj)
    obj["spec"]["containers"] = [{"name": "app", "image": BIG.ref}]
    return obj


async def test_mutator_patches_the_well_typed_pod() -> None:
    """The control for the test below: the same pod with well-typed fields is patched."""
    for obj in [pod([BIG.ref]), *map(_as_big_pod, NULL_IS_ABSENT)]:
        outcome = await _mutator().review(Review.for_pod(obj, uid="u1"))
        assert (outcome.result, outcome.reason) == (Result.PATCHED, Reason.NONE)
        assert outcome.patch


@pytest.mark.parametrize(("path", "obj"), WRONG_TYPED, ids=WRONG_IDS)
async def test_mutator_skips_wrong_typed_pod(path: str, obj: dict[str, Any]) -> None:
    obj = _as_big_pod(obj)
    before = copy.deepcopy(obj)
    outcome = await _mutator().review(Review.for_pod(obj, uid="u1"))
    assert (outcome.result, outcome.reason, outcome.patch) == (
        Result.SKIPPED, Reason.UNEXPECTED_TYPE, ())
    assert obj == before


@pytest.mark.parametrize(("path", "obj"), WRONG_TYPED, ids=WRONG_IDS)
def test_affinity_patch_refuses_wrong_typed_pod(path: str, obj: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match=path.replace(".", r"\.")):
        affinity_patch(obj, [PreferredTerm(50, ("holder",))], "{}")


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"containers": [{"image": "b"}, {"image": "a"}]}, ["b", "a"]),
        # initContainers run first and come first
        ({"containers": [{"image": "b"}], "initContainers": [{"image": "c"}]}, ["c", "b"]),
        # first occurrence wins, across both lists
        ({"initContainers": [{"image": "a"}], "containers": [{"image": "b"}, {"image": "a"}]},
         ["a", "b"]),
        ({"containers": [{"image": "a"}, {"image": "a"}]}, ["a"]),
        # invalid entries are left out, the rest kept
        ({"containers": ["nginx", None, {"image": 5}, {"image": None}, {"image": ""},
                        {"name": "no-image"}, {"image": "ok"}]}, ["ok"]),
        ({"containers": {"image": "a"}}, []),
        ({"containers": "nginx"}, []),
        ({"initContainers": None, "containers": [{"image": "a"}]}, ["a"]),
        ({}, []),
    ],
)
def test_pod_images(spec: dict[str, Any], expected: list[str]) -> None:
    assert pod_images({"spec": spec}) == expected


@pytest.mark.parametrize("obj", [{}, {"spec": None}, {"spec": "x"}, {"spec": []}])
def test_pod_images_without_spec(obj: dict[str, Any]) -> None:
    assert pod_images(obj) == []


GPU = {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"}
ANY = {"operator": "Exists"}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ({"tolerations": [GPU, ANY]}, [GPU, ANY]),
        ({"tolerations": ["gpu", None, 3, [GPU], GPU]}, [GPU]),
        ({"tolerations": GPU}, []),
        ({"tolerations": None}, []),
        ({}, []),
    ],
)
def test_pod_tolerations(spec: dict[str, Any], expected: list[dict[str, Any]]) -> None:
    assert pod_tolerations({"spec": spec}) == expected
    assert pod_tolerations({"spec": "x"}) == []


@pytest.mark.parametrize(
    ("metadata", "expected"),
    [
        ({"namespace": "ns", "name": "web"}, "ns/web"),
        ({"namespace": "ns", "name": "web", "generateName": "web-"}, "ns/web"),
        # controller-made pods arrive with generateName and no name
        ({"namespace": "ns", "generateName": "web-7d9f-"}, "ns/web-7d9f-uid1"),
        ({"namespace": "ns", "name": "", "generateName": "web-"}, "ns/web-uid1"),
        ({"namespace": "ns"}, "ns/uid1"),
        ({"name": "web"}, "/web"),
        ({}, "/uid1"),
    ],
)
def test_pod_key(metadata: dict[str, Any], expected: str) -> None:
    assert pod_key({"metadata": metadata}, "uid1") == expected


@pytest.mark.parametrize(
    ("owners", "expected"),
    [
        ([RS_OWNER], "u-rs"),
        # the controller, wherever it is in the list
        ([{**DS_OWNER, "controller": False}, RS_OWNER], "u-rs"),
        ([{**RS_OWNER, "controller": False}], None),
        ([{k: v for k, v in RS_OWNER.items() if k != "controller"}], None),
        ([{**RS_OWNER, "controller": "true"}], None),  # only the JSON boolean
        ([{**RS_OWNER, "uid": ""}], None),
        ([{**RS_OWNER, "uid": 7}], None),
        (["u-rs", None, RS_OWNER], "u-rs"),
        (RS_OWNER, None),
        ([], None),
        (None, None),
    ],
)
def test_pod_owner(owners: Any, expected: str | None) -> None:
    assert pod_owner({"metadata": {"ownerReferences": owners}}) == expected
    assert pod_owner({"metadata": "x"}) is None


def annotated(value: Any) -> dict[str, Any]:
    return {"metadata": {"annotations": {DECISION_ANNOTATION: value}}}


@pytest.mark.parametrize(
    ("obj", "document", "token"),
    [
        (annotated('{"v": 3, "id": "r-1", "top": []}'), {"v": 3, "id": "r-1", "top": []}, "r-1"),
        (annotated('{"v": 3}'), {"v": 3}, None),
        (annotated('{"id": ""}'), {"id": ""}, None),  # an empty id names no review
        (annotated('{"id": 7}'), {"id": 7}, None),
        (annotated('["id", "r-1"]'), None, None),  # JSON, but not an object
        (annotated('"r-1"'), None, None),
        (annotated("{not json"), None, None),
        (annotated({"id": "r-1"}), None, None),  # the annotation is a string or nothing
        ({"metadata": {"annotations": {"layer-locality.io/other": '{"id": "r-1"}'}}},
         None, None),
        ({"metadata": {"annotations": "x"}}, None, None),
        ({"metadata": None}, None, None),
        ({}, None, None),
    ],
)
def test_decision_document_and_id(obj: dict[str, Any], document: dict[str, Any] | None,
                                  token: str | None) -> None:
    assert decision_document(obj) == document
    assert decision_id(obj) == token


STEERED = {"v": 3, "id": "r-1", "by": "replica-a", "terms": 2,
           "top": [{"node": "n1", "bytes": 9}, {"node": "n2", "bytes": 5}]}


@pytest.mark.parametrize(
    ("document", "expected"),
    [
        (STEERED, PendingPlacement("r-1", "replica-a", "n1")),
        # held out: what it would have preferred is listed, but no term was added
        ({**STEERED, "terms": 0}, PendingPlacement("r-1", "replica-a", "")),
        ({k: v for k, v in STEERED.items() if k != "terms"},
         PendingPlacement("r-1", "replica-a", "")),
        ({**STEERED, "top": []}, PendingPlacement("r-1", "replica-a", "")),
        ({**STEERED, "top": [{"node": 5}]}, PendingPlacement("r-1", "replica-a", "")),
        ({**STEERED, "top": ["n1"]}, PendingPlacement("r-1", "replica-a", "")),
        ({**STEERED, "id": "", "by": 7}, PendingPlacement(None, "", "n1")),
        ({**STEERED, "id": 7}, PendingPlacement(None, "replica-a", "n1")),
        ({"v": 3, "skipped": "no_nodes"}, PendingPlacement(None, "", "")),
    ],
)
def test_pending_placement(document: dict[str, Any], expected: PendingPlacement) -> None:
    assert pending_placement(annotated(orjson.dumps(document).decode())) == expected


def test_a_pod_without_a_decision_is_expected_nowhere() -> None:
    assert pending_placement(pod(["nginx"])) == PendingPlacement(None, "", "")
