"""The kubelet stand-in's pull model (webhook/evaluation/pulls.py): serial pulls per node,
layers shared between images, images held by name, the node status, image GC, and the `Pulled`
messages read back by the webhook's own telemetry parser."""

from __future__ import annotations

import pytest

from tests.helpers import AMD64, image
from webhook.evaluation.pulls import (
    ImagePull,
    PullModel,
    PullSettings,
    go_duration,
    pulled_message,
)
from webhook.registry.catalog import StaticCatalog
from webhook.sim.workload import NodeSpec
from webhook.sim.world import MAX_STATUS_IMAGES, ImageBook, World, WorldConfig
from webhook.telemetry.pulls import PRESENT, PULLED, parse_message
from webhook.telemetry.pulls import go_duration as parse_go_duration

MiB = 1 << 20
BASE = [("base one", 100 * MiB), ("base two", 50 * MiB)]
APP1 = "registry.example.com/team/app1:1"
APP2 = "registry.example.com/team/app2:1"
OTHER = "registry.example.com/team/other:1"
OTHER2 = "registry.example.com/team/other2:1"
# The image list as current as the pulls (its 30 s refresh is tested on its own below).
SETTINGS = PullSettings(bandwidth=10 * MiB, layer_overhead=0.5, image_list_period=None)


def catalog(*extra: tuple[str, list[tuple[str, int]]]) -> StaticCatalog:
    images = [
        image(APP1, {AMD64: [*BASE, ("app1 code", 10 * MiB)]}),
        image(APP2, {AMD64: [*BASE, ("app2 code", 20 * MiB)]}),
        image(OTHER, {AMD64: [("other", 30 * MiB)]}),
        image(OTHER2, {AMD64: [("other2", 40 * MiB)]}),
        *(image(ref, {AMD64: layers}) for ref, layers in extra),
    ]
    return StaticCatalog(images)


def model(settings: PullSettings = SETTINGS, preloaded: tuple[str, ...] = (),
          cat: StaticCatalog | None = None) -> PullModel:
    m = PullModel(ImageBook(cat or catalog()), settings)
    m.add_node("n1", AMD64, preloaded)
    return m


def test_pulls_are_serial_per_node_and_a_later_pod_waits() -> None:
    m = model()
    [a] = m.bind("n1", [APP1], 0.0)
    assert (a.present, a.bytes, a.layers) == (False, 160 * MiB, 3)
    assert a.start == 0.0
    assert a.end == pytest.approx(16.0 + 3 * 0.5)
    # bound at 1 s while n1 still pulls APP1: starts when that pull ends
    [b] = m.bind("n1", [OTHER], 1.0)
    assert b.requested == 1.0
    assert b.start == pytest.approx(17.5)
    assert b.end == pytest.approx(17.5 + 3.0 + 0.5)
    assert b.pull_seconds == pytest.approx(3.5)
    assert b.total_seconds == pytest.approx(20.0)


def test_a_pods_images_are_pulled_one_after_the_other() -> None:
    m = model()
    first, second = m.bind("n1", [OTHER, OTHER2], 0.0)
    assert first.end == pytest.approx(3.5)
    assert second.requested == pytest.approx(3.5) and second.start == pytest.approx(3.5)
    assert second.end == pytest.approx(3.5 + 4.0 + 0.5)


def test_layers_a_node_has_are_not_pulled_again() -> None:
    m = model()
    m.bind("n1", [APP1], 0.0)
    [c] = m.bind("n1", [APP2], 2.0)  # shares both base layers with APP1
    assert (c.present, c.bytes, c.layers) == (False, 20 * MiB, 1)
    assert c.image_size == 170 * MiB
    assert c.end - c.start == pytest.approx(2.0 + 0.5)


def test_an_image_held_by_name_is_present() -> None:
    m = model(preloaded=(OTHER,))
    [p] = m.bind("n1", [OTHER], 5.0)
    assert p.present and p.bytes == 0 and p.start == p.end == 5.0
    [first] = m.bind("n1", [APP1], 6.0)
    [again] = m.bind("n1", [APP1], 7.0)  # held by name before its pull ended: waits for it
    assert not again.present and again.bytes == 0 and again.layers == 0
    assert (again.requested, again.start, again.end) == (7.0, 7.0, first.end)
    [later] = m.bind("n1", [APP1], first.end)  # from then on, present
    assert later.present and later.pull_seconds == 0


