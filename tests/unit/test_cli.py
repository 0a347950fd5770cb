"""The command line: explain on the demo inventory, certs, errors."""

from __future__ import annotations

import asyncio
import base64
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
import yaml

from tests.helpers import apply_patch, preferred_terms, validate_pod, weight_by_hostname
from webhook.cli import main, read_pod
from webhook.config import Settings
from webhook.core.admission import parse_review
from webhook.core.holdout import workload_key
from webhook.core.pods import DECISION_ANNOTATION
from webhook.serving.mutate import Mutator
from webhook.serving.wiring import build_parts

POD: dict[str, Any] = {
    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "demo"},
    "spec": {"containers": [{"name": "app", "image": "python:3.11-slim"}]}}


def write(tmp_path: Path, obj: object) -> Path:
    path = tmp_path / "obj.yaml"
    path.write_text(yaml.safe_dump(obj))
    return path


def test_explain_json_matches_the_patch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--pod", str(write(tmp_path, POD)), "--demo", "--output", "json"],
                env={}) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["result"] == "patched" and "reason" not in doc
    patched = apply_patch(POD, doc["patch"])
    validate_pod(patched)
    index = build_parts(Settings(demo=True)).inventory.index
    assert {r["node"] for r in doc["nodes"]} == {n.name for n in index.nodes()}
    # Each row's weight is what the patch gives that hostname, baseline term left out.
    terms = preferred_terms(patched)
    baseline = sum(t["weight"] for t in terms
                   if t["preference"]["matchExpressions"][0]["operator"] == "Exists")
    raw = weight_by_hostname(patched, [r["hostname"] for r in doc["nodes"]])
    for row in doc["nodes"]:
        assert row["weight"] == raw[row["hostname"]] - baseline
        assert (row["status"] == "named") == (row["weight"] > 0)
    calibration = doc["calibration"]
    assert calibration["topWeight"] == max(r["weight"] for r in doc["nodes"])
    assert calibration["topWeight"] + calibration["baselineWeight"] == 100


def test_explain_table_shows_the_calibration(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "web", "namespace": "demo"},
                  "spec": {"template": {"metadata": {"labels": {"app": "web"}},
                                        "spec": POD["spec"]}}}
    path = str(write(tmp_path, deployment))
    assert main(["explain", "--pod", path, "--demo"], env={}) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split() == ["NODE", "HOSTNAME", "STATUS", "PRESENT", "OF", "POD",
                                           "SHARE", "WEIGHT"]
    assert "result: patched\n" in out and "(patched)" not in out
    # A static inventory (no pod watch, no spread guard) stays on the absolute scale, where the
    # baseline keeps the gap absolute.
    assert "floor 23 MiB" in out and "min(present, 1000 MiB)" in out and "--demo/--nodes" in out
    top = next(line for line in out.splitlines() if re.match(r"  weight +\d+:", line))
    top_weight = int(top.split()[1].rstrip(":"))
    assert f"holding nothing {100 - top_weight}, a gap of {top_weight}" in out

    # Weighted by share (live mode's default) the node holding all of this pod weighs 100.
    assert main(["explain", "--pod", path, "--demo", "--share", "1"], env={}) == 0
    out = capsys.readouterr().out
    assert "share of the pod's bytes the node holds" in out
    assert "already weighs 100, so no baseline term" in out


@pytest.mark.parametrize("output", ["table", "json"])
def test_explain_skipped_pod_shows_the_reason_and_no_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], output: str
) -> None:
    skipped = {**POD, "metadata": {**POD["metadata"],
                                   "labels": {"layer-locality.io/skip": "true"}}}
    assert main(["explain", "--pod", str(write(tmp_path, skipped)), "--demo",
                 "--output", output], env={}) == 0
    out = capsys.readouterr().out
    if output == "json":
        doc = orjson.loads(out)
        assert (doc["result"], doc["reason"], doc["patch"]) == ("skipped", "skip_label", [])
        assert all("weight" not in row for row in doc["nodes"])
    else:
        assert "WEIGHT" not in out and "weight" not in out
        assert "result: skipped (skip_label): labelled layer-locality.io/skip=true" in out


