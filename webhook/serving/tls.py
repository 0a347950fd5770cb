"""The serving TLS context, reloaded when the certificate files change.

A mounted Secret rotates by swapping files; loading the new pair into the same SSLContext makes
every new connection use it, with no restart and no dropped connections. With a client CA
(--client-ca) the context asks callers for a certificate and verifies one when presented
(probes come without one; which paths need one is the app's check). A CA cannot be taken out
of a context's store, so a changed client CA file makes a new context, which the next
handshake picks up (`context` is read per connection)."""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


class ServingCertificate:
    def __init__(self, cert: Path, key: Path, client_ca: Path | None = None) -> None:
        self.cert = cert
        self.key = key
        self.client_ca = client_ca
        self._loaded = self._read()
        self.context = _context(*self._loaded)
        # The pair alone, for a port that asks no client certificate (the metrics port).
        self.plain_context = (_context(*self._loaded[:2], None) if client_ca is not None
                              else self.context)

    def _read(self) -> tuple[bytes, bytes, bytes | None]:
        ca = self.client_ca.read_bytes() if self.client_ca is not None else None
        return self.cert.read_bytes(), self.key.read_bytes(), ca

    def reload_if_changed(self) -> bool:
        """Load the files again if their content changed. Returns True on a reload; raises
        (keeping the old context in service) when the new files are unreadable or the pair
        mismatched, as happens for a moment while a rotation writes them."""
        current = self._read()
        if current == self._loaded:
            return False
        # The bytes read once are what gets validated and then loaded: a rotation that
        # continues meanwhile cannot slip a different pair into the live context.
        fresh = _context(*current)
        if current[2] != self._loaded[2]:
            self.context = fresh
            log.info("client CA reloaded from %s", self.client_ca)
        else:
            _load_pair(self.context, current[0], current[1])
        if self.plain_context is not self.context:
            _load_pair(self.plain_context, current[0], current[1])
        self._loaded = current
        log.info("serving certificate reloaded from %s", self.cert)
        return True


class WithoutClientCa:
    """The same certificate, asking no client certificate (a TlsSource for serving.Port)."""

    def __init__(self, certificate: ServingCertificate) -> None:
        self.certificate = certificate

    @property
    def context(self) -> ssl.SSLContext:
        return self.certificate.plain_context


def _context(cert: bytes, key: bytes, client_ca: bytes | None) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    _load_pair(context, cert, key)
    if client_ca is not None:
        # An empty file must not turn the check off: refused like any unusable CA.
        if not client_ca.strip():
            raise ssl.SSLError("client CA: the file is empty")
        try:
            context.load_verify_locations(cadata=client_ca.decode("ascii", "replace"))
        except ssl.SSLError as exc:
            raise ssl.SSLError(f"client CA: no usable PEM certificate ({exc})") from exc
        # Optional at TLS: the kubelet's probes present none. A certificate presented is
        # verified (chain to the CA, validity, key usage); the app then checks its name.
        context.verify_mode = ssl.CERT_OPTIONAL
    return context


def _load_pair(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """load_cert_chain takes paths only: go through a private temporary file."""
    with tempfile.TemporaryDirectory(prefix="layer-locality-tls-") as tmp:
        path = os.path.join(tmp, "pair.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(cert + b"\n" + key)
        context.load_cert_chain(path)
