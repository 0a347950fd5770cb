"""`layer-locality cluster up --kubelets N` and `cluster exec` refuse what they cannot do, with
one clear line and no namespace, process or file made (nothing here needs root or binaries:
each refusal comes before any of that)."""

from __future__ import annotations

from pathlib import Path

import pytest

from webhook.cli import main
from webhook.devcluster.realnodes.network import MAX_NODES


@pytest.mark.parametrize("count", ["-1", str(MAX_NODES + 1)])
def test_a_node_count_out_of_range_is_refused(count: str, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["cluster", "up", "--dir", str(tmp_path / "c"), "--bin-dir", str(tmp_path),
                 "--node-bin", str(tmp_path), "--kubelets", count], env={})
    assert code == 1
    assert f"--kubelets must be within 1..{MAX_NODES}" in capsys.readouterr().err
    assert not (tmp_path / "c").exists()


def test_in_cluster_install_needs_real_nodes(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["cluster", "up", "--dir", str(tmp_path / "c"), "--bin-dir", str(tmp_path),
                 "--install", "in-cluster", "--helm-bin", str(tmp_path)], env={})
    assert code == 1
    assert "--install in-cluster needs real nodes (--kubelets N)" in capsys.readouterr().err


def test_exec_without_a_cluster_says_so(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["cluster", "exec", "--dir", str(tmp_path), "--", "true"], env={})
    assert code == 1
    assert "no cluster with real nodes runs from" in capsys.readouterr().err
