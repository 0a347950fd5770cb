"""Certificates and keys of the local control plane: one cluster CA, kube-apiserver's serving
certificate (127.0.0.1, localhost, the in-cluster names), an admin client certificate
(group system:masters) for the components and the developer, the client certificate
kube-apiserver presents to admission webhooks (CN kube-apiserver, client auth only), and the
service-account signing key pair (TokenRequest, pod-bound tokens)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec

from webhook.serving.certs import PEM, Authority, issue, key_pem, load_authority, new_authority

DAYS = 30
# The name the API server's webhook client certificate carries (what --client-names allows by
# default, as Gatekeeper's --client-cn-name).
WEBHOOK_CLIENT_NAME = "kube-apiserver"
# 198.18.0.1 and 198.18.16.1: the API server's address and the `kubernetes` Service's in the
# network namespace of a cluster with real nodes (realnodes/network.py).
APISERVER_NAMES = ("127.0.0.1", "localhost", "kubernetes", "kubernetes.default",
                   "kubernetes.default.svc", "kubernetes.default.svc.cluster.local",
                   "198.18.0.1", "198.18.16.1")


@dataclass(frozen=True, slots=True)
class ClusterPki:
    """Paths of the files `ensure` writes into one directory."""

    ca_cert: Path
    ca_key: Path
    apiserver_cert: Path
    apiserver_key: Path
    admin_cert: Path
    admin_key: Path
    sa_key: Path
    sa_pub: Path
    webhook_client_cert: Path
    webhook_client_key: Path

    @classmethod
    def at(cls, root: Path) -> ClusterPki:
        return cls(*(root / name for name in (
            "ca.crt", "ca.key", "apiserver.crt", "apiserver.key", "admin.crt", "admin.key",
            "sa.key", "sa.pub", "webhook-client.crt", "webhook-client.key")))


def ensure(root: Path) -> ClusterPki:
    """Write what is missing (a restarted cluster keeps its CA, keys and tokens valid)."""
    pki = ClusterPki.at(root)
    root.mkdir(parents=True, exist_ok=True)
    authority = load_authority(pki.ca_cert, pki.ca_key)
    fresh = authority is None
    if authority is None:
        authority = new_authority("layer-locality local cluster CA", days=DAYS)
        _write(pki.ca_key, key_pem(authority.key), 0o600)
        _write(pki.ca_cert, authority.cert.public_bytes(PEM), 0o644)
    # A new CA: every leaf is issued again (the old ones would not verify).
    if fresh or not pki.apiserver_cert.exists():
        _leaf(authority, pki.apiserver_cert, pki.apiserver_key, "kube-apiserver",
              sans=APISERVER_NAMES, server=True)
    if fresh or not pki.admin_cert.exists():
        _leaf(authority, pki.admin_cert, pki.admin_key, "layer-locality-admin",
              organizations=("system:masters",), server=False)
    if fresh or not pki.webhook_client_cert.exists():
        _leaf(authority, pki.webhook_client_cert, pki.webhook_client_key, WEBHOOK_CLIENT_NAME,
              server=False)
    if not pki.sa_key.exists():
        key = ec.generate_private_key(ec.SECP256R1())
        _write(pki.sa_key, key_pem(key), 0o600)
        _write(pki.sa_pub, key.public_key().public_bytes(
            PEM, serialization.PublicFormat.SubjectPublicKeyInfo), 0o644)
    return pki


def node_client(root: Path, node: str, cert_path: Path, key_path: Path) -> None:
    """A kubelet's client certificate: `system:node:<node>` in group system:nodes, what the Node
    authorizer and the NodeRestriction admission plugin recognise as that node."""
    pki = ClusterPki.at(root)
    authority = load_authority(pki.ca_cert, pki.ca_key)
    if authority is None:
        raise FileNotFoundError(f"no cluster CA in {root}")
    _leaf(authority, cert_path, key_path, f"system:node:{node}",
          organizations=("system:nodes",), server=False)


def _leaf(authority: Authority, cert_path: Path, key_path: Path, name: str, *,
          sans: tuple[str, ...] = (), organizations: tuple[str, ...] = (),
          server: bool) -> None:
    key, cert = issue(authority, name, days=DAYS, sans=sans, organizations=organizations,
                      server=server, client=not server)
    _write(key_path, key_pem(key), 0o600)
    _write(cert_path, cert.public_bytes(PEM), 0o644)


def _write(path: Path, data: bytes, mode: int) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, mode)
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
    finally:
        os.close(fd)
