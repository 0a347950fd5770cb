"""Take real nodes down leaving nothing: no process, cgroup, mount, interface or namespace.

Order matters. The kubelets and kube-proxy stop first (nothing restarts pods), then each
containerd; the shims and containers they leave run on (a shim outlives containerd by design),
so every process still in a node's mount namespace and every process in its cgroup root is
killed, and the cgroups removed bottom-up. Then the control plane and the holders stop: the
last process of each namespace gone, the kernel frees the namespaces with every interface,
mount and pod network namespace in them.

`leftovers` is what the tests (and `cluster down`) check afterwards."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass

from webhook.devcluster.controlplane import ControlPlane
from webhook.devcluster.processes import ClusterError, stop
from webhook.devcluster.realnodes import cgroups, netpol
from webhook.devcluster.realnodes.bringup import recorded_nodes
from webhook.devcluster.realnodes.namespaces import (
    NETNS_HOLDER,
    NETNS_KEY,
    namespace_id,
    processes_in,
)


def _kill_namespace(namespace: str | None, kind: str, spare: int | None) -> None:
    if namespace is None:
        return
    for _ in range(50):
        # Never this process: `cluster up` tears down from inside the namespace on failure.
        pids = [p for p in processes_in(namespace, kind) if p not in (spare, os.getpid())]
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)


def teardown(plane: ControlPlane) -> list[str]:
    """Stop the nodes and then everything else; returns what could not be removed.

    The namespaces are swept for stray processes only when the holder still runs and is in
    the namespace recorded: once every process of a namespace is gone the kernel may give its
    id to another, whose processes must never be touched."""
    nodes = recorded_nodes(plane)
    holder = plane.processes.get(NETNS_HOLDER)
    recorded = plane.extra.get(NETNS_KEY)
    ours = recorded if (holder is not None and holder.alive()
                        and namespace_id(holder.pid, "net") == recorded) else None
    problems: list[str] = []
    if netpol.NETPOL in plane.processes:  # its iptables rule goes while the namespace is there
        try:
            netpol.stop_enforcer(plane)
        except ClusterError as exc:
            problems.append(str(exc))
    for prefix in ("kube-proxy", "kubelet-", "containerd-"):
        for name, process in reversed(list(plane.processes.items())):
            if name.startswith(prefix):
                stop(process)
    for node in nodes:
        mounts = plane.processes.get(f"mounts-{node.name}")
        if mounts is not None and mounts.alive():  # alive: its namespace is the node's
            _kill_namespace(namespace_id(mounts.pid, "mnt"), "mnt", spare=mounts.pid)
        problems += cgroups.remove(node.cgroup_root)
    # Everything recorded, gracefully, newest first; the holder last, after the sweep of
    # anything else left in its namespace (a command a test ran there), which it keeps ours.
    for name, process in reversed(list(plane.processes.items())):
        if name != NETNS_HOLDER:
            stop(process)
    if ours is not None and holder is not None:
        _kill_namespace(ours, "net", spare=holder.pid)
    plane.stop()
    return problems


@dataclass(frozen=True, slots=True)
class Leftovers:
    processes: tuple[int, ...]
    cgroups: tuple[str, ...]

    def __bool__(self) -> bool:
        return bool(self.processes or self.cgroups)


def leftovers(plane: ControlPlane) -> Leftovers:
    """Processes still in the cluster's network namespace and cgroup directories still there.
    Meant right after teardown (the namespace's id is not yet another's)."""
    namespace = plane.extra.get(NETNS_KEY)
    pids = tuple(processes_in(namespace, "net")) if namespace else ()
    dirs = tuple(str(p) for node in recorded_nodes(plane)
                 for p in cgroups.existing(node.cgroup_root))
    return Leftovers(pids, dirs)