def test_explain_below_threshold_shows_bytes_but_no_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tiny = {**POD, "spec": {"containers": [{"name": "a", "image": "alpine:3.17"}]}}
    assert main(["explain", "--pod", str(write(tmp_path, tiny)), "--demo"], env={}) == 0
    out = capsys.readouterr().out
    assert "WEIGHT" not in out and "PRESENT" in out
    assert "result: skipped (below_threshold)" in out


def test_readme_curl_and_explain_show_the_same_pod_and_decision(
    capsys: pytest.CaptureFixture[str]
) -> None:
    """README quick start: curl posts examples/admission-review.json; `explain --demo --pod
    examples/pod.yaml` must describe that same pod and give the same patch."""
    examples = Path(__file__).resolve().parents[2] / "examples"
    review_doc = orjson.loads((examples / "admission-review.json").read_bytes())
    pod_doc = yaml.safe_load((examples / "pod.yaml").read_text())
    assert review_doc["request"]["object"] == pod_doc
    assert main(["explain", "--demo", "--pod", str(examples / "pod.yaml"), "--output", "json"],
                env={}) == 0
    explained = orjson.loads(capsys.readouterr().out)

    parts = build_parts(Settings(demo=True))
    mutator = Mutator(parts.sources, parts.inventory, Settings(demo=True).policy)
    outcome = asyncio.run(mutator.review(parse_review(orjson.dumps(review_doc))))
    assert outcome.result == "patched"
    by_explain = apply_patch(pod_doc, explained["patch"])
    by_mutate = apply_patch(pod_doc, list(outcome.patch))
    assert by_explain["spec"] == by_mutate["spec"]
    # The decisions differ only by their id (each review has its own).
    decisions = [orjson.loads(p["metadata"]["annotations"][DECISION_ANNOTATION])
                 for p in (by_explain, by_mutate)]
    for decision in decisions:
        decision.pop("id")
    assert decisions[0] == decisions[1]


def test_certs_prints_ca_bundle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["certs", "--out", str(tmp_path), "--print-ca-bundle"], env={}) == 0
    bundle = capsys.readouterr().out.strip()
    assert base64.b64decode(bundle) == (tmp_path / "ca.crt").read_bytes()


def test_errors_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--pod", str(write(tmp_path, POD)), "--nodes",
                 str(tmp_path / "missing.json")], env={}) == 2
    assert "cannot read nodes file" in capsys.readouterr().err
    missing = str(tmp_path / "no-kubeconfig")
    assert main(["explain", "--pod", str(write(tmp_path, POD)), "--kubeconfig", missing],
                env={}) == 2
    assert "cannot load cluster configuration" in capsys.readouterr().err


def test_explain_reproduces_the_seed_scenario(capsys: pytest.CaptureFixture[str]) -> None:
    """examples/seed: Img1 = L1,L2,L3 on n1; Img2 = L1,L2,L4 on n2; n3 empty; a new Img1 pod."""
    seed = Path(__file__).resolve().parents[2] / "examples" / "seed"
    assert main(["explain", "--nodes", str(seed / "nodes.json"), "--catalog",
                 str(seed / "catalog.json"), "--offline", "--pod", str(seed / "pod.yaml"),
                 "--output", "json"], env={}) == 0
    doc = orjson.loads(capsys.readouterr().out)
    catalog = orjson.loads((seed / "catalog.json").read_bytes())["images"]
    layers = {img["ref"].rsplit("/", 1)[1]: img["platforms"]["linux/amd64"]["layers"]
              for img in catalog}
    img1 = {x["digest"]: x["size"] for x in layers["img1:v1"]}
    img2 = {x["digest"] for x in layers["img2:v1"]}
    shared = sum(size for digest, size in img1.items() if digest in img2)
    rows = {r["node"]: r for r in doc["nodes"]}
    assert rows["n1"]["bytesPresent"] == sum(img1.values())
    assert rows["n2"]["bytesPresent"] == shared
    assert rows["n3"]["bytesPresent"] == 0
    assert rows["n1"]["weight"] > rows["n2"]["weight"] > rows["n3"]["weight"] == 0
    validate_pod(apply_patch(yaml.safe_load((seed / "pod.yaml").read_text()), doc["patch"]))


