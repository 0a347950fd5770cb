"""`layer-locality cluster up|down|status`: the local control plane for development
(`make cluster`, `make cluster-down`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from webhook.devcluster.cluster import LocalCluster

DEFAULT_DIR = Path(".cluster")


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    cluster = sub.add_parser(
        "cluster", help="a local control plane (etcd, kube-apiserver, kube-scheduler, "
                        "kube-controller-manager) with fake nodes and the webhook on the host")
    actions = cluster.add_subparsers(required=True, metavar="ACTION")
    up = actions.add_parser("up", help="start it, print the kubeconfig path and next commands")
    _dir_option(up)
    up.add_argument("--bin-dir", type=Path, required=True,
                    help="the pinned binaries (the directory hack/kube/build.sh prints)")
    up.add_argument("--nodes", type=Path, default=None,
                    help="NodeList to create as fake nodes (default: the demo inventory)")
    up.add_argument("--catalog", type=Path, default=None,
                    help="layer catalog the webhook reads (default: the demo catalog)")
    up.add_argument("--apiserver-port", type=int, default=None,
                    help="kube-apiserver's port on 127.0.0.1 (default: a free one)")
    up.add_argument("--webhook-port", type=int, default=None,
                    help="the webhook's port on 127.0.0.1 (default: a free one)")
    up.add_argument("--install", choices=("kustomize", "helm", "in-cluster", "none"),
                    default="kustomize",
                    help="install the project's objects from the kustomize manifests (default) "
                         "or from the Helm chart (charts/layer-locality), both for the webhook "
                         "on the host; in-cluster (with --kubelets): the image pushed to the "
                         "cluster's registry and the chart installed with its defaults, the "
                         "webhook and the node agent running as pods; none: nothing")
    up.add_argument("--image-layout", type=Path, default=None,
                    help="with --install in-cluster: the image as an OCI layout (default: "
                         "$LAYER_LOCALITY_IMAGE_LAYOUT, else what hack/image/build.sh prints)")
    up.add_argument("--helm-bin", type=Path, default=None,
                    help="with --install helm: the directory holding helm (default: "
                         "$LAYER_LOCALITY_HELM_BIN, else what hack/helm/build.sh prints)")
    up.add_argument("--kubelets", type=int, default=0, metavar="N",
                    help="also start N real nodes (kubelet, containerd v2, CNI, kube-proxy and "
                         "a registry) in a network namespace of the cluster's own; needs root "
                         "(docs/local-cluster.md). With N > 0 no fake nodes are made unless "
                         "--nodes names them")
    up.add_argument("--node-bin", type=Path, default=None,
                    help="with --kubelets: containerd, its shim, the CNI plugins and pause "
                         "(default: $LAYER_LOCALITY_NODE_BIN, else what hack/node/build.sh "
                         "prints)")
    up.add_argument("--registry-bandwidth", type=bandwidth, default=None, metavar="SIZE",
                    help="with --kubelets: limit each node's downloads from the registry to "
                         "SIZE bytes per second (e.g. 8MiB), through a proxy on the node IPs "
                         "(default: no limit)")
    up.add_argument("--percentage-of-nodes-to-score", type=int, default=None, metavar="N",
                    help="kube-scheduler's percentageOfNodesToScore, 0-100 (default: its own, "
                         "adaptive: about 10 %% of the nodes at 5,000); 100 scores every "
                         "feasible node, as docs/deploy.md recommends for this webhook")
    up.add_argument("--client-qps", type=int, default=None, metavar="N",
                    help="kube-controller-manager's and kube-scheduler's API client QPS "
                         "(burst twice it; default: theirs, 20 and 50, which set how fast a "
                         "ReplicaSet creates pods)")
    up.add_argument("--seed-demo", action="store_true",
                    help="with --kubelets 2 or more: build two images sharing a base, run one "
                         "on node-1 and the other on node-2, and print a dry run that shows "
                         "the webhook's layer-aware preference (`make cluster NODES=N` does)")
    up.add_argument("--client-auth", action="store_true",
                    help="the webhook answers only the API server's client certificate "
                         "(`serve --client-ca` with the cluster CA; the chart's clientAuth "
                         "in-cluster): kube-apiserver always presents one to webhooks here")
    # Internal: the holder of the namespace this process was re-run in (see _up).
    up.add_argument("--netns-holder", type=int, default=None, help=argparse.SUPPRESS)
    up.set_defaults(run=_up)
    # Internal: started by `up` with real and fake nodes (devcluster/heartbeat.py).
    heartbeat = actions.add_parser("heartbeat")
    _dir_option(heartbeat)
    heartbeat.set_defaults(run=_heartbeat)
    # Internal: started by `up --registry-bandwidth` in front of the registry
    # (realnodes/throttle.py).
    throttle = actions.add_parser("throttle")
    throttle.add_argument("--listen", action="append", required=True, metavar="IP:PORT")
    throttle.add_argument("--upstream", required=True, metavar="IP:PORT")
    throttle.add_argument("--rate", type=bandwidth, required=True, metavar="BYTES_PER_S")
    throttle.add_argument("--burst", type=bandwidth, default=None, metavar="BYTES")
    throttle.set_defaults(run=_throttle)
    execute = actions.add_parser(
        "exec", help="run a command inside the cluster's network namespace (real nodes), "
                     "with KUBECONFIG set: layer-locality cluster exec -- kubectl get nodes")
    _dir_option(execute)
    execute.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND")
    execute.set_defaults(run=_exec)
    down = actions.add_parser("down", help="stop every process `up` started (by pid)")
    _dir_option(down)
    down.set_defaults(run=_down)
    status = actions.add_parser("status", help="which processes run, and where")
    _dir_option(status)
    status.set_defaults(run=_status)


def _dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR,
                        help="state, kubeconfig, certificates and logs (default: .cluster)")


def bandwidth(text: str) -> int:
    """A positive size (`8MiB`, `500000`): bytes per second for --registry-bandwidth."""
    from webhook.value_parsers import parse_size

    try:
        value = parse_size(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, got {text!r}")
    return value


def _data(name: str) -> Path:
    return Path(str(resources.files("webhook") / "data" / name))


def _up(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from webhook.devcluster.cluster import load_node_items, up
    from webhook.devcluster.processes import ClusterError

    root = args.dir.resolve()
    helm = None
    if args.kubelets and args.netns_holder is None:
        return _up_in_namespace(args, env)
    try:
        if args.install in ("helm", "in-cluster"):
            from webhook.devcluster.binaries import helm_bin_dir

            helm = (args.helm_bin or helm_bin_dir(env)).resolve() / "helm"
        if args.install == "in-cluster" and not args.kubelets:
            raise ClusterError("--install in-cluster needs real nodes (--kubelets N)")
        if args.registry_bandwidth is not None and not args.kubelets:
            raise ClusterError("--registry-bandwidth needs real nodes (--kubelets N)")
        holder = None
        if args.netns_holder is not None:
            from webhook.devcluster.processes import Process, start_ticks

            holder = Process("netns", args.netns_holder, start_ticks(args.netns_holder) or -1,
                             (), root / "logs" / "netns.log")
        fake = args.nodes or (None if args.kubelets else _data("demo-nodes.json"))
        from webhook.devcluster.pki import ClusterPki

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
        from webhook.devcluster.install import helm_install_argv

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
    import os
    import subprocess

    from webhook.devcluster.binaries import node_bin_dir
    from webhook.devcluster.controlplane import ControlPlane
    from webhook.devcluster.processes import ClusterError, stop
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
            from webhook.devcluster.binaries import image_layout

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


def _throttle(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from webhook.devcluster.realnodes.throttle import main

    return main(args.listen, args.upstream, args.rate, args.burst)


def _heartbeat(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    import json

    from webhook.devcluster.controlplane import ControlPlane
    from webhook.devcluster.heartbeat import run

    plane = ControlPlane.load(args.dir.resolve())
    if plane is None:
        print(f"no cluster in {args.dir}", file=sys.stderr)
        return 1
    run(str(plane.kubeconfig), json.loads(plane.extra.get("fake_nodes", "[]")))
    return 0


def _exec(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    import os

    from webhook.devcluster.controlplane import ControlPlane
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


def _down(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from webhook.devcluster.controlplane import ControlPlane

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


def _status(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from webhook.devcluster.controlplane import ControlPlane

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
