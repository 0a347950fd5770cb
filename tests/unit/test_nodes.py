"""node_from_object: the facts scoring needs, read from a Node as the API returns it."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core import nodes
from webhook.core.layers import Platform
from webhook.core.nodes import (
    Labels,
    NodeError,
    Taint,
    _one_of,
    node_from_object,
)
from webhook.core.objects import HOSTNAME_LABEL


def node(
    name: Any = "node-1.example.internal",
    labels: Any = None,
    node_info: Any = None,
    spec: Any = None,
    images: Any = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {}
    if node_info is not None:
        status["nodeInfo"] = node_info
    if images is not None:
        status["images"] = images
    metadata: dict[str, Any] = {"name": name}
    if labels is not None:
        metadata["labels"] = labels
    return {"apiVersion": "v1", "kind": "Node", "metadata": metadata,
            "spec": spec or {}, "status": status}


ARCH_LABELS = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "arm64"}


@pytest.mark.parametrize(
    ("labels", "node_info", "expected"),
    [
        (None, {"operatingSystem": "linux", "architecture": "amd64"}, "linux/amd64"),
        (None, {"operatingSystem": "linux", "architecture": "arm64"}, "linux/arm64/v8"),
        # nodeInfo is what the kubelet reports: it wins over labels
        ({"kubernetes.io/os": "windows", "kubernetes.io/arch": "amd64"},
         {"operatingSystem": "linux", "architecture": "arm64"}, "linux/arm64"),
        # no nodeInfo, or empty fields: the well-known labels
        (ARCH_LABELS, None, "linux/arm64"),
        (ARCH_LABELS, {"operatingSystem": "", "architecture": ""}, "linux/arm64"),
        ({"kubernetes.io/arch": "arm64"}, {"operatingSystem": "windows"}, "windows/arm64"),
        (None, {"operatingSystem": "linux", "architecture": "arm", "variant": "v7"},
         "linux/arm/v7"),
        ({"kubernetes.io/os": "windows"}, None, "windows/amd64"),
        # nothing said: what nearly every node is
        (None, None, "linux/amd64"),
        ({"kubernetes.io/os": ""}, {"architecture": ""}, "linux/amd64"),
    ],
)
def test_platform(labels: Any, node_info: Any, expected: str) -> None:
    assert node_from_object(node(labels=labels, node_info=node_info)).platform == Platform.parse(
        expected)


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        ({"kubernetes.io/hostname": "node-1"}, "node-1"),  # can differ from the name
        ({"kubernetes.io/hostname": ""}, "node-1.example.internal"),
        ({"kubernetes.io/hostname": 5}, "node-1.example.internal"),
        ({}, "node-1.example.internal"),
        (None, "node-1.example.internal"),
        ("hostname=node-1", "node-1.example.internal"),
    ],
)
def test_hostname(labels: Any, expected: str) -> None:
    info = node_from_object(node(labels=labels))
    assert (info.name, info.hostname) == ("node-1.example.internal", expected)


def test_taints_keep_only_blocking_effects() -> None:
    spec = {"unschedulable": True, "taints": [
        {"key": "gpu", "value": "yes", "effect": "NoSchedule"},
        {"key": "node.kubernetes.io/unreachable", "effect": "NoExecute"},
        {"key": "spot", "value": "true", "effect": "PreferNoSchedule"},
        {"key": "no-effect", "value": "x"},
        {"key": "odd", "effect": "Sometimes"},
        {"value": "keyless", "effect": "NoSchedule"},
        "gpu=yes:NoSchedule",
        None,
    ]}
    info = node_from_object(node(spec=spec))
    assert info.taints == (
        Taint("gpu", "yes", "NoSchedule"),
        Taint("node.kubernetes.io/unreachable", "", "NoExecute"),
        Taint("", "keyless", "NoSchedule"),
    )
    assert info.unschedulable and not info.schedulable


@pytest.mark.parametrize("spec", [{}, {"taints": None}, {"taints": "x"}, {"taints": {}},
                                  {"unschedulable": False}])
def test_no_taints_schedulable(spec: dict[str, Any]) -> None:
    info = node_from_object(node(spec=spec))
    assert info.taints == () and info.schedulable


def test_images_names() -> None:
    images = [
        {"names": ["docker.io/library/python@sha256:" + "a" * 64,
                   "docker.io/library/python:3.11"], "sizeBytes": 1},
        {"names": ["registry.k8s.io/pause:3.9"], "sizeBytes": 1},
        {"names": [], "sizeBytes": 1},  # untagged, no digest: nothing to match
        {"sizeBytes": 1},
        {"names": "nginx"},
        {"names": [5, "nginx:1.23", None]},
        "nginx",
    ]
    info = node_from_object(node(images=images))
    assert info.images == (
        ("docker.io/library/python@sha256:" + "a" * 64, "docker.io/library/python:3.11"),
        ("registry.k8s.io/pause:3.9",),
        ("nginx:1.23",),
    )


def test_image_names_are_one_tuple_for_every_node_and_unhashable_names_are_left_out() -> None:
    """A node's image names are the tuple another node already holds (a lookup by the names as
    given, which a name that is a list or an object cannot take: it is left out instead)."""
    images: list[dict[str, Any]] = [{"names": ["registry.k8s.io/pause:3.9"]},
                                    {"names": [["a"], "nginx:1.24"]},
                                    {"names": [{"b": 1}]}]
    first = node_from_object(node(images=images))
    second = node_from_object(node(images=[dict(i) for i in images]))
    assert first.images == (("registry.k8s.io/pause:3.9",), ("nginx:1.24",), ())
    assert all(a is b for a, b in zip(first.images, second.images, strict=True))


@pytest.mark.parametrize("images", [None, {}, "nginx", []])
def test_no_images(images: Any) -> None:
    assert node_from_object(node(images=images)).images == ()


@pytest.mark.parametrize(
    "obj",
    [
        node(name=None),
        node(name=""),
        node(name=5),
        {"metadata": "node-1"},
        {"metadata": None},
        {},
    ],
)
def test_missing_name(obj: dict[str, Any]) -> None:
    with pytest.raises(NodeError, match=r"metadata\.name"):
        node_from_object(obj)


POOL = {"kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64",
        "node.kubernetes.io/instance-type": "m5.xlarge", "topology.kubernetes.io/zone": "z-a",
        "pool": "general"}


def test_labels_are_kept_and_shared_by_the_nodes_of_a_pool() -> None:
    """Every label is kept; the hostname label comes from the node's own hostname, the rest
    is one object for all nodes with the same labels (a node holds a reference)."""
    first, second = (node_from_object(node(f"n{i}.internal", {**POOL,
                                                              "kubernetes.io/hostname": f"n{i}"}))
                     for i in range(2))
    assert first.labels is second.labels
    assert dict(first.labels) == POOL
    assert dict(first.all_labels()) == {**POOL, "kubernetes.io/hostname": "n0"}
    assert dict(second.all_labels()) == {**POOL, "kubernetes.io/hostname": "n1"}
    other = node_from_object(node("n2", {**POOL, "pool": "gpu", "kubernetes.io/hostname": "n2"}))
    assert other.labels is not first.labels and other.labels["pool"] == "gpu"
    assert first != node_from_object(node("n0.internal", {**POOL, "pool": "gpu",
                                                          "kubernetes.io/hostname": "n0"}))


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        (None, {}),
        ({"a": "1", "b": 2, 3: "c", "kubernetes.io/hostname": None}, {"a": "1"}),  # not str: out
        # no hostname label, or an empty one: NodeInfo.hostname falls back to the node name,
        # but a selector must still see the label as the node has it
        ({"a": "1"}, {"a": "1"}),
        ({"kubernetes.io/hostname": ""}, {"kubernetes.io/hostname": ""}),
    ],
)
def test_labels_without_a_hostname_label(labels: Any, expected: dict[str, str]) -> None:
    info = node_from_object(node(labels=labels))
    assert info.hostname == "node-1.example.internal"
    assert dict(info.all_labels()) == expected


def test_a_node_without_a_name_says_so() -> None:
    with pytest.raises(NodeError) as raised:
        node_from_object(node(name=""))
    assert str(raised.value) == "node without metadata.name"


@pytest.mark.parametrize(("labels", "shared"), [(None, nodes.NO_LABELS), ({}, nodes.NO_LABELS),
                                                ({HOSTNAME_LABEL: "n1"}, nodes.HOSTNAME_ONLY)])
def test_nodes_with_no_label_but_the_hostname_share_one_object(
        labels: Any, shared: Labels, monkeypatch: pytest.MonkeyPatch) -> None:
    """No cached label set for them: they all hold the module's one empty Labels."""
    monkeypatch.setattr(nodes, "_LABEL_SETS", {})
    assert node_from_object(node(labels=labels)).labels is shared
    assert nodes._LABEL_SETS == {}


