"""Image reference grammar and normalisation (distribution/reference semantics)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from webhook.core.images import ImageRefError, is_digest, parse_image, try_parse

HEX = "a" * 64


@pytest.fixture(autouse=True)
def _parse_afresh() -> Iterator[None]:
    """parse_image is memoised: every test here parses its references afresh, not from what
    an earlier test (or an earlier run in the same process) left in the cache."""
    parse_image.cache_clear()
    yield
    parse_image.cache_clear()


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
        ("my.app:1", "docker.io/library/my.app:1"),  # no "/": never a registry
        ("localhost:5000", "docker.io/library/localhost:5000"),  # a repository and its tag
        ("INDEX.DOCKER.IO/nginx", "docker.io/library/nginx:latest"),  # hosts: any case
        ("Docker.IO/team/app:2", "docker.io/team/app:2"),
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


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # the first "@" starts the digest: a second one makes the digest invalid
        (f"app@sha256:{HEX}@sha256:{HEX}",
         f"invalid image reference 'app@sha256:{HEX}@sha256:{HEX}': bad digest "
         f"'sha256:{HEX}@sha256:{HEX}'"),
        ("app@latest", "invalid image reference 'app@latest': bad digest 'latest'"),
        # a ":" before the last "/" belongs to the registry, so "a:b" is a path component
        ("host.io/a:b/c", "invalid image reference 'host.io/a:b/c': bad path component 'a:b'"),
        ("app:-x", "invalid image reference: bad tag '-x'"),
        ("bad_host.io/app", "invalid image reference: bad registry 'bad_host.io'"),
        ("example.com/", "invalid image reference: empty repository"),
        ("", "invalid image reference '': empty or padded"),
        ("app ", "invalid image reference 'app ': empty or padded"),
        ("App", "invalid image reference 'App': repository must be lowercase"),
    ],
)
def test_rejection_says_why(text: str, message: str) -> None:
    with pytest.raises(ImageRefError) as raised:
        parse_image(text)
    assert str(raised.value) == message


def test_a_name_of_255_characters_is_the_longest() -> None:
    """registry, "/" and repository: 255 characters in all (distribution's NameTotalLengthMax)."""
    longest = "docker.io/library/" + "a" * (255 - len("docker.io/library/"))
    assert parse_image(longest.removeprefix("docker.io/library/")).name == longest
    with pytest.raises(ImageRefError, match="name longer than 255"):
        parse_image(longest.removeprefix("docker.io/library/") + "a")


def test_try_parse_answers_none_for_an_invalid_reference() -> None:
    assert try_parse("nginx:1") == parse_image("docker.io/library/nginx:1")
    assert try_parse("Nginx") is None


@pytest.mark.parametrize(
    ("value", "expected"),
    [(f"sha256:{HEX}", True), (f"sha512:{HEX * 2}", True), (f"sha256:{HEX}0", False),
     (f"sha256:{HEX.upper()}", False), (f"md5:{HEX}", False), ("", False)],
)
def test_is_digest(value: str, expected: bool) -> None:
    assert is_digest(value) is expected


def test_a_tag_is_kept_beside_a_digest() -> None:
    ref = parse_image(f"ghcr.io/org/app:v1@sha256:{HEX}")
    assert (ref.tag, ref.digest, ref.tagged) == ("v1", f"sha256:{HEX}", "ghcr.io/org/app:v1")


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
