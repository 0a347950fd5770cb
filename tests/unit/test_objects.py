"""Safe reads of decoded objects: wrong types read as empty; workload pod templates."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.objects import items, mapping, pod_template, text

# JSON values of every other type, plus Python look-alikes (tuple, set, bytes)
WRONG: list[object] = [None, 0, 1.5, True, b"x", (), {"a"}]


@pytest.mark.parametrize("value", [*WRONG, "x", ["a"], []])
def test_mapping_of_wrong_type_is_empty(value: object) -> None:
    assert mapping(value) == {}


def test_mapping_returns_the_dict_itself() -> None:
    obj = {"a": 1}
    assert mapping(obj) is obj
    assert mapping({}) == {}


@pytest.mark.parametrize("value", [*WRONG, "x", {"a": 1}])
def test_items_of_wrong_type_is_empty(value: object) -> None:
    assert items(value) == []


def test_items_returns_the_list_itself() -> None:
    obj = [1, "a", None]
    assert items(obj) is obj


@pytest.mark.parametrize("value", [*WRONG, ["a"], {"a": 1}])
def test_text_of_wrong_type_is_empty(value: object) -> None:
    assert text(value) == ""


@pytest.mark.parametrize("value", ["", "web", "ünï"])
def test_text_returns_the_string(value: str) -> None:
    assert text(value) == value


TEMPLATE = {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "web", "image": "nginx"}]}}


@pytest.mark.parametrize(
    "kind", ["Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "ReplicationController"]
)
def test_workload_template(kind: str) -> None:
    obj = {"apiVersion": "apps/v1", "kind": kind, "spec": {"replicas": 2, "template": TEMPLATE}}
    assert pod_template(obj) is TEMPLATE


def test_cronjob_template_is_two_levels_down() -> None:
    obj = {"apiVersion": "batch/v1", "kind": "CronJob",
           "spec": {"schedule": "* * * * *", "jobTemplate": {"spec": {"template": TEMPLATE}}}}
    assert pod_template(obj) is TEMPLATE


@pytest.mark.parametrize(
    "obj",
    [
        {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": TEMPLATE["spec"]},
        # a CronJob reads only spec.jobTemplate.spec.template
        {"kind": "CronJob", "spec": {"template": TEMPLATE}},
        {"kind": "CronJob", "spec": {"jobTemplate": "x"}},
        {"kind": "CronJob", "spec": {"jobTemplate": {"spec": None}}},
        {"kind": "CronJob", "spec": {"jobTemplate": {"spec": {"template": ["x"]}}}},
        {"kind": "Deployment", "spec": {"jobTemplate": {"spec": {"template": TEMPLATE}}}},
        {"kind": "Deployment", "spec": {"template": "nginx"}},
        {"kind": "Deployment", "spec": {"template": [TEMPLATE]}},
        {"kind": "Deployment", "spec": {"template": None}},
        {"kind": "Deployment", "spec": "x"},
        {"kind": "Deployment"},
        {},
    ],
)
def test_no_template(obj: dict[str, Any]) -> None:
    assert pod_template(obj) is None
