"""spend.py and the byte budget's helpers: which nodes fit in the room a patch has, and how a
patch that came out too large is cut back (patchsize.hostnames_to_drop, spend.truncate)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tests.helpers import AMD64, image, inventory, node_object
from webhook.core.patchsize import TERM_BYTES, TOP_ENTRY_BYTES, hostnames_to_drop
from webhook.core.prepare import prepare
from webhook.core.scoring import MiB, ScoringPolicy
from webhook.core.spend import Run, spend, truncate
from webhook.core.spread import SpreadState
from webhook.registry.catalog import StaticCatalog

RUNS = st.lists(st.tuples(st.integers(1, 5), st.integers(0, 10**9), st.integers(1, 100)),
                max_size=6)


@given(runs=RUNS, keep=st.integers(-2, 40))
def test_truncate_keeps_the_first_nodes_and_their_runs(runs: list[Run], keep: int) -> None:
    kept = truncate(runs, keep)
    assert sum(count for count, _, _ in kept) == max(0, min(keep, sum(c for c, _, _ in runs)))
    assert all(count > 0 for count, _, _ in kept)
    for (count, bytes_present, weight), original in zip(kept, runs, strict=False):
        assert (bytes_present, weight) == original[1:] and count <= original[0]
    assert [run[1:] for run in kept] == [run[1:] for run in runs[:len(kept)]]
    assert all(a == b for a, b in zip(kept[:-1], runs, strict=False))  # all but the last whole


HOSTNAMES = st.lists(st.text("abcxyz019.-", min_size=1, max_size=63), max_size=30)


@given(hostnames=HOSTNAMES, at=st.integers(0, 30), delta=st.integers(-1, 1),
       excess=st.one_of(st.none(), st.integers(-5, 3000)))
@example(hostnames=["ab", "cd", "ef"], at=1, delta=0, excess=None)  # exactly one name's worth
@example(hostnames=["ab", "cd", "ef"], at=2, delta=1, excess=None)  # a byte past two names
def test_hostnames_to_drop_is_the_fewest_from_the_end_that_save_the_excess(
    hostnames: list[str], at: int, delta: int, excess: int | None
) -> None:
    """Each name dropped saves its JSON string and a comma; at least one is dropped. The
    excess is drawn at random, or at (and one byte around) what dropping `at` names saves."""
    def saved(k: int) -> int:
        return sum(len(orjson.dumps(name)) + 1 for name in hostnames[len(hostnames) - k:])

    if excess is None:
        excess = saved(min(at, len(hostnames))) + delta
    drop = hostnames_to_drop(hostnames, excess)

    assert drop >= 1
    if drop <= len(hostnames) and saved(len(hostnames)) >= excess:
        assert saved(drop) >= excess
        assert drop == 1 or saved(drop - 1) < excess
    else:  # not enough to save: every name goes
        assert drop == max(1, len(hostnames))


APP = image("registry.example.com/team/app:v1",
            {AMD64: [("base", 50 * MiB), ("deps", 30 * MiB), ("code", 20 * MiB)]})
DEPS = image("registry.example.com/team/deps:v1",
             {AMD64: [("base", 50 * MiB), ("deps", 30 * MiB)]})
CATALOG = StaticCatalog([APP, DEPS])


@settings(max_examples=80, deadline=None)
@given(names=st.lists(st.text("abcxyz0189-", min_size=1, max_size=40).map(lambda s: "n" + s),
                      min_size=1, max_size=40, unique=True),
       holds=st.lists(st.booleans(), min_size=40, max_size=40),
       room=st.integers(0, 4000), budget=st.integers(1, 50), salt=st.text(max_size=4),
       max_weight=st.sampled_from([1, 100]))
def test_spend_fills_the_room_best_first_whether_or_not_picks_are_listed(
    names: list[str], holds: list[bool], room: int, budget: int, salt: str, max_weight: int
) -> None:
    """Picks handed over as a list (summed at once) and one at a time name the same nodes;
    never more than `budget`, and the bytes left out are counted: what is named and cut
    is what the levels hold, up to the budget. (max_weight 1: every holder weighs 1, one
    level of several groups.)"""
    objects = [node_object(name, [APP if full else DEPS]) for name, full
               in zip(names, holds, strict=False)]
    _, index = inventory([*objects, node_object("empty")], CATALOG)
    policy = ScoringPolicy(max_weight=max_weight)
    prepared = prepare([APP], [], index, policy)
    _, plan = prepared.plain(policy)
    assert not isinstance(plan, str)

    def listed(idx: Any, group: Any, limit: int, salt: str) -> list[Any]:
        return list(idx.picks(group.mask, limit, salt))

    one_by_one = spend(plan, index, budget, room, salt, None)
    at_once = spend(plan, index, budget, room, salt, None, listed)
    assert [n.name for n in at_once[0]] == [n.name for n in one_by_one[0]]
    assert at_once[1:] == one_by_one[1:]
    named, runs, cut = one_by_one
    holders = sum(member.mask.bit_count() for level in plan.levels for member in level.members)
    assert len(named) <= budget
    assert sum(count for count, _, _ in runs) == len(named)
    assert all(count > 0 for count, _, _ in runs)
    assert len(named) + cut == min(budget, holders)
    if room < TERM_BYTES:  # not even one term without hostnames fits
        assert named == [] and cut == min(budget, holders)


def test_a_room_of_exactly_one_node_names_it_and_a_byte_less_names_none() -> None:
    """The estimate spend keeps: a term's frame (TERM_BYTES), each hostname quoted with a
    comma, and for the first nodes their annotation entry (name and TOP_ENTRY_BYTES)."""
    _, index = inventory([node_object("node-a", [APP], hostname="host-a"),
                          node_object("cold")], CATALOG)
    prepared = prepare([APP], [], index, ScoringPolicy())
    _, plan = prepared.plain(ScoringPolicy())
    assert not isinstance(plan, str)
    exact = TERM_BYTES + len('"host-a",') + len("node-a") + TOP_ENTRY_BYTES
    named, runs, cut = spend(plan, index, 10, exact, "", None)
    assert [node.name for node in named] == ["node-a"] and cut == 0
    named, runs, cut = spend(plan, index, 10, exact - 1, "", None)
    assert named == [] and runs == [] and cut == 1


def test_each_level_adds_its_term_to_what_the_levels_before_it_used() -> None:
    _, index = inventory([node_object("node-a", [APP], hostname="host-a"),
                          node_object("node-b", [DEPS], hostname="host-b"),
                          node_object("cold")], CATALOG)
    prepared = prepare([APP], [], index, ScoringPolicy())
    _, plan = prepared.plain(ScoringPolicy())
    assert not isinstance(plan, str) and len(plan.levels) == 2
    each = TERM_BYTES + len('"host-a",') + len("node-a") + TOP_ENTRY_BYTES  # b's the same
    named, _, cut = spend(plan, index, 10, 2 * each, "", None)
    assert [node.name for node in named] == ["node-a", "node-b"] and cut == 0
    named, _, cut = spend(plan, index, 10, 2 * each - 1, "", None)
    assert [node.name for node in named] == ["node-a"] and cut == 1


def listed(idx: Any, group: Any, limit: int, salt: str) -> list[Any]:
    """Picks handed over as a list, as Prepared.picks does."""
    return list(idx.picks(group.mask, limit, salt))


@pytest.mark.parametrize("picks", [None, listed], ids=["one-by-one", "listed"])
def test_only_the_first_nodes_named_take_an_annotation_entry(picks: Any) -> None:
    """Three full holders take the annotation's three entries; the partial holder after
    them pays for its hostname only."""
    full = [f"node-a{k}" for k in range(3)]
    _, index = inventory([*(node_object(n, [APP], hostname=f"host-a{k}")
                            for k, n in enumerate(full)),
                          node_object("node-b", [DEPS], hostname="host-b"),
                          node_object("cold")], CATALOG)
    prepared = prepare([APP], [], index, ScoringPolicy())
    _, plan = prepared.plain(ScoringPolicy())
    assert not isinstance(plan, str)
    each = len('"host-a0",') + len("node-a0") + TOP_ENTRY_BYTES
    room = TERM_BYTES + 3 * each + TERM_BYTES + len('"host-b",')
    named, _, cut = spend(plan, index, 10, room, "", None, picks)
    assert [node.name for node in named] == [*full, "node-b"] and cut == 0


def test_listed_picks_skip_the_hostnames_of_excluded_nodes() -> None:
    """Terms name hostname labels: `twin` shares its label with the excluded node and is not
    named, whether the picks come listed or one by one."""
    _, index = inventory([node_object("excluded", [APP], hostname="shared"),
                          node_object("twin", [APP], hostname="shared"),
                          node_object("other", [APP]), node_object("cold")], CATALOG)
    prepared = prepare([APP], [], index, ScoringPolicy())
    _, plan = prepared.plain(ScoringPolicy())
    assert not isinstance(plan, str)
    spread = SpreadState(3, 0, {}, frozenset({"excluded"}), {"excluded": 5})
    for picks in (None, listed):
        named, _, _ = spend(plan, index, 10, 4000, "", spread, picks)
        assert [node.name for node in named] == ["other"]


def test_a_group_whose_every_node_is_excluded_makes_no_run() -> None:
    """The spread guard excludes node-a, the only node of the best group: that group names
    nobody and leaves no (0-node) run; node-b's group still names node-b."""
    _, index = inventory([node_object("node-a", [APP], hostname="host-a"),
                          node_object("node-b", [DEPS], hostname="host-b"),
                          node_object("cold")], CATALOG)
    prepared = prepare([APP], [], index, ScoringPolicy())
    _, plan = prepared.plain(ScoringPolicy())
    assert not isinstance(plan, str)
    guard = SpreadState(max_skew=1, floor=0, extra={}, excluded=frozenset({"node-a"}),
                        counts={})
    named, runs, cut = spend(plan, index, 10, 10_000, "", guard)
    assert [node.name for node in named] == ["node-b"]
    assert [count for count, _, _ in runs] == [1]
    assert cut == 0
