"""Certificate generation: SANs, key permissions, validity, CA chain."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import stat
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives.asymmetric import ec

from webhook.serving.certs import generate, service_names


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


def _bundle(path: Path) -> list[x509.Certificate]:
    return x509.load_pem_x509_certificates(path.read_bytes())


def test_rotation_reuses_the_ca(tmp_path: Path) -> None:
    """A second run issues a new leaf under the same CA: the caBundle the API server holds
    verifies the new certificate, so a rotation never fails an admission."""
    first = generate("hook", "ops", tmp_path, days=30)
    bundle_before = first.ca_cert.read_bytes()
    leaf_before = first.cert.read_bytes()
    second = generate("hook", "ops", tmp_path, days=30)
    assert second.ca_cert.read_bytes() == bundle_before
    assert second.cert.read_bytes() != leaf_before
    new_leaf = x509.load_pem_x509_certificate(second.cert.read_bytes())
    new_leaf.verify_directly_issued_by(_bundle(second.ca_cert)[0])
    assert stat.S_IMODE(second.ca_key.stat().st_mode) == 0o600


def test_new_ca_keeps_the_old_one_in_the_bundle(tmp_path: Path) -> None:
    first = generate("hook", "ops", tmp_path, days=30)
    old_ca = _bundle(first.ca_cert)[0]
    second = generate("hook", "ops", tmp_path, days=30, new_ca=True)
    bundle = _bundle(second.ca_cert)
    assert len(bundle) == 2
    assert bundle[1] == old_ca
    assert bundle[0] != old_ca
    x509.load_pem_x509_certificate(second.cert.read_bytes()).verify_directly_issued_by(bundle[0])
    # The next rotation signs with the new CA; the certificate it replaces no longer needs the
    # old CA, so the bundle shrinks to the new one.
    third = generate("hook", "ops", tmp_path, days=30)
    assert _bundle(third.ca_cert) == bundle[:1]


def test_expired_cas_leave_the_bundle(tmp_path: Path) -> None:
    then = dt.datetime(2010, 1, 1, tzinfo=dt.UTC)  # its CA expired in 2020
    generate("hook", "ops", tmp_path, days=30, now=then)
    # A CA of the old format (no ca.key) is kept in the bundle only while valid: this one is not.
    (tmp_path / "ca.key").unlink()
    files = generate("hook", "ops", tmp_path, days=30)
    assert len(_bundle(files.ca_cert)) == 1


def test_a_ca_without_its_key_stays_in_the_bundle(tmp_path: Path) -> None:
    """Certificates written before the CA key was kept: the old CA is still trusted."""
    first = generate("hook", "ops", tmp_path, days=30)
    old_ca = _bundle(first.ca_cert)[0]
    first.ca_key.unlink()
    files = generate("hook", "ops", tmp_path, days=30)
    assert _bundle(files.ca_cert)[1:] == [old_ca]


def test_an_unusable_ca_is_never_replaced_silently(tmp_path: Path) -> None:
    import pytest

    first = generate("hook", "ops", tmp_path, days=30)
    bundle = first.ca_cert.read_bytes()
    first.ca_key.write_bytes(b"not a key")
    with pytest.raises(ValueError, match="--new-ca"):
        generate("hook", "ops", tmp_path, days=30)
    assert first.ca_cert.read_bytes() == bundle
    files = generate("hook", "ops", tmp_path, days=30, new_ca=True)
    assert len(_bundle(files.ca_cert)) == 2


def test_only_the_issuing_ca_joins_the_bundle(tmp_path: Path) -> None:
    """A non-CA certificate pasted into ca.crt is never carried into the bundle."""
    first = generate("hook", "ops", tmp_path, days=30)
    first.ca_key.unlink()
    first.ca_cert.write_bytes(first.cert.read_bytes() + first.ca_cert.read_bytes())
    files = generate("hook", "ops", tmp_path, days=30)
    bundle = _bundle(files.ca_cert)
    assert len(bundle) == 2
    assert all(c.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
               for c in bundle)
