"""Pure parsing of registry inputs: WWW-Authenticate, Docker config.json, token answers,
manifests; the registry settings (list options)."""

from __future__ import annotations

import base64
import contextlib
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.config import ConfigError
from webhook.core.layers import Layer, Platform
from webhook.registry.auth import (
    AuthError,
    TokenCache,
    normalise_registry_key,
    parse_challenges,
    parse_docker_config,
    token_from_answer,
)
from webhook.registry.manifest import (
    DOCKER_LIST,
    OCI_MANIFEST,
    ManifestError,
    config_platform,
    parse_manifest,
    verify,
)
from webhook.settings_load import load_settings

D = "sha256:" + "a" * 64
E = "sha256:" + "b" * 64


def test_docker_hub_challenge() -> None:
    header = ('Bearer realm="https://auth.docker.io/token",service="registry.docker.io",'
              'scope="repository:library/python:pull"')
    [challenge] = parse_challenges(header)
    assert challenge.scheme == "bearer"
    assert challenge.realm == "https://auth.docker.io/token"
    assert challenge.params["service"] == "registry.docker.io"
    assert challenge.params["scope"] == "repository:library/python:pull"


def test_several_challenges_and_escapes() -> None:
    header = 'Basic realm="a \\"quoted\\" realm", Bearer realm=https://t/x, error=invalid_token'
    basic, bearer = parse_challenges(header)
    assert basic.scheme == "basic" and basic.realm == 'a "quoted" realm'
    assert bearer.realm == "https://t/x" and bearer.params["error"] == "invalid_token"


safe_text = st.text(st.characters(exclude_characters='"\\', exclude_categories=["Cs"]),
                    max_size=30)


@given(realm=safe_text, service=safe_text, scope=safe_text)
def test_quoted_params_round_trip(realm: str, service: str, scope: str) -> None:
    header = f'Bearer realm="{realm}", service="{service}", scope="{scope}"'
    [challenge] = parse_challenges(header)
    assert challenge.params == {"realm": realm, "service": service, "scope": scope}


@given(st.text(max_size=200))
def test_parser_never_raises(header: str) -> None:
    for challenge in parse_challenges(header):
        assert challenge.scheme


def test_docker_config() -> None:
    raw = {"auths": {
        "https://index.docker.io/v1/": {"auth": base64.b64encode(b"me:pw:with:colons").decode()},
        "ghcr.io": {"username": "u", "password": "p"},
        "http://127.0.0.1:5000/v2/": {"auth": base64.b64encode(b"a:b").decode()},
        "quay.io": {},
    }}
    creds = parse_docker_config(raw)
    assert set(creds) == {"docker.io", "ghcr.io", "127.0.0.1:5000"}
    assert creds["docker.io"].password == "pw:with:colons"
    assert "pw" not in repr(creds["docker.io"])
    assert creds["ghcr.io"].header() == "Basic " + base64.b64encode(b"u:p").decode()
    with pytest.raises(AuthError):
        parse_docker_config({"auths": {"x": {"auth": "!!!"}}})
    with pytest.raises(AuthError):
        parse_docker_config([])
    assert normalise_registry_key("registry-1.docker.io") == "docker.io"


def test_token_answers_and_cache() -> None:
    assert token_from_answer({"token": "t", "expires_in": 300}, 0.0) == ("t", 270.0)
    assert token_from_answer({"access_token": "a"}, 0.0)[0] == "a"
    assert token_from_answer({"token": "t", "expires_in": 1}, 0.0)[1] == 9.0  # at least 10 s
    with pytest.raises(AuthError):
        token_from_answer({"expires_in": 3}, 0.0)
    now = [0.0]
    cache = TokenCache(clock=lambda: now[0])
    cache.put(("h", "s", "x"), "tok", 10.0)
    assert cache.get(("h", "s", "x")) == "tok"
    now[0] = 10.0
    assert cache.get(("h", "s", "x")) is None


def manifest_bytes(doc: dict[str, object]) -> bytes:
    return json.dumps(doc).encode()


def test_manifest_kinds() -> None:
    index = parse_manifest(manifest_bytes({
        "schemaVersion": 2, "mediaType": DOCKER_LIST,
        "manifests": [
            {"digest": D, "mediaType": OCI_MANIFEST,
             "platform": {"os": "linux", "architecture": "arm64", "variant": "v8"}},
            {"digest": E, "mediaType": OCI_MANIFEST,
             "platform": {"os": "unknown", "architecture": "unknown"}},
        ],
    }))
    assert index.is_index
    assert [e.platform for e in index.entries] == [Platform("linux", "arm64"), None]
    image = parse_manifest(manifest_bytes({
        "schemaVersion": 2, "config": {"digest": D, "size": 3},
        "layers": [{"digest": E, "size": 42}],
    }))
    assert image.media_type == OCI_MANIFEST and image.layers == (Layer(E, 42),)
    assert image.config_digest == D


@pytest.mark.parametrize("doc", [
    {"schemaVersion": 1, "fsLayers": []},
    {"schemaVersion": 2, "mediaType": "application/vnd.docker.distribution.manifest.v1+json"},
    {"schemaVersion": 2, "layers": [{"digest": "sha256:short", "size": 1}]},
    {"schemaVersion": 2, "layers": [{"digest": D, "size": -1}]},
    {"schemaVersion": 2, "layers": [{"digest": D, "size": True}]},
    {"schemaVersion": 2, "mediaType": "application/x-other"},
    {"schemaVersion": 2},
    [],
])
def test_bad_manifests(doc: object) -> None:
    with pytest.raises(ManifestError):
        parse_manifest(json.dumps(doc).encode())


@given(st.binary(max_size=300))
def test_garbage_is_a_manifest_error(body: bytes) -> None:
    with contextlib.suppress(ManifestError):
        parse_manifest(body)


def test_verify_and_config_platform() -> None:
    body = b'{"os":"linux","architecture":"arm","variant":"v7"}'
    import hashlib

    assert verify(body, "sha256:" + hashlib.sha256(body).hexdigest())
    assert not verify(body + b" ", "sha256:" + hashlib.sha256(body).hexdigest())
    assert not verify(body, "md5:" + "0" * 32)
    assert config_platform(body) == Platform("linux", "arm", "v7")
    assert config_platform(b"nope") is None


def test_registry_list_settings() -> None:
    env = {"LAYER_LOCALITY_REGISTRY_ALLOW": "a.example, *.b.example",
           "LAYER_LOCALITY_REGISTRY_MIRROR": "docker.io=m.local:5000"}
    settings = load_settings({}, env)
    assert settings.registry_allow == ("a.example", "*.b.example")
    assert settings.registry_mirror == ("docker.io=m.local:5000",)
    flags = {"registry_insecure": ["127.0.0.1:5000", "h:1"], "registry_allow": ["c.example"]}
    settings = load_settings(flags, env)
    assert settings.registry_insecure == ("127.0.0.1:5000", "h:1")
    assert settings.registry_allow == ("c.example",)  # flags replace env, as for every option
    for bad in ({"registry_insecure": ["nohostport"]}, {"registry_mirror": ["x"]},
                {"registry_concurrency": "0"}):
        with pytest.raises(ConfigError):
            load_settings(bad, {})