def test_labels_read_like_the_mapping_they_hold() -> None:
    labels = Labels({"pool": "gpu", "zone": "z-a"})
    assert labels.has_hostname  # the default: the node carries the hostname label
    assert dict(labels) == {"pool": "gpu", "zone": "z-a"} and len(labels) == 2
    assert ("pool" in labels, "gpu" in labels, HOSTNAME_LABEL in labels) == (True, False, False)
    assert (labels.get("pool"), labels.get("rack"), labels.get("rack", "none")) == (
        "gpu", None, "none")


def test_labels_are_equal_by_items_and_hostname_presence() -> None:
    labels = Labels({"pool": "gpu"})
    assert labels == labels and labels == Labels({"pool": "gpu"})
    assert hash(labels) == hash(Labels({"pool": "gpu"}))
    assert labels != Labels({"pool": "gpu"}, has_hostname=False)
    assert labels != Labels({"pool": "cpu"})
    assert labels != {"pool": "gpu"}  # another kind of mapping is another value


def test_labels_equality_does_not_rest_on_the_hash() -> None:
    """The hash is a shortcut that rules out; equal hashes (a collision, forged here) must
    still compare the items and the hostname flag."""
    labels = Labels({"pool": "gpu"})
    for other in (Labels({"pool": "gpu"}, has_hostname=False), Labels({"pool": "cpu"})):
        other._hash = labels._hash
        assert labels != other


