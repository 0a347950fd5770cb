"""The caller checks' pure parts: certificate names, the refusal window and log throttle, bearer
tokens, and the token authorizer's cache, bounds and failure answers (with reviews faked)."""

from __future__ import annotations

import asyncio
import ssl
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Clock
from webhook.access.clientcert import ClientPolicy, PeerLog, RefusalWindow, describe, peer_names
from webhook.access.tokens import (
    MAX_TOKEN_CHARS,
    ReviewUnavailable,
    TokenAuthorizer,
    User,
    bearer_token,
)
from webhook.config import ConfigError
from webhook.serving.serving import certificate_refused
from webhook.settings_load import load_settings


def cert(cn: str | None = None, *dns: str, ip: str | None = None) -> dict[str, Any]:
    subject = ((("organizationName", "system:masters"),),) + (
        ((("commonName", cn),),) if cn else ())
    sans = tuple(("DNS", d) for d in dns) + ((("IP Address", ip),) if ip else ())
    return {"subject": subject, "subjectAltName": sans}


def test_a_certificate_names_its_common_name_and_dns_sans_only() -> None:
    assert peer_names(cert("kube-apiserver", "api.example", ip="198.18.0.1")) == {
        "kube-apiserver", "api.example"}
    assert peer_names({}) == frozenset()


@pytest.mark.parametrize(("peercert", "verdict"), [
    (None, "no_certificate"),
    ({}, "no_certificate"),  # what ssl gives for a connection that presented none
    (cert("kube-apiserver"), "ok"),
    (cert("other", "kube-apiserver"), "ok"),
    (cert("kube-apiserver-kubelet-client"), "wrong_name"),
    (cert(None, ip="198.18.0.1"), "wrong_name"),
    (cert("KUBE-APISERVER"), "wrong_name"),  # names are compared exactly
])
def test_the_policy_verdict(peercert: dict[str, Any] | None, verdict: str) -> None:
    assert ClientPolicy(frozenset({"kube-apiserver"})).verdict(peercert) == verdict


def test_a_refused_certificate_is_described_briefly() -> None:
    assert describe(None) == "no client certificate"
    many = cert("a" * 500, *(f"n{i}" for i in range(10)))
    text = describe(many)
    assert "(+7 more)" in text and len(text) < 200


def test_the_peer_log_says_once_a_minute_per_peer_and_forgets_the_oldest() -> None:
    log = PeerLog(seconds=60, peers=2)
    assert log.due("a", now=0) and not log.due("a", now=59) and log.due("a", now=60)
    assert log.due("b", now=61) and log.due("c", now=62)  # "a" forgotten: bounded
    assert len(log._last) == 2
    assert log.due("a", now=63)


def test_the_refusal_window_warns_only_while_nothing_was_accepted() -> None:
    window = RefusalWindow(seconds=300)
    assert window.warning(now=1000) is None
    window.refused("wrong_name", now=1000)
    window.refused("wrong_name", now=1001)
    window.refused("handshake", now=1002)
    warning = window.warning(now=1003)
    assert warning is not None and "2 wrong_name" in warning and "1 handshake" in warning
    window.accepted(now=1004)
    assert window.warning(now=1005) is None
    window.refused("wrong_name", now=1200)
    assert window.warning(now=1250) is None  # accepted 246 s ago: the API server gets through
    # The accept is over 300 s old, the last refusal is not; the old ones left the window
    # (counted by the minute: the bucket of 1200-1259 is the one left).
    assert "(1 wrong_name)" in (window.warning(now=1370) or "")
    assert window.warning(now=1560) is None  # and that one is old too
    for _ in range(10_000):  # bounded, whatever the rate
        window.refused("no_certificate", now=1600)
    assert sum(len(b) for b in window._refused.values()) <= 12


