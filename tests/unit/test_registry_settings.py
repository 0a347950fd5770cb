"""Registry settings at start-up: the optional credentials mount."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from webhook.config import ConfigError, Settings
from webhook.serving.wiring import build_resolver


def test_absent_credentials_file_means_anonymous(tmp_path: Path) -> None:
    # The Deployment mounts the credentials Secret as optional: no Secret, no file.
    resolver = build_resolver(Settings(registry_auth=str(tmp_path / "missing.json")))
    asyncio.run(resolver.close())


def test_unreadable_credentials_file_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read registry credentials"):
        build_resolver(Settings(registry_auth=str(bad)))
