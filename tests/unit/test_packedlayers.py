"""webhook/core/packedlayers.py: the NodeLayers layer table as one string."""

from __future__ import annotations

import base64

import pytest

from webhook.core.packedlayers import RECORD, PackedLayersError, pack_layers, unpack_layers

PAIRS = [("sha256:" + "0" * 63 + "1", 0), ("sha256:" + "ab" * 32, 2**40 + 7),
         ("sha256:" + "f" * 64, 2**64 - 1)]


def test_pairs_come_back_in_order_from_records_of_40_bytes() -> None:
    text = pack_layers(PAIRS)
    assert text is not None
    raw = base64.b64decode(text)
    assert len(raw) == RECORD * len(PAIRS)
    assert raw[:32] == bytes.fromhex("0" * 63 + "1") and raw[32:40] == bytes(8)
    assert raw[-8:] == b"\xff" * 8
    assert unpack_layers(text, 3) == PAIRS
    assert pack_layers([]) == "" and unpack_layers("", 3) == []


@pytest.mark.parametrize("digest", ["sha512:" + "ab" * 64, "sha256:" + "ab" * 31,
                                    "sha256:" + "zz" * 32, "ab" * 32])
def test_a_digest_that_is_not_sha256_is_not_packed(digest: str) -> None:
    assert pack_layers([PAIRS[0], (digest, 1)]) is None


@pytest.mark.parametrize(("text", "says"), [
    ("@@@@", "not base64"), ("AAAA", "whole"), (pack_layers(PAIRS), "more than")])
def test_a_table_that_is_not_whole_records_or_too_long_is_refused(text: str | None,
                                                                  says: str) -> None:
    assert text is not None
    with pytest.raises(PackedLayersError, match=says):
        unpack_layers(text, 2)