@pytest.mark.parametrize(("header", "token"), [
    (None, None),
    ("Bearer abc.def-ghi_", "abc.def-ghi_"),
    ("bearer  abc ", "abc"),
    ("Basic dXNlcjpwYXNz", False),
    ("Bearer", False),
    ("Bearer a b", False),
    ("Bearer caf\u00e9", False),
    ("Bearer a\x00b", False),
    ("Bearer " + "x" * (MAX_TOKEN_CHARS + 1), False),
])
def test_bearer_tokens(header: str | None, token: str | bool | None) -> None:
    assert bearer_token(header) == token


class FakeReviews:
    """Tokens "good" (allowed), "reader-denied" (authenticated, not allowed), "down" (the API
    server does not answer); anything else is not authenticated. Counts the reviews made."""

    def __init__(self, gate: threading.Event | None = None) -> None:
        self.authentications = 0
        self.gate = gate

    def authenticate(self, token: str) -> User | None:
        self.authentications += 1
        if self.gate is not None:
            self.gate.wait(10)
        if token == "down":
            raise ReviewUnavailable("503")
        return User(token) if token in ("good", "reader-denied") else None

    def allowed(self, user: User, path: str, verb: str) -> bool:
        return user.name == "good" and (path, verb) == ("/metrics", "get")




async def test_answers_are_cached_for_their_time_and_outages_are_not() -> None:
    reviews, clock = FakeReviews(), Clock()
    authorizer = TokenAuthorizer(reviews, allow_seconds=60, deny_seconds=10, clock=clock)
    try:
        assert await authorizer.check(None, "/metrics") == "no_token"
        assert await authorizer.check("Basic x", "/metrics") == "malformed"
        assert reviews.authentications == 0  # refused without asking the API server
        assert await authorizer.check("Bearer good", "/metrics") == "ok"
        assert await authorizer.check("Bearer good", "/metrics") == "ok"
        assert reviews.authentications == 1
        assert await authorizer.check("Bearer good", "/other") == "forbidden"  # per path
        assert await authorizer.check("Bearer reader-denied", "/metrics") == "forbidden"
        assert await authorizer.check("Bearer stranger", "/metrics") == "unauthenticated"
        assert await authorizer.check("Bearer down", "/metrics") == "unavailable"
        assert await authorizer.check("Bearer down", "/metrics") == "unavailable"
        assert reviews.authentications == 6  # the outage asked twice: not cached
        clock.now = 11  # denials expire first
        assert await authorizer.check("Bearer stranger", "/metrics") == "unauthenticated"
        assert await authorizer.check("Bearer good", "/metrics") == "ok"
        assert reviews.authentications == 7
        clock.now = 61  # then the allowed token is asked again (a deleted account stops)
        assert await authorizer.check("Bearer good", "/metrics") == "ok"
        assert reviews.authentications == 8
    finally:
        authorizer.close()


async def test_the_cache_is_bounded_and_keeps_what_is_used() -> None:
    reviews = FakeReviews()
    authorizer = TokenAuthorizer(reviews, entries=3)
    try:
        assert await authorizer.check("Bearer good", "/metrics") == "ok"
        for i in range(10):
            assert await authorizer.check(f"Bearer t{i}", "/metrics") == "unauthenticated"
            assert await authorizer.check("Bearer good", "/metrics") == "ok"  # used: kept
        assert len(authorizer._cache) == 3
        assert reviews.authentications == 11  # "good" was reviewed once
    finally:
        authorizer.close()


async def test_a_flood_of_tokens_waits_in_a_bounded_line() -> None:
    gate = threading.Event()
    reviews = FakeReviews(gate)
    authorizer = TokenAuthorizer(reviews, concurrency=2, queue=4)
    try:
        waiting = [asyncio.create_task(authorizer.check(f"Bearer t{i}", "/metrics"))
                   for i in range(4)]
        await asyncio.sleep(0.05)
        # The line is full: the next ones are turned away at once, with no review.
        assert [await authorizer.check(f"Bearer x{i}", "/metrics") for i in range(5)] == [
            "busy"] * 5
        gate.set()
        assert await asyncio.gather(*waiting) == ["unauthenticated"] * 4
        assert reviews.authentications == 4
        assert await authorizer.check("Bearer good", "/metrics") == "ok"  # room again
    finally:
        authorizer.close()


