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
