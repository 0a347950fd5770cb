"""Count tables the spread guard's bookkeeping shares: an entry that falls to zero is
dropped, so a table holds only what counts."""

from __future__ import annotations

from typing import TypeVar

K = TypeVar("K")  # a count table's key: a node, or a group of nodes


def bump(table: dict[str, dict[K, int]], outer: str, key: K, delta: int) -> None:
    """Add `delta` to table[outer][key], dropping what reaches zero (and an empty row)."""
    counts = table.setdefault(outer, {})
    count = counts.get(key, 0) + delta
    if count > 0:
        counts[key] = count
    else:
        counts.pop(key, None)
        if not counts:
            del table[outer]


def drop(table: dict[str, int], key: str) -> None:
    """One less in table[key], dropping it at zero."""
    left = table[key] - 1
    if left:
        table[key] = left
    else:
        del table[key]