def test_certificate_failures_are_told_from_other_handshake_errors() -> None:
    assert certificate_refused(ssl.SSLCertVerificationError("certificate verify failed"))
    peer = ssl.SSLError(1, "tlsv1 alert")
    peer.reason = "PEER_DID_NOT_RETURN_A_CERTIFICATE"
    assert certificate_refused(peer)
    other = ssl.SSLError(1, "wrong version")
    other.reason = "WRONG_VERSION_NUMBER"
    assert not certificate_refused(other)
    # The client refused *our* certificate (Go's alert for a wrong name or an expired one):
    # not a refusal of the caller's.
    alert = ssl.SSLError(1, "sslv3 alert bad certificate")
    alert.reason = "SSLV3_ALERT_BAD_CERTIFICATE"
    assert not certificate_refused(alert)
    assert not certificate_refused(ConnectionResetError())


@pytest.mark.parametrize(("values", "message"), [
    ({"metrics_auth": "kubernetes"}, "needs metrics_listen"),
    ({"metrics_auth": "tokens"}, "give kubernetes or none"),
    ({"metrics_listen": "0.0.0.0:8443"}, "must differ"),
    ({"metrics_listen": "nowhere"}, "HOST:PORT"),
    ({"client_ca": "ca.crt", "client_names": ""}, "at least one client name"),
    ({"client_names": "a b"}, "no spaces"),
])
def test_settings_of_the_caller_checks_are_checked(values: dict[str, str],
                                                   message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        load_settings(values, {})


def test_settings_of_the_caller_checks_from_the_environment() -> None:
    settings = load_settings({}, {"LAYER_LOCALITY_CLIENT_CA": "/ca.crt",
                                  "LAYER_LOCALITY_CLIENT_NAMES": "kube-apiserver,front-proxy",
                                  "LAYER_LOCALITY_METRICS_LISTEN": ":8081",
                                  "LAYER_LOCALITY_METRICS_AUTH": "kubernetes"})
    assert settings.client_names == ("kube-apiserver", "front-proxy")
    assert settings.metrics_address == ("0.0.0.0", 8081)
    assert load_settings({}, {}).client_names == ("kube-apiserver",)
    assert load_settings({}, {}).metrics_address is None


@pytest.mark.parametrize(("status", "text", "said"), [
    (200, "ready\n", []),
    (200, "ready\nwarning: admission calls refused (3 wrong_name)\n",
     ["admission calls refused (3 wrong_name)"]),
    (503, "inventory not synced\n", ["not ready (503): inventory not synced"]),
    (503, "", ["not ready (503): no reason given"]),
])
def test_explain_repeats_what_the_webhooks_readyz_warns(status: int, text: str,
                                                        said: list[str]) -> None:
    from webhook.cli.webhookhealth import warnings_of

    assert warnings_of(status, text) == said


def test_an_empty_client_ca_never_turns_the_check_off(tmp_path: Path) -> None:
    from webhook.serving.certs import generate
    from webhook.serving.tls import ServingCertificate

    files = generate("layer-locality", "layer-locality", tmp_path / "certs", days=1)
    empty = tmp_path / "client-ca.crt"
    empty.write_text("\n")
    with pytest.raises(ssl.SSLError, match="empty"):
        ServingCertificate(files.cert, files.key, empty)
    empty.write_bytes(files.ca_cert.read_bytes())
    served = ServingCertificate(files.cert, files.key, empty)
    assert served.context.verify_mode == ssl.CERT_OPTIONAL
    empty.write_text("")  # emptied while serving: the reload fails, the check stays
    with pytest.raises(ssl.SSLError, match="empty"):
        served.reload_if_changed()
    assert served.context.verify_mode == ssl.CERT_OPTIONAL


def test_a_token_is_never_sent_over_plain_http() -> None:
    from webhook.report.promread import TLS, SourceError, scrape

    with pytest.raises(SourceError, match="https:// only"):
        scrape("http://127.0.0.1:1/metrics", TLS(), token="secret")