def test_distinct_label_sets_hash_apart() -> None:
    """Label sets are interned in a dict: distinct sets get distinct hashes (one equal hash
    for all would make every lookup a scan)."""
    sets = [Labels({"pool": f"p{i}"}, has_hostname=bool(i % 2)) for i in range(64)]
    assert len({hash(s) for s in sets}) == 64


def test_all_labels_add_the_nodes_own_hostname() -> None:
    info = node_from_object(node("n0.internal", {**POOL, HOSTNAME_LABEL: "n0"}))
    view = info.all_labels()
    assert len(view) == len(POOL) + 1 == len(dict(view))
    assert HOSTNAME_LABEL in view and "pool" in view and "rack" not in view
    assert (view[HOSTNAME_LABEL], view["pool"]) == ("n0", "general")
    assert (view.get(HOSTNAME_LABEL), view.get("pool"), view.get("rack"),
            view.get("rack", "none")) == ("n0", "general", None, "none")
    with pytest.raises(KeyError):
        view["rack"]


def test_a_cache_of_shared_objects_answers_the_first_equal_one_and_stays_bounded() -> None:
    cache: dict[tuple[int, ...], tuple[int, ...]] = {}
    first = _one_of(cache, (1, 2), 3)
    assert first == (1, 2) and _one_of(cache, tuple([1, 2]), 3) is first
    for n in range(20):
        assert _one_of(cache, (n,), 3) == (n,)
        assert len(cache) <= 3


def test_nodes_share_one_tuple_per_image(monkeypatch: pytest.MonkeyPatch) -> None:
    """With the shared caches empty (as at start): two nodes holding one image hold one tuple
    of its names, and one Labels for one pool."""
    monkeypatch.setattr(nodes, "_NAMES", {})
    monkeypatch.setattr(nodes, "_LABEL_SETS", {})
    names = ["r.example.com/app@sha256:" + "a" * 64, "r.example.com/app:1"]
    one, two = (node_from_object(node(f"n{i}", {"pool": "p", HOSTNAME_LABEL: f"n{i}"},
                                      images=[{"names": list(names)}])) for i in range(2))
    assert one.images == ((*names,),) and one.images[0] is two.images[0]
    assert one.labels is two.labels and dict(one.labels) == {"pool": "p"}