def test_a_pod_waiting_on_another_pods_pull_delays_its_next_image() -> None:
    m = model()
    [first] = m.bind("n1", [APP1], 0.0)
    waited, other = m.bind("n1", [APP1, OTHER], 1.0)
    assert waited.end == first.end and other.requested == first.end
    assert other.start >= first.end and other.bytes == 30 * MiB


def test_the_status_lists_what_the_kubelets_image_list_last_saw() -> None:
    settings = PullSettings(bandwidth=10 * MiB, layer_overhead=0.0, image_list_period=30.0)
    m = PullModel(ImageBook(catalog()), settings)
    m.add_node("n1", AMD64, [OTHER])
    m.add_node("n2", AMD64)
    assert [names(i)[-1] for i in m.status_images("n1", 0.0)] == [OTHER]  # at its start
    [pull] = m.bind("n1", [APP1], 0.0)  # 170 MiB: pulled at 17 s
    for t in (0.5, 17.0, 29.9, 45.0, 100.0):  # the last refresh is at most one period ago
        assert t - 30 < m.listed_at("n1", t) <= t
    refresh = m.listed_at("n1", pull.end + 30)  # the first refresh after the pull
    assert pull.end <= refresh and m.listed_at("n1", refresh) == refresh
    for t in (pull.end, (pull.end + refresh) / 2, refresh - 0.01):
        assert APP1 not in {names(i)[-1] for i in m.status_images("n1", t)}, t
        assert m.behind("n1", t)
    assert APP1 in {names(i)[-1] for i in m.status_images("n1", refresh)}
    assert not m.behind("n1", refresh)
    for t in (0.1, 5.0, 100.0):  # the image it started with, in every list
        assert OTHER in {names(i)[-1] for i in m.status_images("n1", t)}
    # Each node on a phase of its own, within one period; None: listed as pulled.
    assert m.listed_at("n2", 100.0) != m.listed_at("n1", 100.0)
    assert 70.0 < m.listed_at("n2", 100.0) <= 100.0
    now = PullModel(ImageBook(catalog()), SETTINGS)
    now.add_node("n1", AMD64)
    now.bind("n1", [APP1], 0.0)
    assert now.listed_at("n1", 18.0) == 18.0 and not now.behind("n1", 18.0)


def test_an_image_the_catalog_does_not_know_pulls_nothing() -> None:
    [p] = model().bind("n1", ["registry.example.com/unknown:1"], 0.0)
    assert not p.known and p.bytes == 0


def names(entry: dict[str, object]) -> list[str]:
    value = entry["names"]
    assert isinstance(value, list)
    return [str(v) for v in value]


def test_status_lists_images_once_pulled_largest_first() -> None:
    m = model()
    m.bind("n1", [APP1], 0.0)  # ends at 17.5
    m.bind("n1", [OTHER], 0.0)  # 17.5 -> 21
    m.bind("n1", [APP2], 0.0)  # 21 -> 23.5
    assert m.status_images("n1", 10.0) == []
    assert [names(i)[-1] for i in m.status_images("n1", 17.5)] == [APP1]
    status = m.status_images("n1", 30.0)
    assert [names(i)[-1] for i in status] == [APP2, APP1, OTHER]
    assert [i["sizeBytes"] for i in status] == [170 * MiB, 160 * MiB, 30 * MiB]
    assert names(status[0])[0].startswith("registry.example.com/team/app2@sha256:")


def test_status_is_capped_at_fifty_images() -> None:
    refs = [f"registry.example.com/many/img{i}:1" for i in range(60)]
    cat = catalog(*((ref, [(f"layer {ref}", (i + 1) * MiB)]) for i, ref in enumerate(refs)))
    m = model(preloaded=tuple(refs), cat=cat)
    status = m.status_images("n1", 0.0)
    assert len(status) == MAX_STATUS_IMAGES == 50
    assert [i["sizeBytes"] for i in status] == [(60 - i) * MiB for i in range(50)]


