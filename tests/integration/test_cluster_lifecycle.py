"""`layer-locality cluster up|down|status` (what `make cluster` and `make cluster-down` run),
as a user meets it: a cluster of its own beside the session's, a second `up` refused, `down`
leaving no process and no listener, a taken port and a component that dies at start each
explained. Every process is stopped by pid at the end, whatever happened."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.cluster_fixture import kube_binaries, node_items
from webhook.devcluster.controlplane import ControlPlane
from webhook.devcluster.processes import listening

pytestmark = pytest.mark.controlplane


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "webhook", "cluster", *args],
                          capture_output=True, text=True, check=False, timeout=300)


@pytest.fixture
def cluster_dir(tmp_path: Path) -> Iterator[Path]:
    root = tmp_path / "cluster"
    yield root
    plane = ControlPlane.load(root)
    if plane is not None:
        plane.stop()


@pytest.fixture
def nodes_file(tmp_path: Path) -> Path:
    path = tmp_path / "nodes.json"
    path.write_text(json.dumps({"apiVersion": "v1", "kind": "NodeList",
                                "items": node_items()[:2]}))
    return path


def test_up_twice_then_down_leaves_nothing(cluster_dir: Path, nodes_file: Path) -> None:
    bin_dir = kube_binaries()
    up = cli("up", "--dir", str(cluster_dir), "--bin-dir", str(bin_dir),
             "--nodes", str(nodes_file))
    assert up.returncode == 0, up.stderr
    assert f"kubeconfig  {cluster_dir / 'kubeconfig'}" in up.stdout
    assert "apply --dry-run=server -o yaml -f examples/pod.yaml" in up.stdout

    plane = ControlPlane.load(cluster_dir)
    assert plane is not None
    assert {p.name for p in plane.running()} == {
        "etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "webhook"}
    ports = [int(str(port)) for port in (*plane.ports.values(), plane.extra["webhook_port"])]

    again = cli("up", "--dir", str(cluster_dir), "--bin-dir", str(bin_dir))
    assert again.returncode == 1
    assert "already running" in again.stderr and "cluster-down" in again.stderr
    assert cli("status", "--dir", str(cluster_dir)).returncode == 0

    down = cli("down", "--dir", str(cluster_dir))
    assert down.returncode == 0, down.stderr
    assert not plane.running()
    assert not (cluster_dir / "kubeconfig").exists()  # `make dry-run` no longer aims at it
    assert not any(listening(port) for port in ports), ports
    assert cli("status", "--dir", str(cluster_dir)).returncode == 1


def test_a_taken_port_is_refused_before_anything_starts(cluster_dir: Path) -> None:
    bin_dir = kube_binaries()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        for flag in ("--apiserver-port", "--webhook-port"):
            result = cli("up", "--dir", str(cluster_dir), "--bin-dir", str(bin_dir),
                         flag, str(port))
            assert result.returncode == 1
            assert f"port 127.0.0.1:{port} is already in use" in result.stderr
            plane = ControlPlane.load(cluster_dir)
            assert plane is None or not plane.running()


def test_a_component_that_dies_at_start_is_shown_and_the_rest_stopped(
        cluster_dir: Path, tmp_path: Path, nodes_file: Path) -> None:
    real = kube_binaries()
    broken = tmp_path / "bin"
    broken.mkdir()
    for binary in real.iterdir():
        os.symlink(binary, broken / binary.name)
    (broken / "kube-scheduler").unlink()
    script = broken / "kube-scheduler"
    script.write_text("#!/bin/sh\necho 'E1125 scheduler: cannot read its configuration' >&2\n"
                      "exit 3\n")
    script.chmod(0o755)
    result = cli("up", "--dir", str(cluster_dir), "--bin-dir", str(broken),
                 "--nodes", str(nodes_file))
    assert result.returncode == 1
    assert "kube-scheduler exited while starting" in result.stderr
    assert "cannot read its configuration" in result.stderr  # the log's tail
    plane = ControlPlane.load(cluster_dir)
    assert plane is not None and not plane.running()
