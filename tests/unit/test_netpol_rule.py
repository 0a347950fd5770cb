"""The NetworkPolicy enforcer's pieces that need no cluster (webhook/devcluster/realnodes/
netpol.py, webhook/devcluster/binaries.py): the iptables rule feeding its queue, and where its
binary is found."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from webhook.devcluster.binaries import NETPOL_BUILD_SCRIPT, NETPOL_ENV, netpol_bin_dir
from webhook.devcluster.processes import ClusterError
from webhook.devcluster.realnodes.netpol import QUEUE, forward_rule
from webhook.devcluster.realnodes.network import POD_CIDR


def test_the_rule_queues_new_pod_to_pod_connections_only() -> None:
    assert forward_rule("198.19.0.0/16", 100) == [
        "-s", "198.19.0.0/16", "-d", "198.19.0.0/16", "-m", "conntrack", "--ctstate", "NEW",
        "-j", "NFQUEUE", "--queue-num", "100"]


def test_the_default_rule_is_the_pod_range_and_the_enforcers_queue() -> None:
    rule = forward_rule()
    assert rule[rule.index("-s") + 1] == rule[rule.index("-d") + 1] == POD_CIDR
    assert rule[rule.index("--queue-num") + 1] == str(QUEUE) == "100"
    # No --queue-bypass: without the enforcer the queue drops rather than lets through.
    assert "--queue-bypass" not in rule


def test_the_environment_names_the_enforcers_directory(tmp_path: Path) -> None:
    # The build script is never run when the variable is set (there is none under tmp_path).
    assert netpol_bin_dir({NETPOL_ENV: "/opt/netpol/bin"}, root=tmp_path) \
        == Path("/opt/netpol/bin")
    assert NETPOL_ENV == "LAYER_LOCALITY_NETPOL_BIN"


def test_else_hack_netpol_build_sh_prints_it(tmp_path: Path) -> None:
    script = tmp_path / NETPOL_BUILD_SCRIPT
    script.parent.mkdir(parents=True)
    script.write_text("#!/bin/sh\necho building >&2\necho /cache/netpol/v0.8.0-abc/bin\n")
    os.chmod(script, 0o755)
    assert netpol_bin_dir({}, root=tmp_path) == Path("/cache/netpol/v0.8.0-abc/bin")


def test_outside_a_checkout_the_directory_must_be_named(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match=NETPOL_ENV):
        netpol_bin_dir({}, root=tmp_path)
