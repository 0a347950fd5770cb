"""containerd as a `RuntimeSource`: its gRPC API over the unix socket, read-only.

Images.List gives each image's target descriptor; Content.Read streams a manifest (or index)
blob; Events.Subscribe tells image create/update/delete. Every call carries the
`containerd-namespace` header (kubelet's images live in `k8s.io`). The agent calls no method that
writes (no pull, no delete, no lease): the stubs are generated for whole services, the agent
uses List, Read and Subscribe only.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from typing import Any

import grpc

from webhook.core.layers import Platform
from webhook.registry.manifest import Manifest, ManifestError, parse_manifest

from .nodelayers import RuntimeImage
from .proto_gen.containerd.services.content.v1 import content_pb2, content_pb2_grpc
from .proto_gen.containerd.services.events.v1 import events_pb2, events_pb2_grpc
from .proto_gen.containerd.services.images.v1 import images_pb2, images_pb2_grpc
from .source import Snapshot, SourceUnavailable, pick_manifest

log = logging.getLogger(__name__)

DEFAULT_SOCKET = "/run/containerd/containerd.sock"
DEFAULT_NAMESPACE = "k8s.io"
IMAGE_TOPICS = ("/images/create", "/images/update", "/images/delete")
MAX_MANIFEST_BYTES = 4 << 20  # manifests are a few KiB; a bigger blob is not one we read
CALL_TIMEOUT = 30.0
# Gone or restarting daemon: the caller backs off. Anything else is a real error.
_UNAVAILABLE = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED,
                grpc.StatusCode.DEADLINE_EXCEEDED)


class MissingBlob(Exception):
    """The content store has no such blob (garbage-collected, or the pull never finished)."""


class ContainerdSource:
    runtime = "containerd"

    def __init__(self, socket: str = DEFAULT_SOCKET, namespace: str = DEFAULT_NAMESPACE) -> None:
        self.socket = socket
        self.namespace = namespace
        self._metadata = (("containerd-namespace", namespace),)
        self._channel: Any = None
        # Blobs are content-addressed, so a parsed manifest never goes stale; the cache keeps
        # what the last pass used and nothing more (bounded by the node's own images).
        self._manifests: dict[str, Manifest] = {}

    def _open(self) -> Any:
        if self._channel is None:
            # Fail fast when the daemon is down instead of waiting for it inside each call.
            self._channel = grpc.aio.insecure_channel(
                f"unix://{self.socket}", options=[("grpc.enable_retries", 0)])
        return self._channel

    async def close(self) -> None:
        if self._channel is not None:
            channel, self._channel = self._channel, None
            await channel.close()

    async def snapshot(self, platform: Platform) -> Snapshot:
        images_stub = images_pb2_grpc.ImagesStub(self._open())
        try:
            listed = await images_stub.List(images_pb2.ListImagesRequest(),
                                            metadata=self._metadata, timeout=CALL_TIMEOUT)
            used: dict[str, Manifest] = {}
            resolved: list[RuntimeImage] = []
            skipped = unmatched = 0
            for image in listed.images:
                target = image.target.digest
                try:
                    top = await self._manifest(target, used)
                    manifest_digest = target
                    if top.is_index:
                        chosen = pick_manifest(top.entries, platform)
                        if chosen is None:
                            unmatched += 1
                            continue
                        manifest_digest = chosen
                        top = await self._manifest(chosen, used)
                        if top.is_index:
                            raise ManifestError("nested index")
                except MissingBlob as exc:
                    log.debug("skipping %s: blob %s not in the content store", image.name, exc)
                    skipped += 1
                    continue
                except ManifestError as exc:
                    log.info("skipping %s: %s", image.name, exc)
                    skipped += 1
                    continue
                resolved.append(RuntimeImage(image.name, target, manifest_digest, top.layers))
        except grpc.aio.AioRpcError as exc:
            await self._drop_channel(exc)
            raise  # not reached: _drop_channel raises
        self._manifests = used
        return Snapshot(tuple(resolved), skipped, unmatched)

    async def _manifest(self, digest: str, used: dict[str, Manifest]) -> Manifest:
        found = used.get(digest) or self._manifests.get(digest)
        if found is None:
            found = parse_manifest(await self.read_blob(digest))
        used[digest] = found
        return found

    async def read_blob(self, digest: str) -> bytes:
        stub = content_pb2_grpc.ContentStub(self._open())
        request = content_pb2.ReadContentRequest(digest=digest)
        chunks: list[bytes] = []
        total = 0
        try:
            async for response in stub.Read(request, metadata=self._metadata,
                                            timeout=CALL_TIMEOUT):
                total += len(response.data)
                if total > MAX_MANIFEST_BYTES:
                    raise ManifestError(f"{digest}: larger than {MAX_MANIFEST_BYTES} bytes")
                chunks.append(response.data)
        except grpc.aio.AioRpcError as exc:
            if exc.code() == grpc.StatusCode.NOT_FOUND:
                raise MissingBlob(digest) from exc
            raise
        return b"".join(chunks)

    async def changes(self) -> AsyncIterator[str]:
        stub = events_pb2_grpc.EventsStub(self._open())
        # containerd filter syntax: the filters are ORed; each pins namespace and topic.
        filters = [f'namespace=={self.namespace},topic=="{topic}"' for topic in IMAGE_TOPICS]
        call = stub.Subscribe(events_pb2.SubscribeRequest(filters=filters),
                              metadata=self._metadata)
        try:
            async for envelope in call:
                yield str(envelope.topic)
        except grpc.aio.AioRpcError as exc:
            await self._drop_channel(exc)
        finally:
            call.cancel()
        raise SourceUnavailable("containerd closed the event stream")

    async def _drop_channel(self, exc: grpc.aio.AioRpcError) -> None:
        """A new channel after any failed call: the daemon may come back on a new socket."""
        await self.close()
        what = "unreachable" if exc.code() in _UNAVAILABLE else exc.code().name
        raise SourceUnavailable(f"containerd at {self.socket}: {what}: {exc.details()}") from exc
