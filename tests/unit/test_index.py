"""The bitset layer index against a naive model."""

from __future__ import annotations

from collections.abc import Iterable
from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from tests.helpers import AMD64, ARM64
from webhook.core.bits import bits as _bits
from webhook.core.bits import slots as _slots
from webhook.core.index import LayerIndex
from webhook.core.layers import Platform
from webhook.core.nodes import NodeInfo, Taint

LAYERS = [f"sha256:{i:064x}" for i in range(8)]
SIZES = {d: (i + 1) * 1000 for i, d in enumerate(LAYERS)}


def make_node(name: str, platform: Platform = AMD64, **kw: object) -> NodeInfo:
    defaults: dict[str, object] = {"unschedulable": False, "taints": (), "images": ()}
    defaults.update(kw)
    return NodeInfo(name=name, hostname=f"h-{name}", platform=platform, **defaults)  # type: ignore[arg-type]


ops = st.lists(
    st.tuples(
        st.sampled_from(["upsert", "remove"]),
        st.sampled_from([f"n{i}" for i in range(6)]),
        st.frozensets(st.sampled_from(LAYERS), max_size=6),
        st.sampled_from([AMD64, ARM64]),
    ),
    max_size=40,
)


@settings(max_examples=150)
@given(ops, st.frozensets(st.sampled_from(LAYERS), min_size=1))
def test_overlap_matches_a_naive_model(
    sequence: list[tuple[str, str, frozenset[str], Platform]], pod_layers: frozenset[str]
) -> None:
    index = LayerIndex()
    model: dict[str, tuple[Platform, frozenset[str]]] = {}
    for op, name, layers, platform in sequence:
        if op == "upsert":
            index.upsert(make_node(name, platform), layers)
            model[name] = (platform, layers)
        else:
            assert index.remove(name) == (name in model)
            model.pop(name, None)
    assert len(index) == len(model)
    # amd64 pods use the layers as given; arm64 nodes see only the first half of them.
    by_platform = {
        AMD64: {d: SIZES[d] for d in pod_layers},
        ARM64: {d: SIZES[d] for d in pod_layers if LAYERS.index(d) < 4},
    }
    groups = index.overlap_groups(by_platform, index.candidates([]))
    got = {}
    for group in groups:
        for node in index.pick(group.mask, 100, "salt"):
            got[node.name] = group.bytes_present
    expected = {
        name: sum(by_platform[platform].get(d, 0) for d in layers)
        for name, (platform, layers) in model.items()
    }
    assert got == expected
    assert [g.bytes_present for g in groups] == sorted({*expected.values()}, reverse=True)
    held = {d for _, layers in model.values() for d in layers}
    assert index.layer_count == len(held)


def test_unchanged_update_reports_no_change() -> None:
    index = LayerIndex()
    assert index.upsert(make_node("a"), LAYERS[:2])
    assert not index.upsert(make_node("a"), list(reversed(LAYERS[:2])))
    assert index.upsert(make_node("a", unschedulable=True), LAYERS[:2])


def test_generation_moves_on_every_change_and_only_then() -> None:
    index = LayerIndex()
    seen = [index.generation]
    index.upsert(make_node("a"), LAYERS[:2])
    seen.append(index.generation)
    index.upsert(make_node("a"), LAYERS[:2])  # unchanged
    seen.append(index.generation)
    index.upsert(make_node("a", unschedulable=True), LAYERS[:2])  # a flag only
    seen.append(index.generation)
    index.remove("missing")
    seen.append(index.generation)
    index.remove("a")
    seen.append(index.generation)
    assert seen[1] > seen[0] and seen[2] == seen[1] and seen[3] > seen[2]
    assert seen[4] == seen[3] and seen[5] > seen[4]


def test_candidates_skip_cordoned_and_untolerated_taints() -> None:
    index = LayerIndex()
    taint = Taint("gpu", "yes", "NoSchedule")
    index.upsert(make_node("ok"), [])
    index.upsert(make_node("cordoned", unschedulable=True), [])
    index.upsert(make_node("tainted", taints=(taint,)), [])

    def names(mask: int) -> set[str]:
        return {n.name for n in index.pick(mask, 10, "")}

    assert names(index.candidates([])) == {"ok"}
    tolerate = [{"key": "gpu", "operator": "Equal", "value": "yes", "effect": "NoSchedule"}]
    assert names(index.candidates(tolerate)) == {"ok", "tainted"}
    assert names(index.candidates([{"operator": "Exists"}])) == {"ok", "tainted"}


