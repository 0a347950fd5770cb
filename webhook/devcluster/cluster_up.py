"""`layer-locality cluster up`: the options checked, the control plane, the nodes and the webhook
started (cluster.up), the chart installed in-cluster, the seed scenario run, and the next steps
printed. With real nodes (--kubelets) it first makes the cluster's network namespace and runs
the same `cluster up` again inside it.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

from webhook.devcluster.binaries import helm_bin_dir, image_layout, node_bin_dir
from webhook.devcluster.cluster import LocalCluster, load_node_items, up
from webhook.devcluster.controlplane import ControlPlane
from webhook.devcluster.install import helm_install_argv
from webhook.devcluster.pki import ClusterPki
from webhook.devcluster.processes import ClusterError, Process, start_ticks, stop


def _data(name: str) -> Path:
    return Path(str(resources.files("webhook") / "data" / name))


def up_command(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    root = args.dir.resolve()
    helm = None
    if args.kubelets and args.netns_holder is None:
        return _up_in_namespace(args, env)
    try:
        if args.install in ("helm", "in-cluster"):
            helm = (args.helm_bin or helm_bin_dir(env)).resolve() / "helm"
        if args.install == "in-cluster" and not args.kubelets:
            raise ClusterError("--install in-cluster needs real nodes (--kubelets N)")
        if args.registry_bandwidth is not None and not args.kubelets:
            raise ClusterError("--registry-bandwidth needs real nodes (--kubelets N)")
        holder = None
        if args.netns_holder is not None:
            holder = Process("netns", args.netns_holder, start_ticks(args.netns_holder) or -1,
                             (), root / "logs" / "netns.log")
        fake = args.nodes or (None if args.kubelets else _data("demo-nodes.json"))
        client_ca = ClusterPki.at(root / "pki").ca_cert if args.client_auth else None
        cluster = up(root, args.bin_dir.resolve(),
                     load_node_items(fake) if fake else [],
                     catalog=(args.catalog or _data("demo-catalog.json")).resolve(),
                     apiserver_port=args.apiserver_port, webhook_port=args.webhook_port,
                     helm=helm if args.install == "helm" else None,
                     install_objects=args.install in ("kustomize", "helm"),
                     kubelets=args.kubelets,
                     node_bin=args.node_bin.resolve() if args.node_bin else None,
                     netns_holder=holder, registry_bandwidth=args.registry_bandwidth,
                     percentage_of_nodes_to_score=args.percentage_of_nodes_to_score,
                     client_qps=args.client_qps,
                     webhook_args=["--client-ca", str(client_ca)] if client_ca else [])
        if args.install == "in-cluster" and helm is not None:
            from webhook.devcluster.realnodes.incluster import install

            extra = (["--set", "clientAuth.enabled=true", "--set-file",
                      f"clientAuth.caBundle={client_ca}"] if client_ca else [])
            print(install(cluster, args.image_layout, helm, extra=extra))
        seeded = _seed(cluster, root) if args.seed_demo and args.kubelets else ""
    except (ClusterError, OSError, ValueError) as exc:
        print(f"layer-locality cluster: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # an API error while setting up: everything was stopped already
        print(f"layer-locality cluster: setting up the cluster failed: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    kubeconfig = cluster.kubeconfig
    kubectl = cluster.kubectl
    if args.kubelets:
        webhook = {"in-cluster": "pods behind the Service layer-locality/layer-locality",
                   "none": "not installed"}.get(args.install, cluster.webhook_url)
        print(f"""local cluster up with {args.kubelets} real nodes, inside its own network namespace
  kube-apiserver {cluster.plane.server} (in the namespace), webhook {webhook}
  kubeconfig  {kubeconfig}
  logs        {root / 'logs'}

Everything listens inside the namespace: reach it with `layer-locality cluster exec`
(KUBECONFIG is set, the pinned kubectl first on PATH), or `make cluster-exec CMD='...'`:
  layer-locality cluster exec --dir {args.dir} -- kubectl get nodes -o wide
  layer-locality cluster exec --dir {args.dir} -- kubectl apply -f examples/namespace.yaml
  layer-locality cluster exec --dir {args.dir} -- \\
      kubectl apply --dry-run=server -o yaml -f examples/pod.yaml
  make cluster-down{seeded}""")
        return 0
    print(f"""local cluster up: kube-apiserver {cluster.plane.server}, webhook {cluster.webhook_url}
  kubeconfig  {kubeconfig}
  kubectl     {kubectl}   (the pinned version; any kubectl within one minor works)
  logs        {root / 'logs'}

Next:
  export KUBECONFIG={kubeconfig}
  {kubectl} get nodes -L topology.kubernetes.io/zone
  {kubectl} apply -f examples/namespace.yaml
  {kubectl} apply --dry-run=server -o yaml -f examples/pod.yaml
  make dry-run        (uses this cluster while it runs)
  make cluster-down""")
    if helm is not None:
        argv = helm_install_argv(helm, kubeconfig, cluster.webhook_url,
                                 cluster.webhook_certs.ca_cert)
        print(f"""