def test_gc_frees_least_recently_used_unused_images() -> None:
    refs = {name: f"registry.example.com/gc/{name}:1" for name in ("i0", "i1", "i2", "i3")}
    cat = catalog(*((ref, [(f"layer {name}", 200 * MiB)]) for name, ref in refs.items()))
    settings = PullSettings(bandwidth=100 * MiB, layer_overhead=0.0, disk=1000 * MiB,
                            gc_high=0.5, gc_low=0.65)
    m = model(settings, cat=cat)
    m.bind("n1", [refs["i0"]], 0.0)  # stays in use: never freed, though the oldest
    m.bind("n1", [refs["i1"]], 1.0)
    m.bind("n1", [refs["i2"]], 2.0)
    m.release("n1", [refs["i2"]], 100.0)  # i2 unused since 100, i1 since 150: i2 is the LRU
    m.release("n1", [refs["i1"]], 150.0)
    m.bind("n1", [refs["i3"]], 200.0)  # 800 MiB > 500: free down to 650
    node = m.nodes["n1"]
    assert set(node.images) == {refs["i0"], refs["i1"], refs["i3"]}
    assert node.disk_used == 600 * MiB
    [again] = m.bind("n1", [refs["i2"]], 300.0)
    assert again.bytes == 200 * MiB


def test_no_gc_without_gc_high() -> None:
    m = model(PullSettings(bandwidth=10 * MiB, disk=100 * MiB))
    m.bind("n1", [APP1], 0.0)
    m.release("n1", [APP1], 50.0)
    m.bind("n1", [OTHER], 60.0)
    assert set(m.nodes["n1"].images) == {APP1, OTHER}


@pytest.mark.parametrize("seconds", [0.0004, 0.512, 1.0, 1.234567891, 59.999, 62.5, 3725.25])
def test_go_duration_reads_back(seconds: float) -> None:
    text = go_duration(seconds)
    assert parse_go_duration(text) == pytest.approx(seconds, abs=1e-6)


def test_pulled_message_reads_back_through_the_telemetry_parser() -> None:
    m = model()
    m.bind("n1", [APP1], 0.0)
    [pull] = m.bind("n1", [APP2], 3.0)  # waits until 17.5, pulls 2.5 s
    message = pulled_message(pull)
    parsed = parse_message(message)
    assert parsed is not None
    assert (parsed.image, parsed.result, parsed.size) == (APP2, PULLED, 170 * MiB)
    # the telemetry keeps the time including the wait
    assert parsed.seconds == pytest.approx(pull.total_seconds, abs=1e-6)
    assert parsed.seconds == pytest.approx(20.0 - 3.0)


def test_a_present_image_reads_back_as_present() -> None:
    pull = ImagePull(OTHER, True, 0, 0, 4.0, 4.0, 4.0, 30 * MiB)
    parsed = parse_message(pulled_message(pull))
    assert parsed is not None
    assert (parsed.image, parsed.result, parsed.seconds) == (OTHER, PRESENT, 0.0)


def test_the_simulator_lists_a_pulled_image_when_the_stand_ins_model_does() -> None:
    """One kubelet image-list model for both: the simulator's node status shows an image at
    the stand-in's first image-list refresh after the pull (then at its own next status
    update), on the same per-node phase; 0-40 s after the pull at the kubelet's periods."""
    settings = PullSettings(bandwidth=10 * MiB, layer_overhead=0.0, image_list_period=30.0)
    m = PullModel(ImageBook(catalog()), settings)
    listed_only = World([NodeSpec(name="n1"), NodeSpec(name="n2")], ImageBook(catalog()),
                        WorldConfig(image_list_period=30.0, status_period=0.0))
    world = World([NodeSpec(name="n1"), NodeSpec(name="n2")], ImageBook(catalog()),
                  WorldConfig())
    for name in ("n1", "n2"):
        m.add_node(name, AMD64)
        for ready in (0.0, 7.5, 17.0, 61.3):
            shown = listed_only.status_time(name, ready)
            assert not m.behind(name, shown) and m.listed_at(name, shown) == shown
            assert ready <= shown < ready + 30
            later = world.status_time(name, ready)
            assert shown <= later < shown + 10 and ready <= later < ready + 40
    assert listed_only.status_time("n1", 5.0) != listed_only.status_time("n2", 5.0)
