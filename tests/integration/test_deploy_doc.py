"""docs/deploy.md: the commands it gives name real paths (examples/, the overlays, scripts/)
and mention the labels and settings a user needs; its shell blocks parse (`bash -n`, shlex)."""

from __future__ import annotations

import re
import shlex
import subprocess
from collections.abc import Iterator

from tests.integration.manifests_fixture import ENABLED_LABEL, REPO, SKIP_LABEL


def test_deploy_doc_commands_use_real_paths() -> None:
    doc = (REPO / "docs" / "deploy.md").read_text()
    assert "kubectl apply --dry-run=server -f examples/pod.yaml -o yaml" in doc
    for needle in (
        "percentageOfNodesToScore",
        "nodeStatusMaxImages",
        "layer-locality.io/decision",
        ENABLED_LABEL,
        SKIP_LABEL,
    ):
        assert needle in doc, needle
    for path in set(re.findall(r"(?:examples|manifests/overlays|scripts)/[\w./-]*\w", doc)):
        if "/generated" not in path:  # made by scripts/render-ca-patch.sh, git-ignored
            assert (REPO / path).exists(), path


def _iter_shell_lines(doc: str) -> Iterator[str]:
    for block in re.findall(r"```(?:sh|bash|shell)\n(.*?)```", doc, flags=re.S):
        yield from (line for line in block.splitlines() if line.strip())


def test_deploy_doc_shell_blocks_parse() -> None:
    doc = (REPO / "docs" / "deploy.md").read_text()
    text = "\n".join(_iter_shell_lines(doc))
    result = subprocess.run(["bash", "-n"], input=text, capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    for line in _iter_shell_lines(doc):
        shlex.split(line, comments=True)
