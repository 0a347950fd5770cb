"""Which nodes a decision names: salted picks per weight level within the node and byte
budgets, and the terms they make. Pure."""

from __future__ import annotations

import bisect
import itertools
import zlib
from collections.abc import Callable, Iterable, Sequence
from operator import attrgetter
from typing import NamedTuple

from webhook.core.affinity import PreferredTerm
from webhook.core.annotation import TOP_NODES_IN_DECISION
from webhook.core.index import LayerIndex
from webhook.core.nodes import NodeInfo
from webhook.core.patchsize import TERM_BYTES, TOP_ENTRY_BYTES
from webhook.core.scoring import TermPlan
from webhook.core.spread import SpreadState

# Picks within a group too large to name whole start from a slot derived from one of this many
# buckets of the pod's salt, so that replicas of one template reuse one of at most this many
# finished pick lists (decide.Prepared.spent); they spread over at most this many subsets.
SALT_BUCKETS = 16


def pick_salt(salt: str) -> str:
    """The salt picks use: the pod's salt reduced to one of SALT_BUCKETS."""
    return _BUCKET_SALTS[zlib.crc32(salt.encode()) % SALT_BUCKETS]


_BUCKET_SALTS = tuple(f"bucket-{k}" for k in range(SALT_BUCKETS))


class ScoredGroup(NamedTuple):
    """Candidate nodes (bitset `mask` over the index) alike for this pod.

    A NamedTuple rather than a frozen dataclass: a review builds one per overlap group, and
    a frozen dataclass's __init__ costs four times as much."""

    bytes_present: int
    extra_siblings: int  # above the least-loaded candidate; -1: excluded for spread
    weight: int
    mask: int


_hostname = attrgetter("hostname")
Run = tuple[int, int, int]  # (nodes, bytes present, weight): consecutive named nodes alike


def spend(
    plan: TermPlan[ScoredGroup],
    index: LayerIndex,
    budget: int,
    room: int,
    salt: str,
    spread: SpreadState | None,
    picks: Callable[[LayerIndex, ScoredGroup, int, str], Iterable[NodeInfo]] | None = None,
) -> tuple[list[NodeInfo], list[Run], int]:
    """Nodes per weight level, best first: at most `budget` of them, and as many as fit in
    about `room` bytes of terms; returns them, their runs, and how many the bytes left out.
    `picks`: what lists a group's salted picks (Prepared.picks), the same as index.picks."""
    pick = picks or _index_picks
    # Terms name hostname labels, which nodes may share: a label an excluded node carries would
    # prefer that node too.
    blocked = {node.hostname for name in (spread.excluded if spread is not None else ())
               if (node := index.node(name)) is not None}
    named: list[NodeInfo] = []
    runs: list[Run] = []
    append = named.append
    used = 0
    top = TOP_NODES_IN_DECISION  # the first nodes also take an entry in the annotation
    for k, level in enumerate(plan.levels):
        used += TERM_BYTES
        for m, group in enumerate(level.members):
            start = len(named)
            if picks is None and not blocked:  # priced by slot (no NodeInfo visited), in C
                slots = index.pick_slots(group.mask, budget - start, salt)
                costs = index.hostname_costs(slots)
                for j, node in enumerate(index.nodes_at(slots[:top])):
                    costs[j] += len(node.name) + TOP_ENTRY_BYTES
                fit, used = _fit_costs(costs, used, room)
                named += index.nodes_at(slots[:fit])
                if fit < len(slots):
                    if fit:
                        runs.append((fit, group.bytes_present, level.weight))
                    return named, runs, unnamed(plan, k, m, fit, budget - len(named))
                top = max(0, top - fit)
                listed: Iterable[NodeInfo] = ()
            else:
                listed = pick(index, group, budget - start, salt)
            if isinstance(listed, list) and not blocked:  # all at hand: sizes summed in C
                fit, used = _fit(listed, used, room, top)
                named += listed[:fit]
                if fit < len(listed):
                    if fit:
                        runs.append((fit, group.bytes_present, level.weight))
                    return named, runs, unnamed(plan, k, m, fit, budget - len(named))
                top = max(0, top - fit)
                listed = ()
            for node in listed:
                hostname = node.hostname
                if hostname in blocked:
                    continue
                used += len(hostname) + 3  # quoted, and a comma
                if top:
                    used += len(node.name) + TOP_ENTRY_BYTES
                    top -= 1
                if used > room:
                    taken = len(named) - start
                    if taken:
                        runs.append((taken, group.bytes_present, level.weight))
                    return named, runs, unnamed(plan, k, m, taken, budget - len(named))
                append(node)
            if len(named) > start:
                runs.append((len(named) - start, group.bytes_present, level.weight))
        if len(named) >= budget:
            break
    return named, runs, 0


def _index_picks(index: LayerIndex, group: ScoredGroup, limit: int,
                 salt: str) -> Iterable[NodeInfo]:
    return index.pick(group.mask, limit, salt)  # a list: `spend` sums its sizes in C


def _fit(nodes: list[NodeInfo], used: int, room: int, top: int) -> tuple[int, int]:
    """How many of `nodes` the loop in `spend` would take before `used` passes `room`, and
    `used` after them."""
    costs = [size + 3 for size in map(len, map(_hostname, nodes))]
    for j in range(min(top, len(costs))):
        costs[j] += len(nodes[j].name) + TOP_ENTRY_BYTES
    return _fit_costs(costs, used, room)


def _fit_costs(costs: list[int], used: int, room: int) -> tuple[int, int]:
    """How many of the nodes costing `costs` fit before `used` passes `room`, and `used`
    after them."""
    ends = list(itertools.accumulate(costs, initial=used))  # ends[i + 1]: after node i
    fit = bisect.bisect_right(ends, room, 1) - 1
    return fit, ends[fit]


def unnamed(plan: TermPlan[ScoredGroup], k: int, m: int, taken: int, left: int) -> int:
    """Nodes `max_nodes` would still have named (at most `left`) when the bytes ran out at
    member `m` of level `k`, `taken` of its nodes named: the rest of it, then the later
    members and levels."""
    levels = plan.levels
    rest = levels[k].members[m].mask.bit_count() - taken
    rest += sum(g.mask.bit_count() for g in levels[k].members[m + 1:])
    rest += sum(g.mask.bit_count() for level in levels[k + 1:] for g in level.members)
    return min(rest, left)


def terms_of(named: Sequence[NodeInfo], runs: Sequence[Run]) -> list[PreferredTerm]:
    """One term per weight level (best first), its hostnames sorted, once each."""
    terms: list[PreferredTerm] = []
    hostnames: set[str] = set()
    weight = -1
    end = 0
    for count, _, run_weight in runs:
        if run_weight != weight:
            if hostnames:
                terms.append(PreferredTerm(weight, tuple(sorted(hostnames))))
            weight, hostnames = run_weight, set()
        hostnames.update(map(_hostname, named[end:end + count]))
        end += count
    if hostnames:
        terms.append(PreferredTerm(weight, tuple(sorted(hostnames))))
    return terms


def truncate(runs: Sequence[Run], keep: int) -> list[Run]:
    """`runs` covering only the first `keep` nodes."""
    kept: list[Run] = []
    for count, bytes_present, weight in runs:
        if keep <= 0:
            break
        kept.append((min(count, keep), bytes_present, weight))
        keep -= count
    return kept
