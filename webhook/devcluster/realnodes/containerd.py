"""One containerd v2 per node: its own root and state (so each node has its own image store),
CRI on, pulling from the cluster's registry over plain HTTP, pods on the node's CNI bridge.

The node's mount namespace gives it the default /run, so its socket is at the default path
(/run/containerd/containerd.sock) in that namespace, as on a real machine; everything else lives
under the node's directory. What this machine needs (../shared/notes/real-nodes.md):
`restrict_oom_score_adj` (no CAP_SYS_RESOURCE: a sandbox asking for -998 fails in runc),
runc's cgroupfs driver, pod network namespaces mounted under the state directory (in the node's
mount namespace, gone with it)."""

from __future__ import annotations

import json
from pathlib import Path

from webhook.devcluster.realnodes.network import (
    TEST_NETWORK,
    NodeAddresses,
    registry_endpoint,
    registry_host,
)

SOCKET = Path("/run/containerd/containerd.sock")  # in the node's mount namespace
CNI_NETWORK = "layer-locality"
# Not needed on a node here and some probe for kernel features or devices at start.
DISABLED_PLUGINS = (
    "io.containerd.nri.v1.nri",
    "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.btrfs",
    "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.erofs",
    "io.containerd.snapshotter.v1.blockfile", "io.containerd.differ.v1.erofs",
    "io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing",
)


def _toml(value: object) -> str:
    # TOML basic strings and arrays of them read like JSON's.
    return json.dumps(value)


def config(node_dir: Path, node: NodeAddresses, sandbox_image: str, cni_bin: Path,
           runc: Path) -> str:
    """The node's config.toml (version 3 schema, which containerd 2.x reads)."""
    cri_images = "plugins.'io.containerd.cri.v1.images'"
    cri_runtime = "plugins.'io.containerd.cri.v1.runtime'"
    runc_options = f"{cri_runtime}.containerd.runtimes.runc.options"
    return "\n".join([
        "version = 3",
        f"root = {_toml(str(node_dir / 'containerd'))}",
        "state = '/run/containerd'",
        "imports = []",
        f"disabled_plugins = {_toml(list(DISABLED_PLUGINS))}",
        "[grpc]", f"  address = {_toml(str(SOCKET))}",
        "[ttrpc]", f"  address = {_toml(str(SOCKET) + '.ttrpc')}",
        f"[plugins.'io.containerd.internal.v1.opt']\n  path = {_toml(str(node_dir / 'opt'))}",
        f"[{cri_images}]", "  snapshotter = 'overlayfs'",
        f"[{cri_images}.pinned_images]", f"  sandbox = {_toml(sandbox_image)}",
        f"[{cri_images}.registry]", f"  config_path = {_toml(str(node_dir / 'certs.d'))}",
        f"[{cri_runtime}]", "  restrict_oom_score_adj = true",
        "  netns_mounts_under_state_dir = true",
        "  cdi_spec_dirs = []",
        f"[{runc_options}]", "  SystemdCgroup = false", f"  BinaryName = {_toml(str(runc))}",
        f"[{cri_runtime}.cni]", f"  bin_dirs = {_toml([str(cni_bin)])}",
        f"  conf_dir = {_toml(str(node_dir / 'cni' / 'net.d'))}",
        "[plugins.'io.containerd.grpc.v1.cri']",
        f"  stream_server_address = {_toml(node.ip)}", "  stream_server_port = '0'",
        "",
    ])


def hosts_toml(node: NodeAddresses) -> str:
    """certs.d/<registry>/hosts.toml: the cluster's registry over plain HTTP, reached at the
    node's own IP so the registry's access log tells which node fetched what."""
    server = f"http://{registry_endpoint(node)}"
    return "\n".join([
        f"server = {_toml(server)}",
        f"[host.{_toml(server)}]", "  capabilities = ['pull', 'resolve']", "",
    ])


def cni_conflist(node_dir: Path, node: NodeAddresses) -> dict[str, object]:
    """A bridge of the node's own with its pod subnet (host-local addresses, state under the
    node's directory) and portmap. Pods get a route to the test network only (nodes, Services,
    other pods' subnets): no default route, as the namespace around them has none either."""
    return {
        "cniVersion": "1.0.0", "name": CNI_NETWORK,
        "plugins": [
            {"type": "bridge", "bridge": node.bridge, "isGateway": True, "ipMasq": False,
             "hairpinMode": True,
             "ipam": {"type": "host-local", "dataDir": str(node_dir / "cni" / "ipam"),
                      "ranges": [[{"subnet": node.pod_cidr, "gateway": node.gateway}]],
                      "routes": [{"dst": str(TEST_NETWORK)}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def write(node_dir: Path, node: NodeAddresses, sandbox_image: str, cni_bin: Path,
          runc: Path) -> Path:
    """Write config.toml, hosts.toml and the CNI conflist; returns config.toml's path."""
    (node_dir / "cni" / "net.d").mkdir(parents=True, exist_ok=True)
    (node_dir / "cni" / "net.d" / "10-layer-locality.conflist").write_text(
        json.dumps(cni_conflist(node_dir, node), indent=2))
    certs = node_dir / "certs.d" / registry_host()
    certs.mkdir(parents=True, exist_ok=True)
    (certs / "hosts.toml").write_text(hosts_toml(node))
    path = node_dir / "containerd.toml"
    path.write_text(config(node_dir, node, sandbox_image, cni_bin, runc))
    return path
