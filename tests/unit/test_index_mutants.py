"""The layer index's flags and lookups after updates and removals: a node's change or removal
leaves every other node's cordon, taints and platform as they were, freed slots come back
clean, and the answers for unknown nodes are empty."""

from __future__ import annotations

import pytest

import webhook.core.index_updates as index_updates
from tests.helpers import AMD64, ARM64
from webhook.core.bits import bits as _bits
from webhook.core.index import LayerIndex
from webhook.core.layers import Platform
from webhook.core.nodes import Labels, NodeInfo, Taint
from webhook.core.nodeselect import pod_selector

LAYERS = [f"sha256:{i:064x}" for i in range(8)]
GPU = Taint("gpu", "yes", "NoSchedule")


def make_node(name: str, platform: Platform = AMD64, unschedulable: bool = False,
              taints: tuple[Taint, ...] = (), pool: str | None = None) -> NodeInfo:
    labels = Labels({"pool": pool}) if pool is not None else Labels({})
    return NodeInfo(name=name, hostname=name, platform=platform, unschedulable=unschedulable,
                    taints=taints, images=(), labels=labels)


def names(index: LayerIndex, mask: int) -> set[str]:
    return {n.name for n in index.pick(mask, 10_000, "")}


def live_bits(index: LayerIndex) -> int:
    return sum(index.bit(n.name) for n in index.nodes())


def test_every_cordoned_or_tainted_node_stays_out() -> None:
    index = LayerIndex()
    for n in range(3):
        index.upsert(make_node(f"cordoned-{n}", unschedulable=True), [])
        index.upsert(make_node(f"tainted-{n}", taints=(GPU,)), [])
    index.upsert(make_node("ok"), [])
    assert names(index, index.candidates([])) == {"ok"}
    assert names(index, index.candidates([{"key": "gpu", "operator": "Exists"}])) == {
        "ok", "tainted-0", "tainted-1", "tainted-2"}


def test_an_update_leaves_the_other_nodes_flags_alone() -> None:
    index = LayerIndex()
    for name in ("cordoned-0", "cordoned-1"):
        index.upsert(make_node(name, unschedulable=True), [])
    for name in ("tainted-0", "tainted-1", "ok"):
        index.upsert(make_node(name, taints=(GPU,) if name != "ok" else ()), [])
    index.upsert(make_node("cordoned-0"), [])  # uncordoned
    index.upsert(make_node("tainted-0"), [LAYERS[0]])  # taint gone
    index.upsert(make_node("ok", ARM64), [])  # moved to another platform
    assert index.candidates([]) & ~live_bits(index) == 0
    assert names(index, index.candidates([])) == {"cordoned-0", "tainted-0", "ok"}
    assert index.platforms() == {AMD64: 4, ARM64: 1}


def test_a_removal_leaves_the_other_nodes_flags_alone() -> None:
    index = LayerIndex()
    for name in ("tainted-0", "tainted-1", "cordoned-0", "cordoned-1", "ok"):
        index.upsert(make_node(name, unschedulable=name.startswith("cordoned"),
                               taints=(GPU,) if name.startswith("tainted") else ()), [])
    index.remove("tainted-0")
    index.remove("cordoned-0")
    assert names(index, index.candidates([])) == {"ok"}
    tolerate = [{"key": "gpu", "operator": "Exists"}]
    assert names(index, index.candidates(tolerate)) == {"ok", "tainted-1"}
    assert index.candidates(tolerate) & ~live_bits(index) == 0


def test_a_freed_slot_comes_back_without_the_old_nodes_flags() -> None:
    index = LayerIndex()
    index.upsert(make_node("old", ARM64, taints=(GPU,), unschedulable=True), [LAYERS[0]])
    index.remove("old")
    assert (index.platforms(), index.candidates([])) == ({}, 0)
    index.upsert(make_node("new"), [LAYERS[1]])
    assert index.bit("new") == 1  # the freed slot
    assert names(index, index.candidates([])) == {"new"}
    assert index.platforms() == {AMD64: 1}


def test_unknown_nodes_have_nothing() -> None:
    index = LayerIndex()
    index.upsert(make_node("a"), [LAYERS[0]])
    index.upsert(make_node("b"), [LAYERS[1]])
    index.remove("a")
    for name in ("a", "never"):
        assert (index.node(name), index.bit(name), index.layers_of(name)) == (
            None, 0, frozenset())
        assert not index.in_mask(name, -1)
    assert index.node("b") == make_node("b") and index.in_mask("b", index.bit("b"))


def pool_of(n: int) -> str:
    return "a" if n % 3 else "b"


@pytest.mark.parametrize("count", [5, 16, 40])
def test_selected_reads_every_live_node_past_holes(count: int) -> None:
    """Nodes in pools a and b, a few removed: the selector's mask holds exactly the live
    nodes of pool a, whatever their slots (bytes of the mask past the first included)."""
    index = LayerIndex()
    for n in range(count):
        index.upsert(make_node(f"n{n:02}", pool=pool_of(n)), [])
    for n in (1, 3):
        index.remove(f"n{n:02}")
    selector = pod_selector({"spec": {"nodeSelector": {"pool": "a"}}})
    assert selector is not None
    expected = {f"n{n:02}" for n in range(count) if pool_of(n) == "a" and n not in (1, 3)}
    assert names(index, index.selected(selector)) == expected
    assert index.selected(selector) & ~live_bits(index) == 0
    assert index.selected(selector) == sum(index.bit(name) for name in expected)


