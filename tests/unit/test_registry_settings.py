"""Registry settings at start-up: the optional credentials mount."""

from __future__ import annotations

import asyncio
import base64
import logging
from pathlib import Path
from typing import Any

import orjson
import pytest

from webhook.config import ConfigError, Settings
from webhook.registry.auth import BasicCredentials
from webhook.registry.client import RegistryClient
from webhook.serving import wiring
from webhook.serving.wiring import build_resolver


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, BasicCredentials]]:
    """The credentials each RegistryClient that build_resolver makes is given."""
    given: list[dict[str, BasicCredentials]] = []
    real = RegistryClient

    def recording(policy: Any, credentials: Any, **kwargs: Any) -> Any:
        given.append(dict(credentials))
        return real(policy, credentials, **kwargs)

    monkeypatch.setattr(wiring, "RegistryClient", recording)
    return given


def test_absent_credentials_file_means_anonymous(
    tmp_path: Path, clients: list[dict[str, BasicCredentials]],
    caplog: pytest.LogCaptureFixture,
) -> None:
    # The Deployment mounts the credentials Secret as optional: no Secret, no file.
    missing = tmp_path / "missing.json"
    with caplog.at_level(logging.INFO, logger=wiring.__name__):
        resolver = build_resolver(Settings(registry_auth=str(missing)))
    asyncio.run(resolver.close())
    assert clients == [{}]  # no credentials: every registry is pulled from anonymously
    assert f"no registry credentials at {missing}" in caplog.text


def test_a_credentials_file_gives_each_registry_its_credentials(
    tmp_path: Path, clients: list[dict[str, BasicCredentials]],
) -> None:
    path = tmp_path / "config.json"
    path.write_bytes(orjson.dumps({"auths": {
        "https://index.docker.io/v1/": {"auth": base64.b64encode(b"hub:secret").decode()},
        "registry.example.com:5000": {"username": "ci", "password": "p:w"}}}))
    resolver = build_resolver(Settings(registry_auth=str(path)))
    asyncio.run(resolver.close())
    assert clients == [{"docker.io": BasicCredentials("hub", "secret"),
                        "registry.example.com:5000": BasicCredentials("ci", "p:w")}]


def test_unreadable_credentials_file_is_an_error(tmp_path: Path) -> None:
    bad = tmp_path / "config.json"
    bad.write_text("{not json")
    with pytest.raises(ConfigError, match="cannot read registry credentials"):
        build_resolver(Settings(registry_auth=str(bad)))
