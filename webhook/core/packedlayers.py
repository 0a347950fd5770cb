"""NodeLayers' packed layer table (`spec.packedLayers`, docs/agent.md): every distinct layer of
the node once, sorted by digest, as one base64 string of 40-byte records (the sha256 digest's
32 bytes, then the compressed size as an unsigned 64-bit big-endian integer). Pure.

Why a string: kube-apiserver encodes a custom resource as untyped JSON, object by object and
key by key; a node's 300 layers as 300 small objects made most of its CPU for a relist of
NodeLayers (docs/performance.md). One string is one token to it, and 40 % fewer bytes to
every reader. Images still refer to layers by their index in this order.
"""

from __future__ import annotations

import base64
import binascii
import struct
from collections.abc import Iterable
from operator import itemgetter

SHA256 = "sha256:"
RECORD = 40  # 32 digest bytes + 8 size bytes
_RECORDS = struct.Struct(f"{RECORD}s")
_FIRST = itemgetter(0)  # a record out of the 1-tuple iter_unpack gives
_DIGEST_BYTES = 32


class PackedLayersError(ValueError):
    def __init__(self, message: str, over_bound: bool = False) -> None:
        super().__init__(message)
        self.over_bound = over_bound  # more records than allowed (else: not a table)


def pack_layers(layers: Iterable[tuple[str, int]]) -> str | None:
    """The packed table of (digest, size) pairs in the order given; None when a digest is not
    sha256 (the table holds sha256 only: such a node keeps the `layers` list)."""
    raw = bytearray()
    for digest, size in layers:
        if not digest.startswith(SHA256) or len(digest) != len(SHA256) + 2 * _DIGEST_BYTES:
            return None
        try:
            raw += bytes.fromhex(digest[len(SHA256):])
        except ValueError:
            return None
        raw += size.to_bytes(8, "big")
    return base64.b64encode(bytes(raw)).decode("ascii")


def records(text: str, max_layers: int) -> list[bytes]:
    """The 40-byte records of a packed table, in its order (a reader that has met a record
    before need not decode it again: `layer_of`); PackedLayersError when the text is not
    base64 of whole records, or holds more than `max_layers`."""
    if len(text) > 4 * -(-max_layers * RECORD // 3):
        raise PackedLayersError(f"more than {max_layers} layers", over_bound=True)
    try:  # b64decode(validate=True) without its copy of the text to bytes first
        raw = binascii.a2b_base64(text, strict_mode=True)
    except (binascii.Error, ValueError) as exc:
        raise PackedLayersError(f"not base64: {exc}") from None
    if len(raw) % RECORD:
        raise PackedLayersError(f"{len(raw)} bytes: not whole {RECORD}-byte records")
    return list(map(_FIRST, _RECORDS.iter_unpack(raw)))


def layer_of(record: bytes) -> tuple[str, int]:
    """A record's (digest, size)."""
    return (SHA256 + record[:_DIGEST_BYTES].hex(),
            int.from_bytes(record[_DIGEST_BYTES:RECORD], "big"))


def unpack_layers(text: str, max_layers: int) -> list[tuple[str, int]]:
    """The (digest, size) pairs of a packed table, in its order (see `records`)."""
    return [layer_of(record) for record in records(text, max_layers)]
