"""`layer-locality cluster up|down|status`: the local control plane for development
(`make cluster`, `make cluster-down`)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping
from importlib import resources
from pathlib import Path

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
    up.add_argument("--install", choices=("kustomize", "helm"), default="kustomize",
                    help="install the project's objects from the kustomize manifests (default) "
                         "or from the Helm chart (charts/layer-locality)")
    up.add_argument("--helm-bin", type=Path, default=None,
                    help="with --install helm: the directory holding helm (default: "
                         "$LAYER_LOCALITY_HELM_BIN, else what hack/helm/build.sh prints)")
    up.set_defaults(run=_up)
    down = actions.add_parser("down", help="stop every process `up` started (by pid)")
    _dir_option(down)
    down.set_defaults(run=_down)
    status = actions.add_parser("status", help="which processes run, and where")
    _dir_option(status)
    status.set_defaults(run=_status)


def _dir_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--dir", type=Path, default=DEFAULT_DIR,
                        help="state, kubeconfig, certificates and logs (default: .cluster)")


def _data(name: str) -> Path:
    return Path(str(resources.files("webhook") / "data" / name))


def _up(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from webhook.devcluster.cluster import load_node_items, up
    from webhook.devcluster.processes import ClusterError

    root = args.dir.resolve()
    helm = None
    try:
        if args.install == "helm":
            from webhook.devcluster.binaries import helm_bin_dir

            helm = (args.helm_bin or helm_bin_dir(env)).resolve() / "helm"
        cluster = up(root, args.bin_dir.resolve(),
                     load_node_items(args.nodes or _data("demo-nodes.json")),
                     catalog=(args.catalog or _data("demo-catalog.json")).resolve(),
                     apiserver_port=args.apiserver_port, webhook_port=args.webhook_port,
                     helm=helm)
    except (ClusterError, OSError, ValueError) as exc:
        print(f"layer-locality cluster: {exc}", file=sys.stderr)
        return 1
    except Exception as exc:  # an API error while setting up: everything was stopped already
        print(f"layer-locality cluster: setting up the cluster failed: "
              f"{type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    kubeconfig = cluster.kubeconfig
    kubectl = cluster.kubectl
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


def _down(args: argparse.Namespace, env: Mapping[str, str]) -> int:
    from webhook.devcluster.controlplane import ControlPlane

    plane = ControlPlane.load(args.dir.resolve())
    if plane is None:
        print(f"no cluster state in {args.dir}: nothing to stop", file=sys.stderr)
        return 0
    running = plane.running()
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
    print(f"kube-apiserver https://127.0.0.1:{plane.ports['apiserver']}  "
          f"kubeconfig {plane.kubeconfig}")
    return 0 if plane.running() else 1