def test_every_option_of_every_command_has_help() -> None:
    import argparse

    from webhook.cli import _parser

    parser = _parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    for name, sub in commands.choices.items():
        missing = [a.option_strings for a in sub._actions
                   if a.option_strings and not a.help and a.dest != "help"]
        assert not missing, f"{name}: {missing}"


def test_explain_says_which_holdout_group(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "web", "namespace": "demo"},
                  "spec": {"template": {"metadata": {"labels": {"app": "web"}},
                                        "spec": POD["spec"]}}}
    path = str(write(tmp_path, deployment))
    # The pod explained belongs to the Deployment as its real pods would: the same group.
    assert workload_key(read_pod(Path(path))) == "demo/Deployment/web"
    assert main(["explain", "--pod", path, "--demo", "--holdout", "0.999"], env={}) == 0
    table = capsys.readouterr().out
    assert "holdout group: holdout" in table and "result: skipped (holdout)" in table
    assert "steered, it would prefer:" in table and "demo-python" in table
    assert main(["explain", "--pod", path, "--demo", "--holdout", "0.999", "--output", "json"],
                env={}) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert (doc["holdoutGroup"], doc["reason"]) == ("holdout", "holdout")
    patched = apply_patch(POD, doc["patch"])
    assert "affinity" not in patched["spec"]
    assert orjson.loads(patched["metadata"]["annotations"][DECISION_ANNOTATION])["group"] == \
        "holdout"
    assert main(["explain", "--pod", path, "--demo"], env={}) == 0
    assert "holdout group" not in capsys.readouterr().out  # off by default
    assert main(["explain", "--pod", path, "--demo", "--holdout", "0.999", "--exempt"],
                env={}) == 0
    exempt = capsys.readouterr().out
    assert "holdout group" not in exempt and "result: patched" in exempt


