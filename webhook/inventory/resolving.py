"""Node images the layer sources do not know yet: resolved in the background, and the nodes
that reported them re-indexed when an answer arrives; each image's last answer remembered.

The live inventory asks `recall` for every image a node reports (node_layers) and `queue`s the
ones no source answers from memory. Bounded: at most `max_pending` images wait (the rest are
tried again at the node's next event), at most `max_known` answers are kept (LRU).
Event loop only.
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable

from webhook.core.images import try_parse
from webhook.core.layers import ImageLayers, SourceChain

log = logging.getLogger(__name__)


class ImageResolutions:
    def __init__(self, sources: SourceChain, reindex: Callable[[str], None],
                 max_pending: int, max_known: int) -> None:
        self._sources = sources
        self._reindex = reindex
        self._max_pending = max_pending
        self._max_known = max_known
        self._waiting: dict[str, set[str]] = {}  # unresolved image name -> nodes reporting it
        self._known: OrderedDict[str, ImageLayers] = OrderedDict()
        self._queue: asyncio.Queue[str] = asyncio.Queue()

    def recall(self, name: str, image: ImageLayers | None) -> ImageLayers | None:
        """Remember each node image's answer; a tag the sources no longer vouch for (its TTL
        ran out) keeps its last answer until the refresh arrives: the layers of an image do
        not vanish from a node meanwhile."""
        if image is None:
            return self._known.get(name)
        self._known[name] = image
        self._known.move_to_end(name)
        if len(self._known) > self._max_known:
            self._known.popitem(last=False)
        return image

    def queue(self, name: str, node: str | None) -> None:
        """Resolve `name` in the background; `node` (if any) is re-indexed once it is known."""
        waiting = self._waiting.get(name)
        if waiting is None:
            if len(self._waiting) >= self._max_pending:
                return
            self._waiting[name] = waiting = set()
            self._queue.put_nowait(name)
        if node is not None:
            waiting.add(node)

    async def loop(self) -> None:
        """One resolver: takes queued names until cancelled (run several for concurrency)."""
        while True:
            name = await self._queue.get()
            try:
                ref = try_parse(name)
                image = await self._sources.resolve(ref) if ref is not None else None
                nodes = self._waiting.pop(name, set())
                if image is not None:
                    for node in nodes:
                        self._reindex(node)
            except Exception as exc:  # never let one image stop the loop
                log.warning("re-indexing after resolving %s failed: %s", name, exc)
            finally:
                self._queue.task_done()

    async def join(self) -> None:
        """Until every name queued so far has been tried."""
        await self._queue.join()
