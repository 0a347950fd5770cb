"""Log lines a client can cause, throttled: one per kind every few seconds, with the count of
the lines held back, so that misbehaviour cannot become a flood of logs."""

from __future__ import annotations

import logging
import time

# Kinds of one-line log messages, each throttled on its own.
THROTTLE_SECONDS = 10.0


class ThrottledLog:
    """One line per event kind at most every THROTTLE_SECONDS, with the count of the lines
    held back meanwhile: a client cannot turn its misbehaviour into a flood of logs."""

    def __init__(self, logger: logging.Logger, seconds: float = THROTTLE_SECONDS) -> None:
        self.logger = logger
        self.seconds = seconds
        self._last: dict[str, float] = {}
        self._held: dict[str, int] = {}

    def warning(self, kind: str, message: str, *args: object) -> None:
        now = time.monotonic()
        if now - self._last.get(kind, -self.seconds) < self.seconds:
            self._held[kind] = self._held.get(kind, 0) + 1
            return
        self._last[kind] = now
        held = self._held.pop(kind, 0)
        suffix = f" ({held} more since the last such line)" if held else ""
        self.logger.warning(message + suffix, *args)
