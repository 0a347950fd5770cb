"""Count tables the spread guard's bookkeeping shares: an entry that falls to zero is
dropped, so a table holds only what counts."""

from __future__ import annotations

from collections.abc import Mapping
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


def spread_alike(maybe: Mapping[str, int], groups: Mapping[tuple[str, ...], int],
                 own: tuple[str, ...]) -> Mapping[str, int]:
    """`maybe` with each group of pending entries weighed alike on k nodes counted, on each of
    them, as the scheduler spreads them, not all on every one: p entries at most
    ceil(p / k) + 1 a node (its spreading score balances pods the preferences weigh alike;
    one more for an uneven bind). Every entry of a group counts fully on each of its nodes
    otherwise (as its node, or in `maybe`): a burst of n replicas on k alike holders would
    close them all after maxSkew reviews, before any bind, and send the next to a node
    holding nothing. `own`: the asking review's group (its entry left out)."""
    spread: dict[str, int] | None = None  # a copy only when a group is cut down (rare)
    for nodes, entries in groups.items():
        entries -= nodes == own
        allowed = min(entries, -(-entries // len(nodes)) + 1)
        if entries > allowed:
            spread = dict(maybe) if spread is None else spread
            for node in nodes:
                spread[node] = spread.get(node, 0) - (entries - allowed)
    return maybe if spread is None else spread


def without(counts: Mapping[str, int], nodes: tuple[str, ...]) -> Mapping[str, int]:
    """`counts` less one on each of `nodes` (a copy, only when that changes anything)."""
    if not any(node in counts for node in nodes):
        return counts
    own = dict(counts)
    for node in nodes:
        if node not in own:
            continue
        if own[node] > 1:
            own[node] -= 1
        else:
            del own[node]
    return own
