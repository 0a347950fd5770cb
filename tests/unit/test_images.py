"""Image reference grammar and normalisation (distribution/reference semantics)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.core.images import ImageRefError, parse_image

HEX = "a" * 64


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("nginx", "docker.io/library/nginx:latest"),
        ("nginx:1.23", "docker.io/library/nginx:1.23"),
        ("library/nginx", "docker.io/library/nginx:latest"),
        ("docker.io/nginx", "docker.io/library/nginx:latest"),
        ("index.docker.io/library/nginx:1", "docker.io/library/nginx:1"),
        ("bitnami/redis:7", "docker.io/bitnami/redis:7"),
        ("ghcr.io/org/app:v1.2.3", "ghcr.io/org/app:v1.2.3"),
        ("localhost/app", "localhost/app:latest"),
        ("localhost:5000/app:dev", "localhost:5000/app:dev"),
        ("registry.example.com:5000/team/app", "registry.example.com:5000/team/app:latest"),
        (f"nginx@sha256:{HEX}", f"docker.io/library/nginx@sha256:{HEX}"),
        (f"nginx:1.23@sha256:{HEX}", f"docker.io/library/nginx:1.23@sha256:{HEX}"),
        ("127.0.0.1:5000/a/b/c:x", "127.0.0.1:5000/a/b/c:x"),
        ("[::1]:5000/app:1", "[::1]:5000/app:1"),
        ("a__b/c-d.e:t_1", "docker.io/a__b/c-d.e:t_1"),
    ],
)
def test_normalises(text: str, expected: str) -> None:
    assert str(parse_image(text)) == expected


@pytest.mark.parametrize(
    "text",
    [
        "",
        " nginx",
        "Nginx",  # uppercase repository
        "docker.io/Library/nginx",
        "nginx:",
        "nginx:-bad",
        "nginx@sha256:short",
        "nginx@md5:" + HEX,
        "ghcr.io/",
        "a//b",
        "nginx:" + "t" * 129,
        "x/" + "a" * 260,
        "-leading/dash",
    ],
)
def test_rejects(text: str) -> None:
    with pytest.raises(ImageRefError):
        parse_image(text)


def test_digest_only_reference_has_no_tag() -> None:
    ref = parse_image(f"ghcr.io/org/app@sha256:{HEX}")
    assert ref.tag is None and ref.tagged is None and ref.digest == f"sha256:{HEX}"


# No "." in components: a dotted first component is a registry host by definition.
_component = st.from_regex(r"[a-z0-9]{1,8}(?:(?:_|__|-+)[a-z0-9]{1,8}){0,2}", fullmatch=True)
_tag = st.from_regex(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,20}", fullmatch=True)
_registry = st.sampled_from(["", "docker.io/", "ghcr.io/", "localhost:5000/", "r.example.com/"])


@given(_registry, st.lists(_component, min_size=1, max_size=3), st.none() | _tag)
def test_normal_form_is_a_fixed_point(registry: str, path: list[str], tag: str | None) -> None:
    text = registry + "/".join(path) + (f":{tag}" if tag else "")
    ref = parse_image(text)
    assert parse_image(str(ref)) == ref
    assert ref.tag == (tag or "latest")


# distribution/reference normalize.go splitDockerDomain: a first component (with more after it)
# is a registry host if it is "localhost", contains "." or ":", or is not all lowercase
# ("uppercase namespaces are not allowed, so ... we assume it to be a domain-name"). Cases
# from its normalize_test.go (TestParseRepositoryInfo, TestValidateReferenceName,
# TestNormalizedSplitHostname).
@pytest.mark.parametrize(
    ("text", "registry", "repository"),
    [
        ("Foo/bar", "Foo", "bar"),
        ("FOO/bar", "FOO", "bar"),
        ("Docker/docker", "Docker", "docker"),
        ("DOCKER/docker:1", "DOCKER", "docker"),
        ("Registry/team/app", "Registry", "team/app"),
        ("fOO/bar", "fOO", "bar"),
        # all lowercase without '.' or ':': a Docker Hub namespace, not a host
        ("test_com/foo", "docker.io", "test_com/foo"),
        ("foo/bar", "docker.io", "foo/bar"),
        ("test-com:8080/foo", "test-com:8080", "foo"),
        ("xn--n3h.com/foo", "xn--n3h.com", "foo"),
    ],
)
def test_first_component_registry_rule(text: str, registry: str, repository: str) -> None:
    ref = parse_image(text)
    assert (ref.registry, ref.repository) == (registry, repository)


@pytest.mark.parametrize(
    "text",
    [
        "Foo",  # a single component is always a Hub repository, which must be lowercase
        "Foo:1",
        "Foo/Bar",  # the host part may have capitals, the repository may not
        "docker/Docker",
        "Foo_bar/app",  # a host, and '_' is not allowed in a host name
    ],
)
def test_uppercase_repository_rejected(text: str) -> None:
    with pytest.raises(ImageRefError):
        parse_image(text)


_upper_host = st.from_regex(r"[A-Z][A-Za-z0-9]{0,7}", fullmatch=True)


@given(_upper_host, st.lists(_component, min_size=1, max_size=2))
def test_uppercase_first_component_is_the_registry(host: str, path: list[str]) -> None:
    ref = parse_image(f"{host}/{'/'.join(path)}")
    assert (ref.registry, ref.repository, ref.tag) == (host, "/".join(path), "latest")
