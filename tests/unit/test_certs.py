"""Certificate generation: SANs, key permissions, validity, CA chain."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import stat
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from webhook.certs import generate, service_names


def test_files_sans_and_validity(tmp_path: Path) -> None:
    now = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    files = generate("hook", "ops", tmp_path / "out", days=30,
                     extra_sans=["hook.example.com", "127.0.0.1"], now=now)
    cert = x509.load_pem_x509_certificate(files.cert.read_bytes())
    ca = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert sans.get_values_for_type(x509.DNSName) == [
        "hook", "hook.ops", "hook.ops.svc", "hook.ops.svc.cluster.local", "hook.example.com"]
    assert sans.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("127.0.0.1")]
    assert cert.not_valid_after_utc == now + dt.timedelta(days=30)
    assert cert.issuer == ca.subject
    public = ca.public_key()
    assert isinstance(public, ec.EllipticCurvePublicKey)
    cert.verify_directly_issued_by(ca)
    assert stat.S_IMODE(files.key.stat().st_mode) == 0o600
    assert base64.b64decode(files.ca_bundle()) == files.ca_cert.read_bytes()


def test_service_names() -> None:
    assert service_names("s", "n")[-1] == "s.n.svc.cluster.local"
