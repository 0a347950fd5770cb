"""What a Reflector (reflector.py) is set with, reports to and tells apart: its settings, the
counters it reports, and the failures that decide what it does next (410 Gone: relist; a
resource not served: retry quietly later; a watch-list refused: pages instead)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

from webhook.inventory.pacing import SLICE_SECONDS
from webhook.inventory.streams import Refused

# A watch-list the server or the client refuses (an unknown parameter, the feature off, the
# resource not served): listed in pages instead.
_REFUSED = frozenset({400, 403, 404, 422})


@dataclass(frozen=True, slots=True)
class ReflectorSettings:
    # kube-apiserver (v1.37) serves a page from its watch cache by collecting every object
    # from the continue key to the end, then keeping `limit` (store.OrderedListPrefix): n
    # objects in pages of p cost it n^2/2p collected. 50,000 pods in pages of 100: 2.6 GB
    # allocated for two replicas' relists, in pages of 500: 1.05 GB, the replica's peak RSS
    # 6 MB more (bench.served.relist). Callers cap it per resource (Nodes, NodeLayers: bigger).
    # The first page's: the pages after it are sized from its remainingItemCount
    # (streams.next_limit).
    page_size: int = 500
    watch_timeout_seconds: int = 300  # server-side; the stream then ends and is resumed
    connect_timeout_seconds: float = 10.0
    read_timeout_seconds: float = 330.0  # longer than the server-side watch timeout
    backoff_initial: float = 0.5
    backoff_max: float = 30.0
    # The initial state as a watch stream (sendInitialEvents) instead of paged lists. Off:
    # measured heavier for kube-apiserver v1.37 serving JSON than pages of 500 (it deep-copies
    # every object it streams: 1.4-3.5 GB allocated and 15-24 s of CPU for two replicas'
    # relists of 50,000 pods, against 1.05 GB and 7-13 s; bench.served.relist), and a server that
    # ignores the parameter (before 1.27, a stand-in) would never end the state.
    watch_list: bool = False
    slice_seconds: float = SLICE_SECONDS  # events applied before the loop is given back

    @property
    def request_timeout(self) -> tuple[float, float]:
        """(connect, read): a short connect timeout keeps shutdown quick."""
        return (self.connect_timeout_seconds, self.read_timeout_seconds)


class ReflectorMetrics(Protocol):
    """Counters a reflector reports to (webhook.serving.metrics.InventoryMetrics)."""

    def watch_restart(self, resource: str) -> None: ...
    def relist(self, resource: str, reason: str) -> None: ...
    def event_lag(self, seconds: float) -> None: ...


class NoMetrics:
    def watch_restart(self, resource: str) -> None:
        pass

    def relist(self, resource: str, reason: str) -> None:
        pass

    def event_lag(self, seconds: float) -> None:
        pass


class Expired(Exception):
    """The resourceVersion is too old (410 Gone in a watch ERROR event): relist."""


class Unavailable(Exception):
    """The resource is not served (an optional CRD not installed): the list call raises this
    to be retried after `retry_after` seconds, quietly (the caller logs what it means)."""

    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


def expired(exc: BaseException) -> bool:
    """410 Gone, as an ERROR event or as the HTTP status of a list or watch request (an
    expired `continue` token, say): the one test every path goes through."""
    return isinstance(exc, Expired) or getattr(exc, "status", None) == 410


def refused(exc: BaseException) -> bool:
    """The watch-list request itself was refused: the client does not take its parameters
    (the kubernetes package validates the arguments of its methods), or the server answered
    a client error for them."""
    return isinstance(exc, Refused) or getattr(exc, "status", None) in _REFUSED
