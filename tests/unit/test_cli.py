"""The command line: explain on the demo inventory, certs, errors."""

from __future__ import annotations

import base64
from pathlib import Path

import orjson
import pytest
import yaml

from tests.helpers import apply_patch, validate_pod
from webhook.cli import main
from webhook.config import Settings
from webhook.scoring import weight_for
from webhook.wiring import build_parts

POD = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "demo"},
       "spec": {"containers": [{"name": "app", "image": "python:3.11-slim"}]}}


def write(tmp_path: Path, obj: object) -> Path:
    path = tmp_path / "obj.yaml"
    path.write_text(yaml.safe_dump(obj))
    return path


def test_explain_json_matches_the_patch(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["explain", "--pod", str(write(tmp_path, POD)), "--demo", "--output", "json"],
                env={}) == 0
    doc = orjson.loads(capsys.readouterr().out)
    assert doc["result"] == "patched"
    patched = apply_patch(POD, doc["patch"])
    validate_pod(patched)
    policy = Settings().policy
    index = build_parts(Settings(demo=True)).inventory.index
    assert {r["node"] for r in doc["nodes"]} == {n.name for n in index.nodes()}
    for row in doc["nodes"]:
        if row["status"] == "ok":
            assert row["weight"] == weight_for(row["bytesPresent"], policy)
        else:
            assert row["weight"] == 0


def test_explain_table_and_workloads(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    deployment = {"apiVersion": "apps/v1", "kind": "Deployment",
                  "metadata": {"name": "web", "namespace": "demo"},
                  "spec": {"template": {"metadata": {"labels": {"app": "web"}},
                                        "spec": POD["spec"]}}}
    assert main(["explain", "--pod", str(write(tmp_path, deployment)), "--demo"], env={}) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0].split()[:3] == ["NODE", "HOSTNAME", "STATUS"]
    assert "result: patched" in out
    assert "baseline" in out


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