def test_a_selector_never_brings_back_cordoned_or_tainted_nodes() -> None:
    index = LayerIndex()
    index.upsert(make_node("ok", pool="a"), [])
    index.upsert(make_node("cordoned", pool="a", unschedulable=True), [])
    index.upsert(make_node("tainted", pool="a", taints=(GPU,)), [])
    index.upsert(make_node("elsewhere", pool="b"), [])
    selector = pod_selector({"spec": {"nodeSelector": {"pool": "a"}}})
    assert names(index, index.candidates([], selector)) == {"ok"}


@pytest.mark.parametrize("salt", ["", "a", "ns/pod-1", "ns/pod-2", "x" * 40])
def test_a_group_that_fits_is_listed_whole_in_slot_order(salt: str) -> None:
    """At or above the group's size the limit changes nothing: the whole group, in slot
    order, whatever the salt (the salt only chooses a window of a group too large)."""
    index = LayerIndex()
    for n in range(12):
        index.upsert(make_node(f"n{n:02}"), [])
    mask = index.candidates([]) & ~index.bit("n04")
    whole = [f"n{n:02}" for n in range(12) if n != 4]
    for limit in (11, 12, 100):
        assert [n.name for n in index.pick(mask, limit, salt)] == whole


def test_ids_of_removed_nodes_survive_renumbering(monkeypatch: pytest.MonkeyPatch) -> None:
    """With no spare ids allowed, an update that leaves more unheld ids than held ones
    renumbers: with slots freed by removals, every node still there, and every node added
    after, reads back exactly its layers."""
    monkeypatch.setattr(index_updates, "_SPARE_IDS", 0)
    renumbered: list[int] = []
    renumber = LayerIndex._renumber

    def counted(self: LayerIndex) -> None:
        renumbered.append(len(self))
        renumber(self)

    monkeypatch.setattr(LayerIndex, "_renumber", counted)
    index = LayerIndex()
    held: dict[str, set[str]] = {}
    for n in range(4):
        held[f"n{n}"] = {LAYERS[2 * n], LAYERS[2 * n + 1]}
        index.upsert(make_node(f"n{n}"), held[f"n{n}"])
    for name in ("n1", "n2"):
        index.remove(name)
        del held[name]
    held["n0"] = {LAYERS[0]}
    index.upsert(make_node("n0"), held["n0"])  # 8 ids, 3 held: renumbered
    assert renumbered == [2]
    held["n9"] = {LAYERS[3], LAYERS[7]}
    index.upsert(make_node("n9"), held["n9"])
    assert {n.name: index.layers_of(n.name) for n in index.nodes()} == held
    assert index.layer_count == len(set().union(*held.values()))


@pytest.mark.parametrize(
    "slots", [[1023], [1024], [2047], [2047, 2048], [5119, 9000], [127], [63, 64, 4095]])
def test_bits_at_the_edges_of_chunks_and_words(slots: list[int]) -> None:
    """The last and first slots of 1024-bit chunks and 64-bit words, after empty ones."""
    mask = sum(1 << slot for slot in slots)
    assert list(_bits(mask)) == slots
    assert list(_bits(mask, 1)) == slots[:1]


def test_an_empty_index_has_no_candidates() -> None:
    index = LayerIndex()
    assert (index.candidates([]), index.platforms(), len(index)) == (0, {}, 0)
    index.upsert(make_node("a"), [])
    index.remove("a")
    assert index.candidates([]) == 0


def test_groups_come_from_every_platform_with_candidates() -> None:
    """The first platform indexed has no candidate (cordoned): the next ones still count."""
    index = LayerIndex()
    index.upsert(make_node("amd", unschedulable=True), [LAYERS[0]])
    index.upsert(make_node("arm", ARM64), [LAYERS[1]])
    index.upsert(make_node("arm-empty", ARM64), [])
    layers = {AMD64: {LAYERS[0]: 5}, ARM64: {LAYERS[1]: 7}}
    groups = index.overlap_groups(layers, index.candidates([]))
    assert [(g.bytes_present, names(index, g.mask)) for g in groups] == [
        (7, {"arm"}), (0, {"arm-empty"})]


def test_renumbering_is_rare(monkeypatch: pytest.MonkeyPatch) -> None:
    """At most once per _SPARE_IDS new layers: nodes that hold the same layers, and churn of
    fewer new layers than that, never renumber."""
    renumbered: list[int] = []
    monkeypatch.setattr(LayerIndex, "_renumber", lambda self: renumbered.append(len(self)))
    index = LayerIndex()
    shared = [f"sha256:{i:064x}" for i in range(100)]
    for n in range(600):  # 60,000 layer references, 100 distinct layers
        index.upsert(make_node(f"n{n:03}"), shared)
    for round_ in range(50):  # 5,000 layers pulled and dropped
        index.upsert(make_node("n000"), [f"sha256:{round_:032x}{k:032x}" for k in range(100)])
    assert renumbered == []
    assert index.layers_of("n001") == frozenset(shared)