def test_a_multi_document_pod_file_is_one_clear_error(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`kubectl get ns,pod -o yaml`-style streams where one object belongs (explain's --pod,
    --nodes): one line naming the file and what it holds."""
    pod = yaml.safe_dump(POD)
    multi = tmp_path / "both.yaml"
    multi.write_text("apiVersion: v1\nkind: Namespace\nmetadata: {name: a}\n---\n" + pod)
    assert main(["explain", "--demo", "--pod", str(multi)], env={}) == 2
    err = capsys.readouterr().err
    assert err == (f"layer-locality: error: {multi}: 2 YAML documents (Namespace, Pod); "
                   "expected one Pod or workload: split the file or give the one object\n")
    assert main(["explain", "--nodes", str(multi), "--offline", "--pod",
                 str(write(tmp_path, POD))], env={}) == 2
    err = capsys.readouterr().err
    assert f"{multi}: 2 YAML documents (Namespace, Pod); expected one NodeList" in err
    assert err.count("\n") == 1


def test_explain_on_a_static_inventory_says_how_to_see_live_weights(
        capsys: pytest.CaptureFixture[str]) -> None:
    """The demo's share (0) differs from a live install's (1), and explain says why and how to
    see the live weights; with --share 1 the node holding the whole pod weighs 100."""
    pod = str(Path(__file__).resolve().parents[2] / "examples" / "pod.yaml")
    assert main(["explain", "--demo", "--pod", pod], env={}) == 0
    out = capsys.readouterr().out
    assert "share 0, the default for --demo/--nodes" in out and "--share 1 shows" in out
    assert main(["explain", "--demo", "--share", "1", "--pod", pod, "--output", "json"],
                env={}) == 0
    patched = apply_patch(read_pod(Path(pod)), orjson.loads(capsys.readouterr().out)["patch"])
    weights = weight_by_hostname(patched, ["demo-python", "demo-alpine"])
    assert weights == {"demo-python": 100, "demo-alpine": 0}  # no baseline: share 1, top 100


def test_serve_without_a_serving_pair_names_the_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`serve` away from a checkout's certs/ (or before `make certs`): the flag, the file and
    how to make a pair, before anything starts."""
    missing = tmp_path / "tls.crt"
    assert main(["serve", "--demo", "--listen", "127.0.0.1:1", "--tls-cert", str(missing),
                 "--tls-key", str(tmp_path / "tls.key")], env={}) == 2
    err = capsys.readouterr().err
    assert err == (f"layer-locality: error: --tls-cert {missing}: no such file; `make certs` "
                   "(or `layer-locality certs --out DIR`) writes a development pair\n")


def test_explain_says_where_layers_come_from_when_none_are_known(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """An image no source knows (offline, not in the catalog): the reason, and what would
    give its layers."""
    unknown = {**POD, "spec": {"containers": [{"name": "c",
                                               "image": "registry.example.com/team/app:1"}]}}
    assert main(["explain", "--demo", "--pod", str(write(tmp_path, unknown))], env={}) == 0
    out = capsys.readouterr().out
    assert "result: skipped (unresolved)" in out
    assert "--registry-allow" in out and "--catalog FILE" in out


def test_explain_a_bound_pod_names_the_cause_in_the_evaluations_words(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A pod the scheduler bound: explain reads its decision (the annotation's top list with
    siblings, its terms) and says where it went against the preference, and why: a top node
    is no loss; a node holding fewer of the workload's pods than the preferred one at the
    decision lost to the spreading score; otherwise the other scores."""
    assert main(["explain", "--pod", str(write(tmp_path, POD)), "--demo", "--output", "json"],
                env={}) == 0
    patched = apply_patch(POD, orjson.loads(capsys.readouterr().out)["patch"])
    decision = orjson.loads(patched["metadata"]["annotations"]["layer-locality.io/decision"])
    top = [entry["node"] for entry in decision["top"]]
    index = build_parts(Settings(demo=True)).inventory.index
    other = next(n.name for n in index.nodes() if n.name not in top)

    def explained(node: str, siblings: list[int] | None) -> dict[str, object]:
        bound = orjson.loads(orjson.dumps(patched))
        bound["spec"]["nodeName"] = node
        if siblings is not None:  # as a live decision records them
            doc = dict(decision, top=[dict(e, siblings=s)
                                      for e, s in zip(decision["top"], siblings, strict=False)])
            bound["metadata"]["annotations"]["layer-locality.io/decision"] = \
                orjson.dumps(doc).decode()
        assert main(["explain", "--pod", str(write(tmp_path, bound)), "--demo", "--output",
                     "json"], env={}) == 0
        out: dict[str, object] = orjson.loads(capsys.readouterr().out)
        return out

    assert explained(top[0], None)["cause"] == ""  # where it was preferred most
    assert explained(other, None)["cause"] == "resources"  # nothing tells spreading
    assert len(top) > 1  # the demo's decision names a partial holder too
    went = explained(top[1], [2, 0, 0][:len(top)])
    assert (went["cause"], went["preferred"], went["node"]) == ("spread-score", top[0], top[1])
    assert main(["explain", "--pod", str(write(tmp_path, {**patched, "spec": {
        **patched["spec"], "nodeName": top[0]}})), "--demo"], env={}) == 0
    assert f"bound to {top[0]}" in capsys.readouterr().out
