"""nodeselect: a pod's nodeSelector and required node affinity, with kube-scheduler's semantics
(k8s.io/component-helpers/scheduling/corev1/nodeaffinity, apimachinery labels selectors)."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.core.nodeselect import MATCH_NOTHING, REQUIRED, Term, pod_selector

NODES: dict[str, dict[str, str]] = {
    "a1": {"kubernetes.io/hostname": "a1", "pool": "a", "cpus": "8", "gpu": "nvidia"},
    "a2": {"kubernetes.io/hostname": "a2", "pool": "a", "cpus": "16"},
    "b1": {"kubernetes.io/hostname": "b1", "pool": "b", "cpus": "64", "spot": ""},
    "c1": {"kubernetes.io/hostname": "c1", "cpus": "many"},
}


def spec(node_selector: Any = None, terms: Any = None, required: Any = None) -> dict[str, Any]:
    """A pod with `node_selector` and required affinity `{nodeSelectorTerms: terms}` (or the
    raw `required` value)."""
    pod_spec: dict[str, Any] = {"containers": [{"name": "c", "image": "app:1"}]}
    if node_selector is not None:
        pod_spec["nodeSelector"] = node_selector
    if terms is not None:
        required = {"nodeSelectorTerms": terms}
    if required is not None:
        pod_spec["affinity"] = {"nodeAffinity": {REQUIRED: required}}
    return {"spec": pod_spec}


def selected(pod: dict[str, Any]) -> list[str]:
    selector = pod_selector(pod)
    if selector is None:
        return sorted(NODES)
    return sorted(name for name, labels in NODES.items() if selector.matches(labels, name))


def expr(key: str, operator: str, *values: str) -> dict[str, Any]:
    return {"key": key, "operator": operator, "values": list(values)}


def term(*expressions: dict[str, Any], fields: Any = None) -> dict[str, Any]:
    built: dict[str, Any] = {"matchExpressions": list(expressions)}
    if fields is not None:
        built["matchFields"] = fields
    return built


def test_a_pod_that_constrains_nothing_has_no_selector() -> None:
    """The fast path: no nodeSelector (or an empty one) and no required affinity."""
    assert pod_selector({"spec": {}}) is None
    assert pod_selector(spec(node_selector={})) is None
    assert pod_selector({"spec": {"affinity": {"nodeAffinity": {REQUIRED: None}}}}) is None
    assert pod_selector({"spec": {"affinity": {"podAffinity": {}}}}) is None


@pytest.mark.parametrize(
    ("pod", "expected"),
    [
        (spec(node_selector={"pool": "a"}), ["a1", "a2"]),
        (spec(node_selector={"pool": "a", "gpu": "nvidia"}), ["a1"]),  # ANDed
        (spec(node_selector={"cpus": "8", "pool": "b"}), []),
        (spec(node_selector={"spot": ""}), ["b1"]),  # "" needs the label, with value ""
        (spec(node_selector={"pool": "z"}), []),
        (spec(terms=[term(expr("pool", "In", "a", "b"))]), ["a1", "a2", "b1"]),
        (spec(terms=[term(expr("pool", "NotIn", "a"))]), ["b1", "c1"]),  # no label: NotIn
        (spec(terms=[term(expr("gpu", "Exists"))]), ["a1"]),
        (spec(terms=[term(expr("gpu", "DoesNotExist"))]), ["a2", "b1", "c1"]),
        (spec(terms=[term(expr("cpus", "Gt", "8"))]), ["a2", "b1"]),  # "many": no number
        (spec(terms=[term(expr("cpus", "Lt", "16"))]), ["a1"]),
        # expressions of a term ANDed, terms ORed
        (spec(terms=[term(expr("pool", "In", "a"), expr("cpus", "Gt", "10"))]), ["a2"]),
        (spec(terms=[term(expr("pool", "In", "b")), term(expr("gpu", "Exists"))]), ["a1", "b1"]),
        # nodeSelector AND required affinity
        (spec(node_selector={"pool": "a"}, terms=[term(expr("cpus", "Lt", "10"))]), ["a1"]),
        # the hostname label and the node name
        (spec(terms=[term(expr("kubernetes.io/hostname", "In", "a2", "c1"))]), ["a2", "c1"]),
        (spec(terms=[term(fields=[expr("metadata.name", "In", "b1")])]), ["b1"]),
        (spec(terms=[term(fields=[expr("metadata.name", "NotIn", "b1")])]), ["a1", "a2", "c1"]),
        (spec(terms=[term(expr("pool", "In", "a"), fields=[expr("metadata.name", "NotIn", "a1")])]),
         ["a2"]),
    ],
)
def test_selection_follows_the_scheduler(pod: dict[str, Any], expected: list[str]) -> None:
    assert selected(pod) == expected


@pytest.mark.parametrize(
    ("terms", "required"),
    [
        ([], None),  # a required affinity with no term selects no node
        (None, {}),  # nodeSelectorTerms absent: the same
        ([{}], None),  # a term with neither expressions nor fields selects no node
        ([{"matchExpressions": [], "matchFields": []}], None),
        ([None], None),  # a null term
    ],
)
def test_empty_required_affinity_selects_nothing(terms: Any, required: Any) -> None:
    assert selected(spec(terms=terms, required=required)) == []


VALID = term(expr("pool", "In", "b"))


@pytest.mark.parametrize(
    "bad",
    [
        term(expr("pool", "Equals", "a")),  # unknown operator
        term(expr("pool", "in", "a")),  # operators are case-sensitive
        term(expr("pool", "In")),  # In needs values
        term(expr("pool", "NotIn")),  # ... NotIn too (with none it would match every node)
        term(expr("cpus", "Equals", "99")),  # unknown, with what would parse as a number
        term(expr("gpu", "Exists", "nvidia")),  # Exists takes none
        term(expr("cpus", "Gt", "8", "9")),  # Gt takes exactly one
        term(expr("cpus", "Gt", "eight")),  # ... an integer
        term(expr("cpus", "Lt", "99999999999999999999")),  # ... an int64
        term(expr("cpus", "Lt", "-1")),  # "-1" is not a valid label value: the scheduler fails
        term(expr("cpus", "Gt", "+8")),  # ParseInt takes it, label value validation does not
        term(expr("bad key!", "Exists")),  # an invalid label key
        term(expr("Example.com/pool", "Exists")),  # the prefix is a lowercase DNS subdomain
        term(expr("/pool", "DoesNotExist")),  # an empty prefix
        term(expr("p" * 254 + "/pool", "DoesNotExist")),  # a prefix over 253 characters
        term(expr("k8s.io/" + "n" * 64, "DoesNotExist")),  # a name over 63 characters
        term(expr("pool", "NotIn", "v" * 64)),  # a value over 63 characters
        term(expr("cpus", "Lt", str(1 << 63))),  # one past the largest int64
        term(expr("pool", "In", "a b")),  # an invalid label value
        term(fields=[expr("metadata.name", "In", "a1", "a2")]),  # a field takes one value
        term(fields=[expr("metadata.name", "Exists")]),  # fields: In and NotIn only
        # a well-formed requirement does not rescue its term: it matches no node at all
        term(expr("pool", "In", "a"), expr("pool", "Bogus", "a")),
        # wrong JSON types
        term({"key": "pool", "operator": "In", "values": "a"}),
        term({"key": "pool", "operator": "In", "values": ["a", 1]}),
        term({"key": 7, "operator": "Exists"}),
        term({"key": "pool", "operator": None}),
        term("pool=a"),  # type: ignore[arg-type]
        {"matchExpressions": {"key": "pool", "operator": "Exists"}},
        {"matchExpressions": [expr("pool", "Exists")], "matchFields": "metadata.name"},
        {"matchExpressions": 7},
        {"matchFields": 7},
        "pool In a",
        7,
    ],
)
def test_a_term_the_scheduler_cannot_parse_matches_no_node(bad: Any) -> None:
    """Alone it selects nothing (it is dropped: no term is left); ORed with a valid term,
    the valid term still selects."""
    selector = pod_selector(spec(terms=[bad]))
    assert selector is not None and selector.terms == ()
    assert selected(spec(terms=[bad])) == []
    assert selected(spec(terms=[bad, VALID])) == ["b1"]


@pytest.mark.parametrize(
    "pod",
    [
        spec(node_selector=["pool=a"]),
        spec(node_selector="pool=a"),
        spec(node_selector={"cpus": 8}),
        spec(required=["pool"]),
        spec(required="required"),
        spec(required={"nodeSelectorTerms": {"matchExpressions": []}}),
    ],
)
def test_a_malformed_selection_selects_no_node(pod: dict[str, Any]) -> None:
    """Wrong JSON types where the selection is (the API server rejects such a pod after
    admission): never a crash, and no node to spend terms on."""
    assert pod_selector(pod) == MATCH_NOTHING
    assert selected(pod) == []


def test_valid_label_keys_and_values_are_accepted() -> None:
    keys = ["pool", "example.com/pool", "a.b-c.example/x_y.z-1", "k8s.io/" + "n" * 63]
    for key in keys:
        pod = spec(terms=[term(expr(key, "In", "v", "", "A-b_c.9"))])
        selector = pod_selector(pod)
        assert selector is not None and selector.terms, key
        assert selector.matches({key: "A-b_c.9"}, "n")
    assert selected(spec(terms=[term(expr("k8s.io/" + "n" * 64, "Exists"))])) == []


def test_the_limits_themselves_are_valid() -> None:
    """Exactly at each limit: a 253-character prefix, a 63-character name and value, the
    largest int64; and `values` may be left out where none are taken."""
    prefix = ".".join(["p" * 63] * 4)[:253]
    assert len(prefix) == 253
    for key in (prefix + "/pool", "n" * 63):
        assert selected(spec(terms=[term(expr(key, "DoesNotExist"))])) == sorted(NODES), key
    assert selected(spec(terms=[term(expr("pool", "NotIn", "v" * 63))])) == sorted(NODES)
    assert selected(spec(terms=[term(expr("cpus", "Lt", str((1 << 63) - 1)))])) == [
        "a1", "a2", "b1"]
    assert selected(spec(terms=[term({"key": "gpu", "operator": "Exists"})])) == ["a1"]


def test_fields_other_than_the_name_are_empty_on_every_node() -> None:
    """matchFields on a field the node lacks compares "" (fields.Set.Get)."""
    other = "spec.unschedulable"
    assert selected(spec(terms=[term(fields=[expr(other, "In", "a1")])])) == []
    assert selected(spec(terms=[term(fields=[expr(other, "NotIn", "")])])) == []
    assert selected(spec(terms=[term(fields=[expr(other, "In", "")])])) == sorted(NODES)
    assert selected(spec(terms=[term(fields=[expr("metadata.name", "In", "a1")])])) == ["a1"]


def test_a_term_the_scheduler_could_not_parse_matches_no_node_by_itself() -> None:
    assert not Term(valid=False).matches({"pool": "a"}, "a1")
    assert Term().matches({"pool": "a"}, "a1")  # valid, and nothing required


def test_equal_selections_are_equal_values() -> None:
    """The decision memo keys on the parsed value: the same selection written with another
    order of values or of nodeSelector pairs is the same key, a different one is not."""
    one = pod_selector(spec(node_selector={"a": "1", "b": "2"},
                            terms=[term(expr("pool", "In", "a", "b"))]))
    two = pod_selector(spec(node_selector={"b": "2", "a": "1"},
                            terms=[term(expr("pool", "In", "b", "a"))]))
    other = pod_selector(spec(node_selector={"b": "2", "a": "1"},
                              terms=[term(expr("pool", "In", "b"))]))
    assert one == two and hash(one) == hash(two)
    assert one != other


def test_per_node_is_set_by_the_hostname_label_and_fields_only() -> None:
    def per_node(pod: dict[str, Any]) -> bool:
        selector = pod_selector(pod)
        assert selector is not None
        return selector.per_node

    assert not per_node(spec(node_selector={"pool": "a"}, terms=[term(expr("gpu", "Exists"))]))
    assert per_node(spec(node_selector={"kubernetes.io/hostname": "a1"}))
    assert per_node(spec(terms=[term(expr("gpu", "Exists")),
                                term(expr("kubernetes.io/hostname", "Exists"))]))
    assert per_node(spec(terms=[term(fields=[expr("metadata.name", "In", "a1")])]))
