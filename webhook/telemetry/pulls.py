"""Kubelet `Pulled` events: what they say about one container image of one pod. Pure.

The kubelet (pkg/kubelet/images/image_manager.go, `EnsureImageExists`) records one core/v1
Event with reason `Pulled` per container whose image it ensured, on the pod. The wording has
changed over releases; every form below is recognised:

- `Successfully pulled image "<ref>" in <d>`: older kubelets; `<d>` is measured from the
  pull request, so it includes the wait behind other pulls (`serializeImagePulls`).
- `Successfully pulled image "<ref>" in <d1> (<d2> including waiting)`: `<d1>` is the pull
  itself, `<d2>` includes the wait.
- the same followed by `. Image size: <n> bytes.` (newer kubelets).
- `Container image "<ref>" already present on machine`, and the newer
  `... already present on machine and can be accessed by the pod` (KEP-2535, ensure secret
  pulled images).

Durations are Go `time.Duration` strings (`2.3s`, `512ms`, `1m2.5s`, `845.5µs`, `0s`).
The pull time kept is the one including the wait: the delay the pod saw, and the only figure
the oldest wording gives, so old and new kubelets measure the same thing.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from webhook.core.objects import mapping, text

PullResult = Literal["pulled", "present"]
PULLED: PullResult = "pulled"
PRESENT: PullResult = "present"

_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0,
          "h": 3600.0}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_UNIT = r"(?:ns|us|µs|μs|ms|s|m|h)"
_DURATION = rf"(?:[-+]?(?:{_NUMBER}{_UNIT})+|0)"
_PART = re.compile(rf"({_NUMBER})({_UNIT})")
_QUOTED = r'"(?P<image>(?:[^"\\]|\\.)*)"'  # Go %q
_SUCCESS = re.compile(
    rf"Successfully pulled image {_QUOTED} in (?P<pull>{_DURATION})"
    rf"(?: \((?P<total>{_DURATION}) including waiting\))?"
    r"(?:\. Image size: (?P<size>\d+) bytes\.)?")
_PRESENT = re.compile(
    rf"Container image {_QUOTED} already present on machine"
    r"(?: and can be accessed by the pod)?")


@dataclass(frozen=True, slots=True)
class PullMessage:
    """One parsed message: `seconds` is 0 for an image already present."""

    image: str
    result: PullResult
    seconds: float
    size: int | None = None  # bytes, when the kubelet says


@dataclass(frozen=True, slots=True)
class PulledEvent:
    """The parts of a `Pulled` Event the telemetry needs."""

    pod_uid: str
    count: int  # occurrences aggregated into this Event object so far
    message: str


def go_duration(value: str) -> float | None:
    """Seconds from a Go `time.Duration.String()` value, or None when it is not one."""
    if value == "0":
        return 0.0
    sign = -1.0 if value[:1] == "-" else 1.0
    body = value.lstrip("+-")
    if not body or _PART.sub("", body):
        return None
    return sign * sum(float(n) * _UNITS[unit] for n, unit in _PART.findall(body))


def format_go_duration(seconds: float) -> str:
    """`seconds` as Go prints a Duration truncated to milliseconds (`1m2.5s`, `512ms`)."""
    ms = int(seconds * 1000 + 1e-6)
    if ms == 0:
        return "0s"
    if ms < 1000:
        return f"{ms}ms"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    whole, frac = divmod(rest, 1000)
    out = f"{hours}h" if hours else ""
    out += f"{minutes}m" if hours or minutes else ""
    return out + (f"{whole}.{frac:03d}".rstrip("0").rstrip(".") + "s")


def parse_message(message: str) -> PullMessage | None:
    """What a `Pulled` message says, or None for a wording this code does not know."""
    message = message.strip()
    found = _SUCCESS.fullmatch(message)
    if found is not None:
        seconds = go_duration(found["total"] or found["pull"])
        if seconds is None or seconds < 0:
            return None
        size = int(found["size"]) if found["size"] else None
        return PullMessage(_unquote(found["image"]), PULLED, seconds, size)
    found = _PRESENT.fullmatch(message)
    if found is not None:
        return PullMessage(_unquote(found["image"]), PRESENT, 0.0)
    return None


def pulled_event(event: Mapping[str, Any]) -> PulledEvent | None:
    """The Event as a pod's `Pulled` event, or None when it is about something else."""
    involved = mapping(event.get("involvedObject"))
    if event.get("reason") != "Pulled" or involved.get("kind") != "Pod":
        return None
    uid = text(involved.get("uid"))
    if not uid:
        return None
    count = event.get("count")
    if not isinstance(count, int) or count < 1:  # events.k8s.io-style writers: series.count
        count = mapping(event.get("series")).get("count")
        count = count if isinstance(count, int) and count >= 1 else 1
    return PulledEvent(uid, count, text(event.get("message")))


def _unquote(quoted: str) -> str:
    return re.sub(r"\\(.)", r"\1", quoted)
