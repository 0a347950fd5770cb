"""The pure parts of bringing real nodes up, installing the product in them and taking them
down: the Helm values and argv of the in-cluster install (realnodes/incluster.py, the
`--set-json` values decoded and compared as structures), the node records kept in the state
file and the node plan (realnodes/bringup.py — nothing here runs `ip`, spawns or mounts), and
what counts as left over (realnodes/teardown.py)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.devcluster.realnodes.bringup import NodeRecord, node_names, planned_nodes
from webhook.devcluster.realnodes.incluster import helm_install_argv, helm_values
from webhook.devcluster.realnodes.network import MAX_NODES, in_test_network, node_addresses
from webhook.devcluster.realnodes.teardown import Leftovers

REGISTRY = "198.18.0.1:5000"  # the address plan's registry (network.py's docstring)
HELM, KUBECONFIG, CHART = Path("/opt/helm"), Path("/run/kc"), Path("/src/charts/ll")


@pytest.mark.parametrize("agent", [False, True])
def test_helm_values_point_at_the_cluster_registry(agent: bool) -> None:
    values = helm_values("0.1.0-test", agent=agent)
    image = values["image"]
    assert isinstance(image, dict)
    registry, _, repository = image["repository"].partition("/")
    assert registry == REGISTRY and repository
    assert in_test_network(registry.rpartition(":")[0])
    assert image["tag"] == "0.1.0-test"
    assert values["settings"] == {"registry_insecure": [REGISTRY]}


def test_the_agent_is_enabled_only_when_asked() -> None:
    assert "agent" not in helm_values("t", agent=False)
    assert helm_values("t", agent=True)["agent"] == {"enabled": True}


def set_json(argv: list[str]) -> dict[str, object]:
    """Every `--set-json key=value` in argv, its value decoded."""
    found: dict[str, object] = {}
    for flag, value in itertools.pairwise(argv):
        if flag == "--set-json":
            key, _, encoded = value.partition("=")
            assert key not in found, key
            found[key] = json.loads(encoded)
    return found


def sets(argv: list[str]) -> list[str]:
    return [value for flag, value in itertools.pairwise(argv) if flag == "--set"]


@given(tag=st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,40}", fullmatch=True),
       agent=st.booleans())
def test_the_argv_carries_the_values_as_json(tag: str, agent: bool) -> None:
    argv = helm_install_argv(HELM, KUBECONFIG, tag, agent=agent, chart=CHART)
    values = helm_values(tag, agent=agent)
    assert set_json(argv) == {"image": values["image"], "settings": values["settings"]}
    assert ("agent.enabled=true" in sets(argv)) is agent


def test_the_argv_is_an_upgrade_install_of_the_chart() -> None:
    argv = helm_install_argv(HELM, KUBECONFIG, "1.2.3", agent=True, chart=CHART,
                             extra=["--wait", "--timeout", "90s"])
    assert argv[:3] == [str(HELM), "upgrade", "--install"]
    release, chart = argv[3], argv[4]
    assert chart == str(CHART)
    options = dict(itertools.pairwise(argv[5:]))
    assert options["--kubeconfig"] == str(KUBECONFIG)
    assert options["--namespace"] == release
    assert "--create-namespace" in argv
    assert argv[-3:] == ["--wait", "--timeout", "90s"]


def test_without_a_chart_the_repositorys_own_is_installed() -> None:
    chart = Path(helm_install_argv(HELM, KUBECONFIG, "t", agent=False)[4])
    assert chart.is_absolute()
    assert (chart / "Chart.yaml").is_file()
    assert (chart / "values.yaml").is_file()


_TEXT = st.text(min_size=1, max_size=30)


@given(st.builds(NodeRecord, name=_TEXT, ip=_TEXT, pod_cidr=_TEXT, zone=_TEXT,
                 cgroup_root=_TEXT, directory=_TEXT))
def test_a_node_record_survives_the_state_file(record: NodeRecord) -> None:
    text = json.dumps([record.to_json()])
    assert [NodeRecord.from_json(d) for d in json.loads(text)] == [record]


def test_a_node_record_is_stored_field_by_field() -> None:
    record = NodeRecord("node-2", "198.18.0.12", "198.19.2.0/24", "zone-b",
                        "/layer-locality-x-node-2", "/tmp/x/nodes/node-2")
    assert record.to_json() == {
        "name": "node-2", "ip": "198.18.0.12", "pod_cidr": "198.19.2.0/24", "zone": "zone-b",
        "cgroup_root": "/layer-locality-x-node-2", "directory": "/tmp/x/nodes/node-2"}


def test_a_record_with_an_unknown_field_is_refused() -> None:
    data = NodeRecord("n", "i", "p", "z", "c", "d").to_json() | {"extra": "x"}
    with pytest.raises(TypeError):
        NodeRecord.from_json(data)


@pytest.mark.parametrize("count", [0, 1, 3, 12])
def test_node_names_are_distinct_and_numbered_from_one(count: int) -> None:
    names = node_names(count)
    assert len(names) == len(set(names)) == count
    assert names == [f"node-{i}" for i in range(1, count + 1)]


@pytest.mark.parametrize("count", [1, 3, MAX_NODES])
def test_planned_nodes_follow_the_address_plan(count: int) -> None:
    nodes = planned_nodes(count)
    assert [n.index for n in nodes] == list(range(1, count + 1))
    assert [n.name for n in nodes] == node_names(count)
    assert nodes == [node_addresses(n.index, n.name) for n in nodes]
    assert len({n.ip for n in nodes}) == count


def test_no_nodes_planned_for_zero_and_too_many_refused() -> None:
    assert planned_nodes(0) == []
    with pytest.raises(ValueError, match=str(MAX_NODES + 1)):
        planned_nodes(MAX_NODES + 1)


@pytest.mark.parametrize(("processes", "cgroups", "left"), [
    ((), (), False),
    ((4242,), (), True),
    ((), ("/sys/fs/cgroup/memory/layer-locality-x-node-1",), True),
    ((1, 2), ("/sys/fs/cgroup/pids/x",), True),
])
def test_leftovers_are_truthy_only_when_something_is_left(
        processes: tuple[int, ...], cgroups: tuple[str, ...], left: bool) -> None:
    assert bool(Leftovers(processes, cgroups)) is left
