"""An inventory held entirely in memory: static files, the demo, explain, tests."""

from __future__ import annotations

from webhook.core.index import LayerIndex


class StaticInventory:
    """A fixed index, ready from the start."""

    def __init__(self, index: LayerIndex) -> None:
        self._index = index

    @property
    def index(self) -> LayerIndex:
        return self._index

    @property
    def ready(self) -> bool:
        return True
