"""`layer-locality cluster down|status|exec` and the heartbeat `cluster up` starts: what acts on
the cluster whose state `cluster up` recorded in --dir."""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from webhook.devcluster.controlplane import ControlPlane


def heartbeat_command(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from webhook.devcluster.heartbeat import run

    plane = ControlPlane.load(args.dir.resolve())
    if plane is None:
        print(f"no cluster in {args.dir}", file=sys.stderr)
        return 1
    run(str(plane.kubeconfig), json.loads(plane.extra.get("fake_nodes", "[]")))
    return 0


def exec_command(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from webhook.devcluster.realnodes.namespaces import NETNS_HOLDER, enter

    plane = ControlPlane.load(args.dir.resolve())
    holder = plane.processes.get(NETNS_HOLDER) if plane else None
    if plane is None or holder is None or not holder.alive():
        print(f"no cluster with real nodes runs from {args.dir}", file=sys.stderr)
        return 1
    argv = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    if not argv:
        print("layer-locality cluster exec: name a command after --", file=sys.stderr)
        return 2
    os.environ["KUBECONFIG"] = str(plane.kubeconfig)
    # The pinned kubectl (and the other binaries) first: `cluster exec -- kubectl get nodes`.
    os.environ["PATH"] = f"{plane.bin_dir}:{os.environ.get('PATH', '/usr/bin:/bin')}"
    prefix = enter(holder, wd=Path.cwd())
    os.execvp(prefix[0], [*prefix, *argv])


def down_command(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    plane = ControlPlane.load(args.dir.resolve())
    if plane is None:
        print(f"no cluster state in {args.dir}: nothing to stop", file=sys.stderr)
        return 0
    running = plane.running()
    if plane.real_nodes:
        from webhook.devcluster.realnodes.teardown import leftovers, teardown

        problems = teardown(plane)
        remains = leftovers(plane)
        for problem in problems:
            print(f"could not remove {problem}", file=sys.stderr)
        if remains:
            print(f"left behind: processes {list(remains.processes)}, cgroups "
                  f"{list(remains.cgroups)}", file=sys.stderr)
            return 1
    plane.stop()
    # A stopped cluster's kubeconfig points nowhere: removing it also tells `make dry-run`.
    plane.kubeconfig.unlink(missing_ok=True)
    left = plane.running()
    if left:
        print("still running: " + ", ".join(f"{p.name} (pid {p.pid})" for p in left),
              file=sys.stderr)
        return 1
    names = ", ".join(f"{p.name} (pid {p.pid})" for p in running) or "nothing was running"
    print(f"stopped: {names}")
    return 0


def status_command(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    plane = ControlPlane.load(args.dir.resolve())
    if plane is None:
        print(f"no cluster in {args.dir}")
        return 1
    for process in plane.processes.values():
        state = "running" if process.alive() else "stopped"
        print(f"{process.name:24} pid {process.pid:<8} {state:8} {process.log}")
    from webhook.devcluster.realnodes.throttle import REGISTRY_BANDWIDTH

    if plane.extra.get(REGISTRY_BANDWIDTH):
        print(f"registry bandwidth {int(float(plane.extra[REGISTRY_BANDWIDTH]))} bytes/s "
              "per node")
    print(f"kube-apiserver https://127.0.0.1:{plane.ports['apiserver']}  "
          f"kubeconfig {plane.kubeconfig}")
    return 0 if plane.running() else 1
