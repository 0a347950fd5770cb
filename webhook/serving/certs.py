"""A private CA and a serving certificate for the webhook Service (development and the
self-signed overlay; production can use cert-manager instead).

The CA outlives its leaves: `generate` reuses `ca.crt` + `ca.key` found in the output directory
and only issues a new serving certificate, so the webhook configuration's `caBundle` stays valid
across a rotation and the API server never meets a certificate it cannot verify. A new CA
(`new_ca=True`, or when the old one would expire before the new leaf) keeps the CA of the
certificate being replaced in `ca.crt` beside the new one: a bundle that trusts both while
pods roll; the next rotation drops it."""

from __future__ import annotations

import base64
import datetime as dt
import ipaddress
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

CA_DAYS = 3650
PEM = serialization.Encoding.PEM


@dataclass(frozen=True, slots=True)
class CertificateFiles:
    ca_cert: Path
    cert: Path
    key: Path

    def ca_bundle(self) -> str:
        """The base64 PEM that goes into a webhook configuration's `caBundle`."""
        return base64.b64encode(self.ca_cert.read_bytes()).decode("ascii")

    @property
    def ca_key(self) -> Path:
        return self.ca_cert.with_name("ca.key")


@dataclass(frozen=True, slots=True)
class Authority:
    """A CA that can sign: its key and certificate."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


def service_names(service: str, namespace: str) -> list[str]:
    return [
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc",
        f"{service}.{namespace}.svc.cluster.local",
    ]


def _general_name(name: str) -> x509.GeneralName:
    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _key_usage(cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=True, content_commitment=False, key_encipherment=False,
        data_encipherment=False, key_agreement=False, key_cert_sign=cert_sign,
        crl_sign=cert_sign, encipher_only=False, decipher_only=False,
    )


def new_authority(common_name: str, days: int = CA_DAYS,
                  now: dt.datetime | None = None) -> Authority:
    """A self-signed CA valid from five minutes ago (clock skew) for `days`."""
    now = now or dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return Authority(key, cert)


def issue(
    authority: Authority,
    common_name: str,
    *,
    days: int,
    sans: Sequence[str] = (),
    organizations: Sequence[str] = (),
    server: bool = True,
    client: bool = False,
    now: dt.datetime | None = None,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A new key and a leaf certificate signed by `authority` (server and/or client auth)."""
    now = now or dt.datetime.now(dt.UTC)
    key = ec.generate_private_key(ec.SECP256R1())
    subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    usages = ([ExtendedKeyUsageOID.SERVER_AUTH] if server else []) + (
        [ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name(subject))
        .issuer_name(authority.cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage(usages), False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(authority.key.public_key()), False
        )
    )
    if sans:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([_general_name(n) for n in sans]), False)
    return key, builder.sign(authority.key, hashes.SHA256())


def key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())


def load_authority(cert_file: Path, key_file: Path) -> Authority | None:
    """The CA stored by an earlier run (first certificate of `cert_file`), or None when either
    file is missing or unusable."""
    try:
        cert = x509.load_pem_x509_certificates(cert_file.read_bytes())[0]
        key = serialization.load_pem_private_key(key_file.read_bytes(), password=None)
    except (OSError, ValueError, IndexError):
        return None
    public = cert.public_key()
    if not isinstance(key, ec.EllipticCurvePrivateKey) or not isinstance(
            public, ec.EllipticCurvePublicKey):
        return None
    if key.public_key().public_numbers() != public.public_numbers():
        return None
    return Authority(key, cert)


def generate(
    service: str,
    namespace: str,
    out: Path,
    days: int = 365,
    extra_sans: Sequence[str] = (),
    now: dt.datetime | None = None,
    new_ca: bool = False,
) -> CertificateFiles:
    """Write tls.crt and tls.key (mode 0600) into `out`, signed by the CA kept there (ca.crt,
    ca.key 0600), which is created when missing, when `new_ca`, or when it would expire before
    the new certificate. Files are replaced atomically, key first."""
    if days < 1:
        raise ValueError("--days must be >= 1")
    now = now or dt.datetime.now(dt.UTC)
    out.mkdir(parents=True, exist_ok=True)
    files = CertificateFiles(out / "ca.crt", out / "tls.crt", out / "tls.key")
    leaf_end = now + dt.timedelta(days=days)

    old = load_authority(files.ca_cert, files.ca_key)
    if old is None and files.ca_key.exists() and not new_ca:
        # Never replace a CA silently: the API server's caBundle would stop verifying.
        raise ValueError(f"{files.ca_key} and {files.ca_cert} do not form a usable CA; fix "
                         "them, or pass --new-ca to make a new CA (the old one stays trusted "
                         "in ca.crt while the certificate it signed is replaced)")
    authority = old
    if authority is None or new_ca or authority.cert.not_valid_after_utc < leaf_end:
        authority = new_authority(f"{service} webhook CA", max(CA_DAYS, days + 1), now)
    # The bundle: the signing CA, plus the CA of the certificate being replaced while it is
    # still valid (the swap's overlap: pods serving the old certificate stay verifiable until
    # they roll). The next rotation drops it, since the current certificate no longer needs it.
    bundle = [authority.cert]
    previous = _issuer_of(files.cert, _certificates(files.ca_cert), now)
    if previous is not None and previous != authority.cert:
        bundle.append(previous)
    bundle_pem = b"".join(c.public_bytes(PEM) for c in bundle)

    names = list(dict.fromkeys([*service_names(service, namespace), *extra_sans]))
    key, cert = issue(authority, names[2], days=days, sans=names, now=now)

    # Key first: a watcher that sees the new certificate must find its key already there.
    if authority is not old:
        _write_atomic(files.ca_key, key_pem(authority.key), mode=0o600)
    if not files.ca_cert.exists() or files.ca_cert.read_bytes() != bundle_pem:
        _write_atomic(files.ca_cert, bundle_pem, mode=0o644)
    _write_atomic(files.key, key_pem(key), mode=0o600)
    _write_atomic(files.cert, cert.public_bytes(PEM), mode=0o644)
    return files


def _issuer_of(leaf_path: Path, cas: list[x509.Certificate],
               now: dt.datetime) -> x509.Certificate | None:
    """The unexpired CA certificate among `cas` that signed the certificate in `leaf_path`."""
    leaves = _certificates(leaf_path)
    if not leaves or leaves[0].not_valid_after_utc <= now:
        return None
    for ca in cas:
        try:
            is_ca = ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
        except x509.ExtensionNotFound:
            is_ca = False
        if not is_ca or ca.not_valid_after_utc <= now:
            continue
        try:
            leaves[0].verify_directly_issued_by(ca)
        except (ValueError, TypeError, InvalidSignature):
            continue
        return ca
    return None


def _certificates(path: Path) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(path.read_bytes())
    except (OSError, ValueError):
        return []


def _write_atomic(path: Path, data: bytes, mode: int) -> None:
    # A fresh file of our own (O_EXCL, no symlink followed), its mode set before any byte.
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        os.fchmod(fd, mode)
        os.write(fd, data)
    except BaseException:
        os.close(fd)
        os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)
