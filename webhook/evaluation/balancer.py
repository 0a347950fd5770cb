"""A balancer standing for the Service in front of several webhook replicas, which also says how
the reviews were split. It terminates the API server's TLS with the webhook's own certificate
and passes each review on to a replica (over TLS, verified by the same CA), by a `Split`:

- `connection`: each connection the API server opens goes to one replica, picked at random, as
  kube-proxy's iptables mode does; the API server keeps its connections open and reuses them,
  so a burst's reviews split by connection, not by request, as in a cluster (the default);
- `one`: every review to the first replica (one connection holding everything);
- `even`: review by review in turn (an even split, as a per-request balancer would make it).

It counts, per replica, the connections pinned to it and the reviews it received, and per
API-server connection, its reviews: the evaluation reports both for every run."""

from __future__ import annotations

import itertools
import random
import ssl
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from aiohttp import ClientSession, ClientTimeout, TCPConnector, web

Split = Literal["connection", "one", "even"]
SPLITS: tuple[Split, ...] = ("connection", "one", "even")
_TIMEOUT = ClientTimeout(total=30)


@dataclass(slots=True)
class SplitCounts:
    """How the reviews of a run were spread."""

    split: Split
    connections: list[int]  # API-server connections pinned to each replica (`connection`)
    reviews: list[int]  # reviews each replica received
    per_connection: list[int] = field(default_factory=list)  # reviews each connection carried


class Balancer:
    def __init__(self, backends: Sequence[int], ca_cert: Path, cert: Path, key: Path,
                 split: Split = "connection", rng: random.Random | None = None) -> None:
        self._backends = list(backends)
        self._rng = rng or random.Random()
        self._split: Split = split
        self._turn = itertools.cycle(range(len(self._backends)))
        self._server_ssl = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._server_ssl.load_cert_chain(str(cert), str(key))
        self._client_ssl = ssl.create_default_context(cafile=str(ca_cert))
        # An API-server connection (aiohttp's handler of it) -> its replica and its index.
        self._pinned: dict[int, tuple[object, int, int]] = {}
        self.counts = SplitCounts(split, [0] * len(self._backends), [0] * len(self._backends))
        self._session: ClientSession | None = None
        self._runner: web.AppRunner | None = None

    async def start(self, port: int, host: str = "127.0.0.1") -> None:
        self._session = ClientSession(connector=TCPConnector(ssl=self._client_ssl),
                                      timeout=_TIMEOUT)
        app = web.Application(client_max_size=16 << 20)
        app.router.add_route("*", "/{path:.*}", self._forward)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, host, port, ssl_context=self._server_ssl).start()

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
        if self._session is not None:
            await self._session.close()

    def pick(self, connection: object) -> int:
        """The replica for the next review arriving on `connection`."""
        pinned = self._pinned.get(id(connection))
        if pinned is None or pinned[0] is not connection:
            choice = self._rng.randrange(len(self._backends)) if self._split == "connection" \
                else 0
            pinned = (connection, choice, len(self.counts.per_connection))
            self._pinned[id(connection)] = pinned
            if self._split != "even":  # `even` pins no connection to a replica
                self.counts.connections[choice] += 1
            self.counts.per_connection.append(0)
        self.counts.per_connection[pinned[2]] += 1
        if self._split == "even":
            return next(self._turn)
        return pinned[1]

    async def _forward(self, request: web.Request) -> web.Response:
        assert self._session is not None
        choice = self.pick(request.protocol)
        self.counts.reviews[choice] += 1
        body = await request.read()
        url = f"https://127.0.0.1:{self._backends[choice]}{request.path_qs}"
        headers = {k: v for k, v in request.headers.items()
                   if k.lower() in ("content-type", "accept")}
        try:
            async with self._session.request(request.method, url, data=body,
                                             headers=headers) as answer:
                payload = await answer.read()
                return web.Response(body=payload, status=answer.status,
                                    content_type=answer.content_type)
        except OSError:
            raise web.HTTPBadGateway() from None
