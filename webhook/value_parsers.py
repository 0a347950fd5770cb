"""Sizes, booleans and log levels as people write them (`23MiB`, `yes`, `INFO`): the
settings' options read them, and so do the agent's, the simulator's and the local cluster's
flags."""

from __future__ import annotations

import re

_SIZE_RE = re.compile(r"^\s*(\d+)\s*([KMG]i?B?|B)?\s*$", re.IGNORECASE)
_UNITS = {"": 1, "b": 1, "k": 1000, "kb": 1000, "ki": 1 << 10, "kib": 1 << 10,
          "m": 10**6, "mb": 10**6, "mi": 1 << 20, "mib": 1 << 20,
          "g": 10**9, "gb": 10**9, "gi": 1 << 30, "gib": 1 << 30}


def parse_size(value: object) -> int:
    """`24117248`, `23MiB`, `23Mi`, `1GB` -> bytes."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _SIZE_RE.match(str(value))
    if not match:
        raise ValueError(f"not a size: {value!r} (use bytes or a unit like 23MiB)")
    return int(match.group(1)) * _UNITS[(match.group(2) or "").lower()]


def parse_bool(value: object) -> bool:
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off", ""):
        return False
    raise ValueError(f"not a boolean: {value!r}")


def parse_level(value: object) -> str:
    """A log level: debug, info, warning or error (any case)."""
    text = str(value).lower()
    if text not in ("debug", "info", "warning", "error"):
        raise ValueError("expected debug, info, warning or error")
    return text
