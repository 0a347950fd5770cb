"""The agent's layer-label rule and the merge patch that keeps a Node's labels to it."""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.core.layerlabels import (
    LAYER_LABEL_PREFIX,
    LabelRule,
    MiB,
    is_layer_label,
    label_changes,
    label_short_id,
    label_value,
    layer_label,
    node_layer_labels,
    short_id,
)


def sha(text: str) -> str:
    return "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def test_a_key_is_the_digests_first_16_hex_digits_and_reads_back() -> None:
    digest = sha("layer")
    key = layer_label(digest)
    assert key == LAYER_LABEL_PREFIX + digest[7:23]
    assert label_short_id(key) == short_id(digest) == digest[7:23]
    assert is_layer_label(key) and len(key.split("/")[1]) <= 63


@pytest.mark.parametrize("digest", ["sha512:" + "a" * 128, "sha256:" + "A" * 64,
                                    "sha256:" + "a" * 63, "sha256:" + "g" * 64, "", "abc"])
def test_anything_but_a_sha256_digest_gets_no_label(digest: str) -> None:
    assert layer_label(digest) is None and short_id(digest) is None


@pytest.mark.parametrize("key", ["layer-locality.io/l.", "layer-locality.io/l.ABCDEF0123456789",
                                 "layer-locality.io/l.0123", "layer-locality.io/enabled",
                                 "kubernetes.io/hostname"])
def test_other_keys_name_no_layer(key: str) -> None:
    assert label_short_id(key) is None


def test_the_value_is_the_size_in_mib_rounded_up() -> None:
    assert [label_value(s) for s in (1, MiB, MiB + 1, 188 * MiB - 5)] == ["1", "1", "2", "188"]


sizes = st.dictionaries(st.integers(0, 10_000).map(lambda k: sha(f"l{k}")),
                        st.integers(1, 400 * MiB), max_size=150)


@given(sizes, st.integers(1, 64 * MiB), st.integers(0, 80))
def test_the_rule_keeps_the_largest_qualifying_layers_within_its_bound(
        layers: dict[str, int], least: int, most: int) -> None:
    rule = LabelRule(min_bytes=least, max_labels=most)
    labels = node_layer_labels(layers, rule)
    assert len(labels) <= most
    chosen = {label_short_id(k) for k in labels}
    qualifying = {d: s for d, s in layers.items() if s >= least}
    assert all(short_id(d) in chosen for d in qualifying) or len(labels) == most
    for digest, size in layers.items():
        if short_id(digest) in chosen:
            assert size >= least
            assert labels[LAYER_LABEL_PREFIX + str(short_id(digest))] == label_value(size)
            # a larger qualifying layer is never left out for a smaller one
            assert all(short_id(d) in chosen for d, s in qualifying.items() if s > size)


@given(st.dictionaries(st.sampled_from(["a", "b", "kubernetes.io/hostname",
                                         LAYER_LABEL_PREFIX + "0" * 16,
                                         LAYER_LABEL_PREFIX + "1" * 16]),
                       st.sampled_from(["1", "2", "x"])),
       st.dictionaries(st.sampled_from([LAYER_LABEL_PREFIX + c * 16 for c in "0123"]),
                       st.sampled_from(["1", "2"])))
def test_the_patch_takes_a_nodes_layer_labels_to_the_rule_and_touches_nothing_else(
        current: dict[str, str], desired: dict[str, str]) -> None:
    changes = label_changes(current, desired)
    after = {k: v for k, v in {**current, **changes}.items() if v is not None}
    assert {k: v for k, v in after.items() if is_layer_label(k)} == desired
    assert {k: v for k, v in after.items() if not is_layer_label(k)} == {
        k: v for k, v in current.items() if not is_layer_label(k)}
    assert label_changes(after, desired) == {}


def test_the_patch_refuses_a_desired_label_that_is_not_a_layers() -> None:
    with pytest.raises(ValueError, match="not a layer label"):
        label_changes({}, {"layer-locality.io/enabled": "true"})


def test_a_rule_out_of_bounds_is_refused() -> None:
    with pytest.raises(ValueError, match="min_bytes"):
        LabelRule(min_bytes=0)
    with pytest.raises(ValueError, match="max_labels"):
        LabelRule(max_labels=201)