def test_pick_is_bounded_deterministic_and_spreads_by_salt() -> None:
    index = LayerIndex()
    for i in range(500):
        index.upsert(make_node(f"n{i:03}"), [LAYERS[0]])
    mask = index.candidates([])
    first = [n.name for n in index.pick(mask, 20, "ns/pod-a")]
    assert len(first) == len(set(first)) == 20
    assert first == [n.name for n in index.pick(mask, 20, "ns/pod-a")]
    others = {n.name for salt in ("ns/pod-b", "ns/pod-c", "ns/pod-d")
              for n in index.pick(mask, 20, salt)}
    assert others - set(first), "different pods should not all get the same window"


def test_removed_slots_are_reused_and_cleared() -> None:
    index = LayerIndex()
    index.upsert(make_node("a"), LAYERS[:3])
    index.remove("a")
    assert index.layer_count == 0
    index.upsert(make_node("b"), LAYERS[3:4])
    groups = index.overlap_groups({AMD64: {LAYERS[0]: 5, LAYERS[3]: 7}}, index.candidates([]))
    assert [(g.bytes_present, g.count) for g in groups] == [(7, 1)]


@given(mask=st.integers(min_value=0, max_value=(1 << 5000) - 1),
       limit=st.one_of(st.none(), st.integers(0, 80)))
def test_bits_lists_set_bits_lowest_first(mask: int, limit: int | None) -> None:
    expected = [slot for slot in range(mask.bit_length()) if mask >> slot & 1]
    assert list(_bits(mask, limit)) == expected[:limit]


@given(slots=st.sets(st.integers(0, 20_000), max_size=40))
def test_bits_finds_sparse_bits_across_chunks(slots: set[int]) -> None:
    mask = sum(1 << slot for slot in slots)
    assert list(_bits(mask)) == sorted(slots)


@given(bits=st.sets(st.integers(0, 9000), max_size=300), limit=st.integers(-1, 400),
       base=st.integers(0, 5000))
@settings(max_examples=300, deadline=None)
def test_slots_are_the_bits_listed(bits: set[int], limit: int, base: int) -> None:
    """_slots (bin and rsplit per 4,096-bit chunk) lists what _bits yields, lowest first."""
    mask = sum(1 << b for b in bits)
    assert _slots(mask, limit, base) == [base + b for b in _bits(mask, max(limit, 0))]


@given(held=st.sets(st.integers(0, 2500), min_size=1, max_size=400),
       limit=st.integers(0, 120), salt=st.text(max_size=8))
@settings(max_examples=100, deadline=None)
def test_pick_lists_what_picks_yields(held: set[int], limit: int, salt: str) -> None:
    """The list `pick` builds at once is `picks`, node for node (salted window, wrapping)."""
    index = LayerIndex()
    for slot in range(max(held) + 1):
        index.upsert(make_node(f"n{slot}"), [LAYERS[0]] if slot in held else [LAYERS[1]])
    mask = index.holders(LAYERS[0])
    assert index.pick(mask, limit, salt) == list(index.picks(mask, limit, salt))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["upsert", "remove"]), st.integers(0, 7),
                          st.text("abc", min_size=1, max_size=70)), max_size=40))
def test_hostname_costs_follow_the_nodes(sequence: list[tuple[str, int, str]]) -> None:
    """The per-slot costs spend prices picks by stay `len(hostname) + 3` of the node in each
    slot through upserts (a hostname may change), removals and reused slots."""
    index = LayerIndex()
    for op, k, hostname in sequence:
        if op == "upsert":
            node = NodeInfo(name=f"n{k}", hostname=hostname, platform=AMD64,
                            unschedulable=False, taints=(), images=())
            index.upsert(node, [LAYERS[k % len(LAYERS)]])
        else:
            index.remove(f"n{k}")
    everyone = index.candidates([])
    slots = index.pick_slots(everyone, 100, "")
    nodes = index.nodes_at(slots)
    assert nodes == index.pick(everyone, 100, "") == list(index.picks(everyone, 100, ""))
    assert index.hostname_costs(slots) == [len(node.hostname) + 3 for node in nodes]


