"""The webhook's serving certificate in each overlay:

* `layer-locality certs` (default service and namespace) makes a server-auth certificate for
  every Service DNS name the API server may use, issued by its CA;
* `scripts/render-ca-patch.sh` refuses a directory without certificates, and what it writes
  (the overlay's generated/) is git-ignored;
* self-signed: the rendered Secret holds those certificates (its name carries a content hash)
  and the caBundle is their CA; a real TLS handshake on 127.0.0.1 shows that the Secret's
  certificate verifies against the caBundle for every Service DNS name;
* cert-manager: no Secret, the caBundle injected from the serving Certificate, whose issuer
  chain ends in a self-signed Issuer.

Only loopback traffic.
"""

from __future__ import annotations

import base64
import socket
import ssl
import subprocess
import threading
from pathlib import Path

from cryptography import x509
from cryptography.x509.oid import ExtendedKeyUsageOID

from tests.integration.manifests_fixture import (
    MANIFESTS,
    NAMESPACE,
    REPO,
    SERVICE_DNS_NAMES,
    TLS_SECRET,
    Obj,
    only,
)


def test_serving_certificate_sans_cover_the_service(cert_dir: Path) -> None:
    ca = x509.load_pem_x509_certificate((cert_dir / "ca.crt").read_bytes())
    leaf = x509.load_pem_x509_certificate((cert_dir / "tls.crt").read_bytes())
    sans = leaf.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert set(SERVICE_DNS_NAMES) <= set(sans.get_values_for_type(x509.DNSName))
    eku = leaf.extensions.get_extension_for_class(x509.ExtendedKeyUsage).value
    assert ExtendedKeyUsageOID.SERVER_AUTH in eku
    leaf.verify_directly_issued_by(ca)


def test_render_script_refuses_missing_certs(tmp_path: Path) -> None:
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    (overlay / "kustomization.yaml").write_text("resources: []\n")
    result = subprocess.run(
        [
            "bash",
            str(REPO / "scripts" / "render-ca-patch.sh"),
            str(tmp_path / "none"),
            str(overlay),
        ],
        check=False,
        capture_output=True,
        text=True,
    )
    assert result.returncode != 0
    assert "layer-locality certs" in result.stderr
    assert not (overlay / "generated").exists()


def test_generated_dir_is_git_ignored() -> None:
    ignore = (REPO / ".gitignore").read_text().splitlines()
    assert "manifests/overlays/self-signed/generated/" in ignore
    kustomization = (MANIFESTS / "overlays" / "self-signed" / "kustomization.yaml").read_text()
    assert "generated/ca-bundle-patch.yaml" in kustomization


def _tls_handshake(cert: Path, key: Path, ca_pem: str, server_name: str) -> bytes:
    """Serve `cert` on 127.0.0.1 and connect as the API server would: trusting only caBundle
    and checking `server_name`. Returns what the server sent."""
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cadata=ca_pem)
    errors: list[BaseException] = []
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(30)

        def serve() -> None:
            try:
                conn, _ = listener.accept()
                with server_ctx.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(b"ok")
            except (OSError, ssl.SSLError) as exc:
                errors.append(exc)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        with (
            socket.create_connection(listener.getsockname(), timeout=30) as raw,
            client_ctx.wrap_socket(raw, server_hostname=server_name) as tls,
        ):
            data = tls.recv(2)
        thread.join(30)
    assert not errors, errors
    return data


def test_self_signed_overlay_secret_and_ca_bundle(
    rendered: dict[str, list[Obj]], cert_dir: Path, tmp_path: Path
) -> None:
    objects = rendered["self-signed"]
    secret = only(objects, "Secret")
    assert secret["type"] == "kubernetes.io/tls"
    # The name carries a content hash: rotating the certificates rolls the pods.
    assert secret["metadata"]["name"].startswith(TLS_SECRET + "-")
    data = {k: base64.b64decode(v) for k, v in secret["data"].items()}
    assert data == {n: (cert_dir / n).read_bytes() for n in ("ca.crt", "tls.crt", "tls.key")}
    volumes = only(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": secret["metadata"]["name"]}} in volumes

    hooks = only(objects, "MutatingWebhookConfiguration")["webhooks"]
    ca_pem = base64.b64decode(hooks[0]["clientConfig"]["caBundle"])
    assert ca_pem == data["ca.crt"]
    assert len(hooks) == 2 and all(h["clientConfig"]["caBundle"] == hooks[0]["clientConfig"][
        "caBundle"] for h in hooks)

    # What the API server does: TLS to the Service name, trusting only the caBundle.
    (tmp_path / "tls.crt").write_bytes(data["tls.crt"])
    (tmp_path / "tls.key").write_bytes(data["tls.key"])
    for name in SERVICE_DNS_NAMES:
        assert (
            _tls_handshake(tmp_path / "tls.crt", tmp_path / "tls.key", ca_pem.decode(), name)
            == b"ok"
        )


def test_cert_manager_overlay_wiring(rendered: dict[str, list[Obj]]) -> None:
    objects = rendered["cert-manager"]
    assert not [o for o in objects if o["kind"] == "Secret"]
    mwc = only(objects, "MutatingWebhookConfiguration")
    for hook in mwc["webhooks"]:
        assert "caBundle" not in hook["clientConfig"]  # the CA injector fills it
    ref = mwc["metadata"]["annotations"]["cert-manager.io/inject-ca-from"]
    ns, _, name = ref.partition("/")
    serving = only(objects, "Certificate", name)
    assert serving["metadata"]["namespace"] == ns == NAMESPACE
    assert serving["spec"]["secretName"] == TLS_SECRET
    assert set(SERVICE_DNS_NAMES) <= set(serving["spec"]["dnsNames"])
    assert "server auth" in serving["spec"]["usages"]
    volumes = only(objects, "Deployment")["spec"]["template"]["spec"]["volumes"]
    assert {"name": "tls", "secret": {"secretName": TLS_SECRET}} in volumes

    # Issuer chain: serving <- CA Issuer <- CA Certificate <- self-signed Issuer.
    ca_issuer = only(objects, "Issuer", serving["spec"]["issuerRef"]["name"])
    ca_cert = [
        c
        for c in objects
        if c["kind"] == "Certificate"
        and c["spec"]["secretName"] == ca_issuer["spec"]["ca"]["secretName"]
    ]
    assert len(ca_cert) == 1 and ca_cert[0]["spec"]["isCA"] is True
    root = only(objects, "Issuer", ca_cert[0]["spec"]["issuerRef"]["name"])
    assert root["spec"] == {"selfSigned": {}}
