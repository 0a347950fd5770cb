"""The serving TLS context, reloaded in place when the certificate files change.

A mounted Secret rotates by swapping files; loading the new pair into the same SSLContext makes
every new connection use it, with no restart and no dropped connections."""

from __future__ import annotations

import logging
import os
import ssl
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


class ServingCertificate:
    def __init__(self, cert: Path, key: Path) -> None:
        self.cert = cert
        self.key = key
        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.minimum_version = ssl.TLSVersion.TLSv1_2
        self._loaded = self._read()
        _load(self.context, *self._loaded)

    def _read(self) -> tuple[bytes, bytes]:
        return self.cert.read_bytes(), self.key.read_bytes()

    def reload_if_changed(self) -> bool:
        """Load the files again if their content changed. Returns True on a reload; raises
        (keeping the old pair in service) when the new pair is unreadable or mismatched,
        as happens for a moment while a rotation writes the two files."""
        current = self._read()
        if current == self._loaded:
            return False
        # The bytes read once are what gets validated and then loaded: a rotation that
        # continues meanwhile cannot slip a different pair into the live context.
        _load(ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER), *current)
        _load(self.context, *current)
        self._loaded = current
        log.info("serving certificate reloaded from %s", self.cert)
        return True


def _load(context: ssl.SSLContext, cert: bytes, key: bytes) -> None:
    """load_cert_chain takes paths only: go through a private temporary file."""
    with tempfile.TemporaryDirectory(prefix="layer-locality-tls-") as tmp:
        path = os.path.join(tmp, "pair.pem")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as file:
            file.write(cert + b"\n" + key)
        context.load_cert_chain(path)