Installed with the Helm chart (release layer-locality, namespace layer-locality):
  {' '.join(argv)}
Change a value (the webhook outside the cluster reads its own flags; the chart's settings
reach in-cluster pods):
  {helm} upgrade layer-locality charts/layer-locality --kubeconfig {kubeconfig} \\
    --namespace layer-locality --reuse-values --set webhook.timeoutSeconds=5
  {helm} uninstall layer-locality --kubeconfig {kubeconfig} --namespace layer-locality""")
    return 0


def _seed(cluster: LocalCluster, root: Path) -> str:
    """The seed scenario (realnodes/seed.py) on the cluster's real nodes; its next steps."""
    from kubernetes import client

    from webhook.devcluster.realnodes.bringup import recorded_nodes
    from webhook.devcluster.realnodes.seed import next_steps, seed

    nodes = [node.name for node in recorded_nodes(cluster.plane)]
    with cluster.api_client() as api:
        path = seed(client.CoreV1Api(api), nodes, root)
    return next_steps(path, nodes, f"layer-locality cluster exec --dir {root} --")


def _up_in_namespace(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    """Make the cluster's network and mount namespace (a holder process owns them), then run
    this same `cluster up` inside it (nsenter), so that every component it starts, and
    everything they configure, lives there. On failure, take down whatever was started."""
    from webhook.devcluster.realnodes.namespaces import enter, start_holder
    from webhook.devcluster.realnodes.teardown import teardown

    root = args.dir.resolve()
    try:
        from webhook.devcluster.realnodes.network import MAX_NODES

        if not 0 < args.kubelets <= MAX_NODES:
            raise ClusterError(f"--kubelets must be within 1..{MAX_NODES}")
        if os.geteuid() != 0:
            raise ClusterError("real nodes need root (network namespaces, mounts, cgroups, "
                               "containerd)")
        if not (args.bin_dir / "kubelet").is_file():
            raise ClusterError(f"{args.bin_dir / 'kubelet'} is missing: rebuild with "
                               "hack/kube/build.sh (it builds kubelet and kube-proxy too)")
        node_bin = (args.node_bin or node_bin_dir(env)).resolve()
        layout = None
        if args.install == "in-cluster":
            # Built here, outside the namespace: a cold build reaches Debian and PyPI.
            layout = (args.image_layout or image_layout(env)).resolve()
        existing = ControlPlane.load(root)
        if existing is not None and existing.running():
            raise ClusterError(f"a cluster is already running from {root}; stop it first "
                               "(make cluster-down)")
        holder = start_holder("netns", root / "logs" / "netns.log", net=True)
    except ClusterError as exc:
        print(f"layer-locality cluster: {exc}", file=sys.stderr)
        return 1
    argv = [*enter(holder), *inner_up_argv(args, root, node_bin, holder.pid, layout)]
    # Wait for the inner run whatever happens here: Ctrl-C reaches it too (one process group)
    # and it tears down what it started; SIGKILLing it (subprocess.run's way out) would stop
    # that half-way. Whatever it left, the teardown below removes.
    inner = subprocess.Popen(argv)
    code = None
    try:
        while code is None:
            try:
                code = inner.wait()
            except KeyboardInterrupt:
                continue
    finally:
        if code != 0:
            plane = ControlPlane.load(root)
            recorded = plane.processes.get("netns") if plane is not None else None
            # This run's state only (an earlier run's file may still be there).
            if plane is not None and recorded is not None and \
                    (recorded.pid, recorded.start_ticks) == (holder.pid, holder.start_ticks):
                teardown(plane)
            stop(holder)
    return code


def inner_up_argv(args: argparse.Namespace, root: Path, node_bin: Path, holder_pid: int,
                  layout: Path | None) -> list[str]:
    """The `cluster up` that _up_in_namespace runs inside the namespace: the same options,
    resolved, plus the holder's pid."""
    argv = [sys.executable, "-m", "webhook", "cluster", "up",
            "--dir", str(root), "--bin-dir", str(args.bin_dir.resolve()),
            "--kubelets", str(args.kubelets), "--node-bin", str(node_bin),
            "--netns-holder", str(holder_pid), "--install", args.install]
    if args.seed_demo:
        argv.append("--seed-demo")
    if args.client_auth:
        argv.append("--client-auth")
    for flag, value in (("--nodes", args.nodes), ("--catalog", args.catalog),
                        ("--apiserver-port", args.apiserver_port),
                        ("--webhook-port", args.webhook_port), ("--helm-bin", args.helm_bin),
                        ("--image-layout", layout),
                        ("--registry-bandwidth", args.registry_bandwidth),
                        ("--percentage-of-nodes-to-score", args.percentage_of_nodes_to_score),
                        ("--client-qps", args.client_qps)):
        if value is not None:
            argv += [flag, str(value.resolve() if isinstance(value, Path) else value)]
    return argv
