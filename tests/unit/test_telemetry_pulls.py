"""Kubelet `Pulled` messages, every wording the kubelet has used (the format strings are those
of pkg/kubelet/images/image_manager.go; the sample messages are as kubelets print them), and
Go durations."""

from __future__ import annotations

from typing import Any

import pytest

from webhook.telemetry.pulls import (
    PullMessage,
    format_go_duration,
    go_duration,
    parse_message,
    pulled_event,
)


@pytest.mark.parametrize(("message", "expected"), [
    # Older kubelets: one duration, measured from the request (includes the wait).
    ('Successfully pulled image "nginx" in 1.153849709s',
     PullMessage("nginx", "pulled", 1.153849709)),
    # "(... including waiting)": the second duration includes the wait; it is the one kept.
    ('Successfully pulled image "docker.io/istio/proxyv2:1.20.2" in 32.341313682s '
     '(32.341329515s including waiting)',
     PullMessage("docker.io/istio/proxyv2:1.20.2", "pulled", 32.341329515)),
    # Newer kubelets: both durations truncated to ms, then the image size.
    ('Successfully pulled image "g1g1/py-kube" in 15.981s (15.981s including waiting). '
     'Image size: 129338587 bytes.',
     PullMessage("g1g1/py-kube", "pulled", 15.981, 129338587)),
    ('Successfully pulled image "registry.example.com/team/app@sha256:abc" in 1m2.5s '
     '(1m4.25s including waiting). Image size: 94371840 bytes.',
     PullMessage("registry.example.com/team/app@sha256:abc", "pulled", 64.25, 94371840)),
    ('Successfully pulled image "busybox" in 512ms (512ms including waiting). '
     'Image size: 2150000 bytes.', PullMessage("busybox", "pulled", 0.512, 2150000)),
    ('Container image "busybox:1.36" already present on machine',
     PullMessage("busybox:1.36", "present", 0.0)),
    # KEP-2535 (ensure secret pulled images) wording.
    ('Container image "ghcr.io/ggml-org/llama.cpp:server" already present on machine and can '
     'be accessed by the pod', PullMessage("ghcr.io/ggml-org/llama.cpp:server", "present", 0.0)),
])
def test_every_kubelet_wording_parses(message: str, expected: PullMessage) -> None:
    assert parse_message(message) == expected


@pytest.mark.parametrize("message", [
    "",
    'Pulling image "nginx"',
    'Container image "nginx" is not present with pull policy of Never',
    'Successfully pulled image "nginx" in soon',
    'Successfully pulled image "nginx" in 2.3',  # no unit
    'Successfully pulled image "nginx" in 2.3s (lots including waiting)',
    'Successfully pulled image "nginx" in 2.3s (2.4s including waiting). Image size: many bytes.',
    'Successfully pulled image "nginx" in -2s',
    'Successfully pulled image nginx in 2s',  # not quoted
    'Container image "nginx" already present on machine, probably',
])
def test_other_messages_are_not_guessed(message: str) -> None:
    assert parse_message(message) is None


@pytest.mark.parametrize(("text", "seconds"), [
    ("0s", 0.0), ("0", 0.0), ("2.3s", 2.3), ("512ms", 0.512), ("845.5µs", 845.5e-6),
    ("845.5μs", 845.5e-6), ("12us", 12e-6), ("300ns", 300e-9), ("1m2.5s", 62.5),
    ("2h0m0s", 7200.0), ("1h30m", 5400.0), ("-1.5s", -1.5),
])
def test_go_durations(text: str, seconds: float) -> None:
    assert go_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize("text", ["", "s", "1.5", "1x", "1s2", "one second", "1s 2s"])
def test_not_go_durations(text: str) -> None:
    assert go_duration(text) is None


@pytest.mark.parametrize(("seconds", "text"), [
    # As Go prints time.Duration(...).Truncate(time.Millisecond).
    (0.0, "0s"), (0.0004, "0s"), (0.512, "512ms"), (1.0, "1s"), (2.25, "2.25s"),
    (62.5, "1m2.5s"), (60.0, "1m0s"), (3600.0, "1h0m0s"), (3725.125, "1h2m5.125s"),
])
def test_format_go_duration(seconds: float, text: str) -> None:
    assert format_go_duration(seconds) == text
    assert go_duration(text) == pytest.approx(int(seconds * 1000) / 1000)


def event(**fields: Any) -> dict[str, Any]:
    obj: dict[str, Any] = {
        "metadata": {"name": "web.17a", "namespace": "shop", "uid": "ev-1"},
        "reason": "Pulled", "message": "m", "count": 1,
        "involvedObject": {"kind": "Pod", "uid": "pod-1", "name": "web", "namespace": "shop"},
    }
    obj.update(fields)
    return obj


def test_pulled_event_fields() -> None:
    pulled = pulled_event(event(count=3))
    assert pulled is not None and (pulled.pod_uid, pulled.count, pulled.message) == (
        "pod-1", 3, "m")
    # events.k8s.io writers: the repeat count is in series.count.
    pulled = pulled_event(event(count=None, series={"count": 4}))
    assert pulled is not None and pulled.count == 4
    pulled = pulled_event(event(count=None))
    assert pulled is not None and pulled.count == 1


@pytest.mark.parametrize("fields", [
    {"reason": "Pulling"},
    {"involvedObject": {"kind": "Node", "uid": "n"}},
    {"involvedObject": {"kind": "Pod"}},  # no uid: cannot be matched to a pod
])
def test_events_about_something_else_are_ignored(fields: dict[str, Any]) -> None:
    assert pulled_event(event(**fields)) is None
