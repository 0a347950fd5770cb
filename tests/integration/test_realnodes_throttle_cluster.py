"""A registry bandwidth on real nodes (`cluster up --kubelets 1 --registry-bandwidth 2MiB`):
the kubelet's own `Pulled` event says how long its pull of a ~6 MiB image took, and it took at
least the bytes over the rate; the registry's access log still attributes the blobs to the
node's IP (the throttle forwards the bytes, Host header included, unchanged); and the
throttle's own summary, written when `cluster down` stops it, counts at least those bytes.

The timing is a lower bound only: a throttle cannot be beaten, so it cannot flake on a slow
machine (realnodes_fixture: needs root and the built binaries)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.realnodes_fixture import (
    RealCluster,
    pod_manifest,
    require_real_nodes,
    running,
    wait_for,
)
from webhook.devcluster.install import repo_root
from webhook.devcluster.realnodes import oci
from webhook.devcluster.realnodes.network import CONTROL_PLANE_IP, REGISTRY_PORT
from webhook.devcluster.realnodes.registry import bytes_by_node, digests_by_node
from webhook.devcluster.realnodes.throttle import REGISTRY_BANDWIDTH, THROTTLE, default_burst
from webhook.telemetry.pulls import PULLED, parse_message

pytestmark = pytest.mark.realnodes

MiB = 1 << 20
RATE = 2 * MiB
FILLER = oci.filler_layer("throttled-6", 6 * MiB)


def test_a_node_pulls_no_faster_than_the_registry_bandwidth(tmp_path: Path) -> None:
    kube, node_bin = require_real_nodes()
    pause = oci.pause_image(node_bin / "pause")
    image = oci.Image("throttled/app", "1", (*pause.layers, FILLER), pause.entrypoint)
    root = tmp_path / "throttled"
    with running(root, 1, "--registry-bandwidth", "2MiB", "--install", "none") as runner:
        cluster = RealCluster(root, kube, runner)
        plane = cluster.plane
        assert plane.processes[THROTTLE].alive()
        assert plane.extra[REGISTRY_BANDWIDTH] == str(RATE)
        registry = json.loads((root / "registry" / "config.yml").read_text())
        assert registry["http"]["addr"] == f"{CONTROL_PLANE_IP}:{REGISTRY_PORT}"
        status = subprocess.run([sys.executable, "-m", "webhook", "cluster", "status",
                                 "--dir", str(root)], capture_output=True, text=True,
                                check=False, cwd=repo_root(), timeout=60)
        assert f"registry bandwidth {RATE} bytes/s per node" in status.stdout

        cluster.push(image)  # at 198.18.0.1: not through the throttle
        namespace = cluster.new_namespace(opted_in=False)
        cluster.kubectl("-n", namespace, "create", "-f", "-", stdin=json.dumps(
            pod_manifest("slow", cluster.ref(image), node="node-1")))
        cluster.wait_running(namespace, "slow")

        def pulls() -> list[str]:
            return [e["message"] for e in cluster.events(namespace, "slow")
                    if e["reason"] == "Pulled"]
        wait_for(lambda: bool(pulls()), 30, "the Pulled event")
        pulled = parse_message(pulls()[0])
        assert pulled is not None and pulled.result == PULLED
        # The filler at least crossed the throttle during the pull (the pause layer may not:
        # the sandbox image, pulled just before, holds the same layer).
        assert pulled.seconds >= 0.8 * (FILLER.size - default_burst(RATE)) / RATE

        ips = cluster.node_ips()
        fetches = cluster.fetches()
        assert FILLER.digest in digests_by_node(fetches, ips)["node-1"]
        fetched = bytes_by_node(fetches, ips)["node-1"]
        assert fetched >= FILLER.size
        throttle_log = plane.processes[THROTTLE].log
    # Stopped by `cluster down` (SIGTERM): its summary line for node-1's address.
    summary = [json.loads(line) for line in throttle_log.read_text().splitlines()
               if line.startswith('{"listen"')]
    assert [line["listen"] for line in summary] == [f"{ips['node-1']}:{REGISTRY_PORT}"]
    # Every blob byte the registry wrote to node-1, plus headers, manifests and the pause image.
    assert summary[0]["bytes_sent"] >= fetched
