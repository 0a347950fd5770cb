"""The README stays true: every setting is documented where the README says it is."""

from __future__ import annotations

from pathlib import Path

from webhook.config import OPTIONS

ROOT = Path(__file__).resolve().parents[2]


def test_every_flag_is_documented() -> None:
    text = (ROOT / "README.md").read_text() + (ROOT / "docs" / "registry.md").read_text()
    missing = [o.flag for o in OPTIONS if f"`{o.flag}" not in text]
    assert not missing, f"undocumented settings: {missing}"


def test_quick_start_commands_exist() -> None:
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for target in ("run", "test", "bench", "deploy", "undeploy", "image", "image-push"):
        assert f"\n{target}:" in makefile, target
    assert "make run" in readme
    assert "make test" in readme
    assert (ROOT / "examples" / "admission-review.json").exists()