NODE_STATES = st.tuples(
    st.frozensets(st.sampled_from(LAYERS), max_size=6),  # layers
    st.sampled_from([AMD64, ARM64]),
    st.booleans(),  # unschedulable
    st.sampled_from([(), (Taint("gpu", "", "NoSchedule"),)]),
    st.frozensets(st.sampled_from(["a", "b", "c"])),  # layer labels
    st.booleans(),  # labels trusted
)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["upsert", "upsert", "remove", "read"]),
                          st.integers(0, 9), NODE_STATES), max_size=50),
       st.sampled_from([1, 3, 4096]))
def test_bits_set_later_read_as_if_set_at_once(
        sequence: list[tuple[str, int, tuple[frozenset[str], Platform, bool,
                                              tuple[Taint, ...], frozenset[str], bool]]],
        chunk: int) -> None:
    """A new node's bits are set at the next read (in slices of `_CHUNK_SLOTS` slots): every
    bitset a review reads (layers, labels, trust, platforms, cordons, taints) is, at every
    read, the one a model of the nodes then held gives."""
    index = LayerIndex()
    model: dict[str, tuple[frozenset[str], Platform, bool, tuple[Taint, ...],
                           frozenset[str], bool]] = {}

    def mask(names: Iterable[str]) -> int:
        return sum(map(index.bit, names))

    def check() -> None:
        held = model.items()
        for digest in LAYERS:
            assert index.holders(digest) == mask(n for n, s in held if digest in s[0])
        for short in "abc":
            assert index.label_carriers(short) == mask(n for n, s in held if short in s[4])
        assert index.trusted == mask(n for n, s in held if s[4] and s[5])
        for platform in (AMD64, ARM64):
            assert index.platform_mask(platform) == mask(n for n, s in held if s[1] == platform)
        assert index.candidates([]) == mask(n for n, s in held if not s[2] and not s[3])
        assert index.layer_count == len({d for s in model.values() for d in s[0]})

    with patch("webhook.core.index_updates._CHUNK_SLOTS", chunk):
        for op, k, state in sequence:
            name = f"n{k}"
            layers, platform, cordoned, taints, labels, trusted = state
            if op == "upsert":
                index.upsert(make_node(name, platform, unschedulable=cordoned, taints=taints,
                                       layer_labels=tuple(sorted(labels)),
                                       labels_trusted=trusted), layers)
                model[name] = state
            elif op == "remove":
                assert index.remove(name) == (name in model)
                model.pop(name, None)
            else:
                check()
        check()


def test_platforms_come_in_the_order_their_first_nodes_came() -> None:
    """platforms() (the order of a pod's layers per platform, and of the label terms' ties)
    lists a platform new to the index where its first node came, not by slot: slots freed
    and taken again in another order must not reorder it."""
    index = LayerIndex()
    index.upsert(make_node("a", AMD64), [LAYERS[0]])
    index.upsert(make_node("b", ARM64), [LAYERS[0]])
    index.remove("a")
    index.remove("b")  # free slots: 0, 1; the next node takes 1, the one after it 0
    index.upsert(make_node("c", ARM64), [LAYERS[1]])
    index.upsert(make_node("d", AMD64), [LAYERS[1]])
    assert list(index.platforms()) == [ARM64, AMD64]


def test_the_digests_the_index_keeps_are_interned_however_they_came() -> None:
    """A node's layers may come as new strings (a decoded page): the one copy the index
    keeps of each digest is the interned one, on a new node and on a changed one."""
    import sys

    def fresh(digest: str) -> str:
        return "".join(list(digest))  # equal, and not the interned object

    index = LayerIndex()
    index.upsert(make_node("n1"), frozenset(fresh(d) for d in LAYERS[:2]))
    index.upsert(make_node("n1"), [fresh(d) for d in LAYERS[1:4]])  # changed: new keys
    index.upsert(make_node("n2"), frozenset(fresh(d) for d in LAYERS[4:6]))
    assert index.holders(LAYERS[4]) == index.bit("n2")
    kept = [*index._digest, *index._layer_nodes]
    assert kept and all(digest is sys.intern(digest) for digest in kept)
    assert index.layers_of("n1") == frozenset(LAYERS[1:4])
