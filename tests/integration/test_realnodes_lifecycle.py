"""A cluster with a real node leaves the machine as it found it: while it runs, the host's
mounts, interfaces and the sysctls the kubelet wants changed are untouched (everything lives in
the cluster's namespaces); after `cluster down`, no process, cgroup, mount, interface or
namespace of it is left. A pod runs first, so that a shim, a container, its network namespace,
overlay and volume mounts exist to be cleaned up."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.realnodes_fixture import (
    RealCluster,
    app_image,
    cluster_down,
    cluster_up,
    pod_manifest,
    require_real_nodes,
    running,
)
from webhook.devcluster.controlplane import ControlPlane
from webhook.devcluster.install import repo_root
from webhook.devcluster.realnodes import cgroups, oci, sysctls
from webhook.devcluster.realnodes.bringup import recorded_nodes
from webhook.devcluster.realnodes.namespaces import NETNS_KEY, NetnsRunner, processes_in
from webhook.devcluster.realnodes.network import registry_host

pytestmark = pytest.mark.realnodes


def mounts() -> set[tuple[str, str]]:
    """(mount point, filesystem type) of every mount the host's mount namespace shows."""
    found = set()
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        left, _, right = line.partition(" - ")
        found.add((left.split()[4], right.split()[0]))
    return found


def links() -> list[str]:
    out = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True)
    return sorted(line.split(":")[1].strip() for line in out.stdout.splitlines())


def cgroup_children() -> set[str]:
    return {str(child) for hierarchy in cgroups.hierarchies()
            for child in hierarchy.iterdir() if child.is_dir()}


HOST_PATHS = ("/run", "/var/lib", "/var/log", "/etc/cni", "/opt/cni", "/opt/containerd",
              "/etc/containerd")


def host_paths() -> dict[str, list[str]]:
    """What the host has at the paths a node's components write by default: the entries of
    each directory (two levels), or None-like empty when absent."""
    found: dict[str, list[str]] = {}
    for top in HOST_PATHS:
        base = Path(top)
        if not base.is_dir():
            found[top] = []
            continue
        found[top] = sorted(str(p) for p in base.iterdir()) + sorted(
            str(p) for child in base.iterdir() if child.is_dir() and not child.is_symlink()
            for p in _entries(child))
    return found


def _entries(directory: Path) -> list[Path]:
    try:
        return list(directory.iterdir())
    except OSError:
        return []


def processes_mentioning(text: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmdline:
                found.append(int(entry))
    return found


def test_cluster_down_leaves_nothing(tmp_path: Path) -> None:
    kube, _ = require_real_nodes()
    root = tmp_path / "lifecycle"
    before = (mounts(), links(), sysctls.host_values(), cgroup_children(), host_paths())
    try:
        cluster_up(root, 1)
        plane = ControlPlane.load(root)
        assert plane is not None
        runner = NetnsRunner(plane.processes["netns"].pid)
        cluster = RealCluster(root, kube, runner)
        image = app_image("lifecycle/one", oci.busybox_layer())
        cluster.push(image)
        cluster.kubectl("create", "-f", "-",
                        stdin=json.dumps(pod_manifest("one", cluster.ref(image))))
        cluster.wait_running("default", "one")
        runner.close()
        # `cluster exec`, as a user reaches the cluster.
        listed = subprocess.run(
            [sys.executable, "-m", "webhook", "cluster", "exec", "--dir", str(root), "--",
             str(kube / "kubectl"), "get", "nodes", "-o", "name"],
            capture_output=True, text=True, check=False, cwd=repo_root(), timeout=60)
        assert listed.stdout.split() == ["node/node-1"], listed.stderr
        # While it runs: the host's mounts, interfaces, sysctls and runtime paths are as they
        # were (the kubelet wants sysctls changed; containerd, CNI and the kubelet write under
        # /run and /var/lib by default).
        assert mounts() == before[0]
        assert links() == before[1]
        assert sysctls.host_values() == before[2]
        assert host_paths() == before[4]
        node = recorded_nodes(plane)[0]
        assert cgroups.existing(node.cgroup_root), "the node's cgroup root exists while it runs"
        namespace = plane.extra[NETNS_KEY]
        assert len(processes_in(namespace, "net")) > 5
    finally:
        result = cluster_down(root)
    assert result.returncode == 0, result.stderr
    assert processes_in(namespace, "net") == []
    assert processes_mentioning(str(root)) == []
    assert not cgroups.existing(node.cgroup_root)
    assert (mounts(), links(), sysctls.host_values(), cgroup_children(), host_paths()) == before


def test_fake_nodes_beside_real_ones_stay_schedulable(tmp_path: Path) -> None:
    """The node lifecycle controller runs with real nodes; fake nodes keep their Leases
    renewed (devcluster/heartbeat.py) and so stay untainted past the grace period."""
    import time

    kube, _ = require_real_nodes()
    root = tmp_path / "mixed"
    nodes = tmp_path / "fake.json"
    nodes.write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList", "items": [
        {"metadata": {"name": f"fake-{i}", "labels": {"topology.kubernetes.io/zone": "z"}},
         "status": {"conditions": [{"type": "Ready", "status": "True"}]}} for i in (1, 2)]}))
    with running(root, 1, "--nodes", str(nodes)) as runner:
        cluster = RealCluster(root, kube, runner)
        time.sleep(30)  # past the controller's 20 s grace: a fake node without a heartbeat
        for name in ("fake-1", "fake-2", "node-1"):  # would be tainted unreachable by now
            node = cluster.kubectl_json("get", "node", name)
            taints = [t["key"] for t in node["spec"].get("taints") or []]
            assert taints == [], (name, taints)
        manifest = pod_manifest("on-fake", f"{registry_host()}/none:1", node="fake-2")
        cluster.kubectl("create", "-f", "-", stdin=json.dumps(manifest))
        wait = 0
        while not cluster.pod("default", "on-fake")["spec"].get("nodeName") and wait < 60:
            time.sleep(0.5)
            wait += 1
        assert cluster.pod("default", "on-fake")["spec"].get("nodeName") == "fake-2"
