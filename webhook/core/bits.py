"""The index's node bitsets (Python ints, one bit per node slot): their set-bit positions,
listed with no Python step per set bit where it matters, and bitsets built from slots. Pure."""

from __future__ import annotations

import itertools
import zlib
from collections.abc import Callable, Hashable, Iterable, Iterator
from typing import TypeVar

K = TypeVar("K", bound=Hashable)


def start_slot(mask: int, salt: str) -> int:
    """Where a salted pick of `mask` starts scanning (it wraps round): pods with different
    salts spread over a group too large to name whole. `Prepared.picks` relies on it too."""
    return zlib.crc32(salt.encode()) % mask.bit_length()


_CHUNK_BITS = 1024
_CHUNK = (1 << _CHUNK_BITS) - 1
_WORD = 0xFFFFFFFFFFFFFFFF


def bits(mask: int, limit: int | None = None) -> Iterator[int]:
    """Set bit positions of `mask`, lowest first, at most `limit` of them.

    Works on 1024-bit chunks and, within them, 64-bit words: operations on the whole
    (node-count-bit) mask happen once per chunk or run of empty chunks, and on a chunk once
    per word or run of empty words, never once per set bit (bench/: 20,000-node masks, where
    a sparse group cost one whole-mask shift per word)."""
    taken = 0
    base = 0
    while mask and (limit is None or taken < limit):
        chunk = mask & _CHUNK
        if not chunk:  # jump over empty chunks to the chunk of the lowest set bit
            skip = ((mask & -mask).bit_length() - 1) & ~(_CHUNK_BITS - 1)
            mask >>= skip
            base += skip
            continue
        at = base
        while chunk:
            word = chunk & _WORD
            if not word:  # jump over empty words to the word of the lowest set bit
                skip = ((chunk & -chunk).bit_length() - 1) & ~63
                chunk >>= skip
                at += skip
                continue
            while word:
                low = word & -word
                yield at + low.bit_length() - 1
                taken += 1
                if limit is not None and taken >= limit:
                    return
                word ^= low
            chunk >>= 64
            at += 64
        mask >>= _CHUNK_BITS
        base += _CHUNK_BITS


_SLOT_CHUNK_BITS = 4096
_SLOT_CHUNK = (1 << _SLOT_CHUNK_BITS) - 1
_PLUS_ONE = (1).__add__


def slots(mask: int, limit: int, base: int = 0) -> list[int]:
    """`list(bits(mask, limit))`, each plus `base`, with no Python step per bit: per
    4,096-bit chunk, `bin` and `rsplit("1", limit)` give the runs of zeros below each of the
    lowest `limit` set bits, lowest first once reversed, and a running sum of their lengths
    (plus one for each set bit) gives the positions; all of it in C."""
    out: list[int] = []
    while mask and limit > 0:
        chunk = mask & _SLOT_CHUNK
        if not chunk:  # jump over empty chunks to the chunk of the lowest set bit
            skip = ((mask & -mask).bit_length() - 1) & ~(_SLOT_CHUNK_BITS - 1)
            mask >>= skip
            base += skip
            continue
        # "0b", then the bits highest first: the last `found` parts are the runs of zeros
        # below each set bit (lowest bit last); the first part is the rest, left out.
        parts = bin(chunk).rsplit("1", limit)
        found = len(parts) - 1
        out += itertools.islice(itertools.accumulate(
            map(_PLUS_ONE, map(len, reversed(parts))), initial=base - 1), 1, found + 1)
        limit -= found
        mask >>= _SLOT_CHUNK_BITS
        base += _SLOT_CHUNK_BITS
    return out


def bitsets(slots: list[int], members: Callable[[int], Iterable[K]]) -> dict[K, int]:
    """For each key some slot is a member of, the bitset of those slots (`slots` sorted).

    Built in byte buffers and made ints once: setting bits one by one in an int copies the
    whole int for each bit."""
    base = slots[0]
    size = ((slots[-1] - base) >> 3) + 1
    buffers: dict[K, bytearray] = {}
    for slot in slots:
        byte, bit = (slot - base) >> 3, 1 << ((slot - base) & 7)
        for key in members(slot):
            try:
                buffers[key][byte] |= bit
            except KeyError:
                buffer = buffers[key] = bytearray(size)
                buffer[byte] |= bit
    return {key: int.from_bytes(buffer, "little") << base for key, buffer in buffers.items()}
