"""Reviews before watch events on the event loop they share.

A replica answers AdmissionReviews and applies every pod's watch events on one event loop
(the index is touched by the loop alone). Applied back to back, a burst of events keeps a
review that arrived meanwhile waiting behind all of them. So watch consumers apply events in
slices of a fraction of a millisecond and, between slices, give the loop back and let the
reviews in flight go first (webhook.serving.connections says when a review's first bytes
arrive and when its handler is done), waiting at most a bound each time so that a steady
stream of reviews slows the watch down but never stops it.

One Pacer per event loop, found by the loop: the serving edge and the reflectors never hold a
reference to each other, and a server in a test with its own loop has its own.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref

# Events applied in one go before the loop is given back: a review that arrives meanwhile
# waits at most about this long behind the watch.
SLICE_SECONDS = 0.0003
# The longest a watch consumer waits for the reviews in flight before it applies one more
# slice anyway: under saturation the watch still gets about SLICE / (SLICE + WAIT) of the loop.
MAX_WAIT_SECONDS = 0.002


class Pacer:
    """Counts the reviews in flight on one loop; watch consumers take turns around them."""

    def __init__(self) -> None:
        self.in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()

    def hold(self) -> None:
        """A review's first bytes arrived: watch consumers let it go first."""
        self.in_flight += 1
        self._idle.clear()

    def release(self) -> None:
        """That review was answered (or its connection went away)."""
        self.in_flight = max(0, self.in_flight - 1)
        if not self.in_flight:
            self._idle.set()

    async def turn(self, max_wait: float = MAX_WAIT_SECONDS) -> None:
        """Between two slices of watch events: give the loop back, then wait while reviews
        are in flight (at most `max_wait`)."""
        # Twice: what was ready before this slice ended runs first, the loop then reads its
        # sockets, and a review that arrived during the slice has said so by the second.
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        if self.in_flight:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max_wait):
                    await self._idle.wait()


_PACERS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pacer] = (
    weakref.WeakKeyDictionary())


def pacer() -> Pacer:
    """The running loop's Pacer."""
    loop = asyncio.get_running_loop()
    found = _PACERS.get(loop)
    if found is None:
        found = _PACERS[loop] = Pacer()
    return found
