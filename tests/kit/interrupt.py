"""SIGTERM taken as an interrupt, so a run stopped from outside (a CI time limit, `kill`)
still tears its fixtures down: pytest's own SIGTERM is the default one, which ends the
process at once and leaves what the fixtures started (a real node's containerd shims, its
cgroups) running. SIGINT already raises KeyboardInterrupt; this makes SIGTERM the same."""

from __future__ import annotations

import signal
from types import FrameType


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def tear_down_on_sigterm() -> None:
    """Install the handler, unless someone else has put one in place."""
    if signal.getsignal(signal.SIGTERM) in (signal.SIG_DFL, None):
        signal.signal(signal.SIGTERM, _interrupt)
